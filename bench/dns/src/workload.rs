//! The benchmark's zone and query file, written from a size and a fixed seed, so that every
//! server and every generator sees the same names.

use std::path::Path;

use crate::ORIGIN;

/// Writes the zone to `path`: an apex with SOA, NS, MX and TXT, the name servers and mail
/// host, `names` hosts with an A record (the even ones an AAAA too), and a CNAME to a host for
/// every tenth. Returns the number of records and the query mix [`write_queries`] draws, in
/// words.
pub fn write_zone(path: &Path, names: usize) -> Result<(usize, String), String> {
    let mut z = String::new();
    z.push_str(&format!(
        "$ORIGIN {ORIGIN}\n$TTL 3600\n@ IN SOA ns1 hostmaster 2026112901 7200 900 1209600 300\n\
         @ IN NS ns1\n@ IN NS ns2\n@ IN MX 10 mail\n@ IN TXT \"v=spf1 mx -all\"\n\
         ns1 IN A 192.0.2.53\nns2 IN A 192.0.2.54\nmail IN A 192.0.2.25\n"
    ));
    let mut records = 8;
    for i in 0..names {
        z.push_str(&format!(
            "host{i} IN A 10.{}.{}.{}\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        ));
        records += 1;
        if i % 2 == 0 {
            z.push_str(&format!("host{i} IN AAAA 2001:db8::{:x}\n", i + 1));
            records += 1;
        }
        if i % 10 == 0 {
            z.push_str(&format!("alias{i} IN CNAME host{i}\n"));
            records += 1;
        }
    }
    std::fs::write(path, z).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((
        records,
        "A of hosts 50%, AAAA 15% (half of them NODATA), CNAME to a host 10%, \
         apex MX 5% and NS 5%, missing names 15% (NXDOMAIN)"
            .into(),
    ))
}

/// The query file in dnsperf's format (`NAME TYPE` per line): `count` queries over a zone of
/// `names` hosts, drawn with a fixed seed in the proportions [`write_zone`] names.
pub fn queries(names: usize, count: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let names = names.max(1);
    let mut q = String::new();
    for _ in 0..count {
        let kind = next() % 100;
        let i = next() as usize % names;
        let line = match kind {
            0..50 => format!("host{i}.{ORIGIN} A"),
            50..65 => format!("host{i}.{ORIGIN} AAAA"),
            65..75 => format!("alias{}.{ORIGIN} A", i / 10 * 10),
            75..80 => format!("{ORIGIN} MX"),
            80..85 => format!("{ORIGIN} NS"),
            _ => format!("missing{i}.{ORIGIN} A"),
        };
        q.push_str(&line);
        q.push('\n');
    }
    q
}

/// Writes [`queries`] to `path`.
pub fn write_queries(path: &Path, names: usize, count: usize) -> Result<(), String> {
    std::fs::write(path, queries(names, count)).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_mix_has_its_proportions_and_is_the_same_every_time() {
        let q = queries(1000, 20_000);
        assert_eq!(q, queries(1000, 20_000));
        let lines: Vec<&str> = q.lines().collect();
        assert_eq!(lines.len(), 20_000);
        let share = |f: &dyn Fn(&str) -> bool| {
            lines.iter().filter(|l| f(l)).count() as f64 / lines.len() as f64
        };
        let missing = share(&|l| l.starts_with("missing"));
        let aaaa = share(&|l| l.ends_with(" AAAA"));
        assert!((0.13..0.17).contains(&missing), "{missing}");
        assert!((0.13..0.17).contains(&aaaa), "{aaaa}");
        // Every queried host and alias exists in a zone of that size.
        assert!(lines.iter().all(|l| !l.starts_with("host1000.")));
    }
}
