//! Under a small `-m`, items are evicted least recently used first: the process stays within the
//! limit (plus its fixed overhead), the statistics say so, and recently used keys survive.

mod common;

use std::io::Write;

use common::{roundtrip, start_kv};

fn stat(reply: &[u8], name: &str) -> u64 {
    let text = String::from_utf8_lossy(reply);
    let prefix = format!("STAT {name} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line[prefix.len()..].trim().parse().unwrap()
}

#[test]
fn small_memory_limit_evicts_least_recently_used() {
    const LIMIT_MB: usize = 4;
    let kv = start_kv(&["-m", &LIMIT_MB.to_string(), "-I", "512k"]);
    let mut c = kv.connect();
    let baseline_rss = kv.rss_bytes();
    let value = vec![b'v'; 4000];
    // 64 MB written into a 4 MB store, pipelined in batches.
    let total_keys = 16_000;
    let hot = "hot-key";
    let mut batch = Vec::new();
    for i in 0..total_keys {
        batch.extend_from_slice(format!("set key{i} 0 0 {} noreply\r\n", value.len()).as_bytes());
        batch.extend_from_slice(&value);
        batch.extend_from_slice(b"\r\n");
        if i % 100 == 0 {
            // Keep one key in use throughout: it must never be the least recently used.
            batch.extend_from_slice(
                format!("set {hot} 0 0 1 noreply\r\nh\r\nget {hot}\r\n").as_bytes(),
            );
        }
        if batch.len() > 256 << 10 {
            let reply = roundtrip(&mut c, &batch);
            assert!(!String::from_utf8_lossy(&reply).contains("ERROR"));
            batch.clear();
        }
    }
    c.write_all(&batch).unwrap();
    let stats = roundtrip(&mut c, b"stats\r\n");
    let limit = (LIMIT_MB << 20) as u64;
    assert_eq!(stat(&stats, "limit_maxbytes"), limit);
    assert!(
        stat(&stats, "bytes") <= limit,
        "bytes {} over the {limit} limit",
        stat(&stats, "bytes")
    );
    assert!(stat(&stats, "evictions") > 0);
    let items = stat(&stats, "curr_items");
    assert!(items > 100 && items < total_keys as u64, "{items} items");

    // The hot key and the most recently written keys survive; the oldest are gone.
    let reply = roundtrip(&mut c, format!("get {hot}\r\n").as_bytes());
    assert_eq!(reply, format!("VALUE {hot} 0 1\r\nh\r\nEND\r\n").as_bytes());
    let recent = items / 4;
    for i in (total_keys as u64 - recent)..total_keys as u64 {
        let reply = roundtrip(&mut c, format!("get key{i}\r\n").as_bytes());
        assert!(
            reply.starts_with(format!("VALUE key{i} 0 4000\r\n").as_bytes()),
            "recent key{i} was evicted"
        );
    }
    for i in 0..100 {
        let reply = roundtrip(&mut c, format!("get key{i}\r\n").as_bytes());
        assert_eq!(reply, b"END\r\n", "old key{i} survived");
    }

    // Resident memory: the 4 MB of items plus a bounded overhead, not the 64 MB written.
    let grown = kv.rss_bytes().saturating_sub(baseline_rss);
    assert!(
        grown < 3 * (LIMIT_MB << 20),
        "RSS grew by {grown} bytes under a {LIMIT_MB} MB limit"
    );
}
