//! Meta-protocol cases settled against memcached 1.6.18, request by request: base64 keys (`b`)
//! with bytes outside the alphabet, padding and length limits on every meta command; the form in
//! which `k` and `me` echo a key; `l` and `h` after writes, touches and reads; `ma` with `T`.
//!
//! Each case goes to the real memcached over TCP and to a [`Session`] in this process, whose clock
//! is read off memcached's: every batch of requests is sent whole, between two `mg` of a witness
//! item stored with a 100000 s TTL, so its remaining TTL says how many of memcached's seconds have
//! passed; a batch inside which memcached's clock ticked is run again from the start. The replies
//! must be byte-identical, except in the cases where corral-kv answers otherwise on purpose
//! (`docs/architecture.md`, the key-value server): there both answers are pinned.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::differential::MEMCACHED_FLAGS;
use common::{start_memcached, try_read_until};
use corral_memcache::{Limits, Session, Status, Store, StoreConfig};

const WITNESS_TTL: u32 = 100_000;
/// Stores the witness, silently; sent before the first batch.
const SETUP: &[u8] = b"ms __clock 1 T100000 q\r\nx\r\n";
/// Reads the witness's remaining TTL; sent before and after every batch.
const WITNESS: &[u8] = b"mg __clock t Oclk\r\n";
const WITNESS_END: &[u8] = b" Oclk\r\n";
/// Between batches: at least two of memcached's one-second ticks.
const PAUSE: Duration = Duration::from_millis(2200);
/// The session's clock when the witness is stored.
const NOW0: u32 = 1000;

/// Which memcached configurations a case holds for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    /// memcached as installed (segmented LRU, its maintainer thread running) and with
    /// [`MEMCACHED_FLAGS`].
    Both,
    /// Only as installed: where memcached's answer depends on its segmented LRU.
    Default,
    /// Only with [`MEMCACHED_FLAGS`]: where memcached's answer depends on nothing else holding
    /// a reference to the item.
    NoBackgroundThreads,
}

struct Case {
    name: &'static str,
    config: Config,
    /// Requests sent whole, [`PAUSE`] apart.
    batches: Vec<Vec<u8>>,
    /// `None`: corral-kv answers as memcached. `Some((memcached, corral_kv))`: an intentional
    /// difference; all replies of the case, in order, from each.
    differs: Option<(&'static str, &'static str)>,
}

fn case(name: &'static str, config: Config, batches: &[&[u8]]) -> Case {
    Case {
        name,
        config,
        batches: batches.iter().map(|b| b.to_vec()).collect(),
        differs: None,
    }
}

fn kept(
    name: &'static str,
    batch: &[u8],
    memcached: &'static str,
    corral_kv: &'static str,
) -> Case {
    Case {
        differs: Some((memcached, corral_kv)),
        ..case(name, Config::Both, &[batch])
    }
}

fn cases() -> Vec<Case> {
    // 248 base64 characters decode to 186 bytes; memcached limits the key before decoding it.
    let k248 = "QUJD".repeat(62);
    let k250 = format!("{k248}\x01\x01");
    let k251 = format!("{k248}\x01\x01\x01");
    let k252 = "QUJD".repeat(63);
    let long_keys = format!(
        "ms {k250} 1 b k\r\nv\r\nmg {k248} b s\r\nmg {k252} b s\r\nms {k252} 1 b\r\nx\r\n\
         mg {k251} b s\r\nmd {k252} b\r\nma {k252} b\r\nme {k252} b\r\n"
    );
    let mut cases =
        vec![
        case(
            "base64: bytes outside the alphabet are skipped by every meta command",
            Config::Both,
            &[b"ms QUJD\x01 1 b k\r\nx\r\nmg Q\x01U\x7fJ\xffD b k v\r\nmg ABC k s\r\n\
                me QUJD\x01 b\r\nms TlVN\x02 1 b\r\n7\r\nma TlVN\x02 b v k\r\n\
                md QUJD\x01 b k\r\nmg ABC\r\nmn QUJD\x01 b\r\n"],
        ),
        case(
            "base64: what cannot be decoded, in each command's words",
            Config::Both,
            &[b"mg QU b\r\nms QU 1 b\r\nx\r\nmd QU b\r\nma QU b\r\nme QU b\r\nmn QU b\r\n\
                mg !!!! b\r\nmg Q=== b\r\nmg QUJD==== b\r\nmg QQ==Q b\r\n"],
        ),
        case(
            "base64: the first padded group ends the key",
            Config::Both,
            &[b"mg QQ==QUJD b k\r\nms QQ==QUJD 1 b k\r\nq\r\nmg QQ== b k v\r\n\
                mg Q=JD b k\r\nmg QUI=QUJD b k\r\n"],
        ),
        case(
            "base64: the key length limit applies before decoding",
            Config::Both,
            &[long_keys.as_bytes()],
        ),
        case(
            "k: a hit echoes the key as the item holds it, anything else as requested",
            Config::Both,
            &[b"ms azMy 2 b\r\nhi\r\nmg k32 t k\r\nmg azMy b k v\r\nme k32\r\n\
                ms k33 2\r\nhi\r\nmg azMz b k\r\nme azMz b\r\nmg k32 O9 k s\r\nmg k32 k Oabc\r\n\
                mg azMx b k O7\r\nmd k32 k O8\r\nms azM1 1 b\r\n5\r\nma k35 k O1\r\n\
                ma azM1 b k v\r\nmg k35 k v\r\nms azM2 1 b\r\n1\r\nset k36 0 0 1\r\n2\r\n\
                mg azM2 b k\r\nms azM4 1 b\r\n1\r\ntouch k38 100\r\ngat 100 k38\r\nmg k38 k\r\n\
                ms azM5 1 b\r\n1\r\nms k39 1\r\n2\r\nmg azM5 b k v\r\nms azM5 1 b I C1\r\n3\r\n\
                mg k39 k v\r\nms k40 1 k O4\r\nz\r\nms azQx 1 b k MR O5 c\r\nz\r\n"],
        ),
        case(
            "h and l: touch, gat, gats and mg T mark an item fetched; reads keep its access time",
            Config::Both,
            &[
                b"set t 0 0 1\r\n1\r\nset g 0 0 1\r\n1\r\nset gs 0 0 1\r\n1\r\n\
                  set m 0 0 1\r\n1\r\nset u 0 0 1\r\n1\r\nset n 0 0 1\r\n1\r\n",
                b"touch t 0\r\ngat 0 g\r\ngats 0 gs\r\nmg m T0\r\nmg u T0 u\r\nme t\r\n\
                  mg t l h t\r\nmg g l h t\r\nmg gs l h t\r\nmg m l h t\r\nmg u l h t\r\n\
                  mg n l h t\r\n",
            ],
        ),
        case(
            "l: writes that keep or replace an item stamp its access time",
            Config::Default,
            &[
                b"set a 0 0 2\r\n10\r\nset b 0 0 2\r\n10\r\nset c 0 0 2\r\n10\r\n\
                  set d 0 0 2\r\n99\r\nset e 0 0 2\r\n10\r\nset g 0 0 2\r\n10\r\n\
                  set i 0 0 2\r\n10\r\nset f 0 0 2\r\n10\r\n",
                b"add a 0 0 1\r\nx\r\nappend b 0 0 1\r\nx\r\nprepend c 0 0 1\r\nx\r\n\
                  incr d 1\r\nma e\r\nma g MD\r\ndecr i 1\r\nmg a l\r\nmg b l\r\nmg c l\r\n\
                  mg d l\r\nmg e l\r\nmg g l\r\nmg i l\r\nmg f l\r\n",
            ],
        ),
        case(
            "h: a changed item is unfetched unless changed in place",
            Config::NoBackgroundThreads,
            &[b"set a 0 0 2\r\n10\r\nset b 0 0 2\r\n10\r\nset c 0 0 2\r\n10\r\n\
                set d 0 0 2\r\n99\r\nset e 0 0 2\r\n10\r\nset f 0 0 2\r\n10\r\n\
                get a b c d e f\r\nappend a 0 0 1\r\nx\r\ncas b 0 0 1 3\r\nx\r\n\
                ms c 1 MP\r\nx\r\nincr d 1\r\nincr e 1\r\nma f\r\n\
                mg a h\r\nmg b h\r\nmg c h\r\nmg d h\r\nmg e h\r\nmg f h\r\n"],
        ),
        case(
            "ma T: the new TTL applies in place and on a vivified item",
            Config::NoBackgroundThreads,
            &[b"set d3 0 0 2\r\n10\r\nma d3 T100 t v\r\nmg d3 t v\r\n\
                ma new N0 J5 T100 t v\r\nmg new t v\r\n"],
        ),
        kept(
            "ma T when the number grows: memcached drops the new TTL",
            b"set d2 0 0 2\r\n99\r\nma d2 T100 t v\r\nmg d2 t v\r\n",
            "STORED\r\nVA 3 t100\r\n100\r\nVA 3 t-1\r\n100\r\n",
            "STORED\r\nVA 3 t100\r\n100\r\nVA 3 t100\r\n100\r\n",
        ),
        kept(
            "k after a rebuild: memcached forgets that the key was base64",
            b"ms azM0 1 b\r\n1\r\nms azM0 1 b MA\r\nx\r\nmg k34 k v\r\n\
              ms azM1 1 b\r\n9\r\nma azM1 b\r\nmg k35 k v\r\n\
              ms azM2 1 b\r\n1\r\nprepend k36 0 0 1\r\nz\r\nmg k36 k v\r\n",
            "HD\r\nHD\r\nVA 2 kk34\r\n1x\r\nHD\r\nHD\r\nVA 2 kk35\r\n10\r\n\
             HD\r\nSTORED\r\nVA 2 kk36\r\nz1\r\n",
            "HD\r\nHD\r\nVA 2 kazM0 b\r\n1x\r\nHD\r\nHD\r\nVA 2 kazM1 b\r\n10\r\n\
             HD\r\nSTORED\r\nVA 2 kazM2 b\r\nz1\r\n",
        ),
        kept(
            "k on a vivified item: memcached echoes a base64 key decoded",
            b"mg QUJD b N30 k\r\nmg QUJD b k\r\nma QUJE b N30 J5 k\r\nmg QUJE b k\r\nme QUJD b\r\n",
            "HD kABC W\r\nHD kABC Z\r\nHD kQUJE b\r\nHD kABD\r\n\
             ME ABC exp=-30 la=0 cas=2 fetch=yes cls=1 size=62\r\n",
            "HD kQUJD b W\r\nHD kQUJD b Z\r\nHD kQUJE b\r\nHD kQUJE b\r\n\
             ME QUJD exp=-30 la=0 cas=2 fetch=yes cls=1 size=62\r\n",
        ),
    ];
    cases.sort_by_key(|c| c.differs.is_some());
    cases
}

/// The replies to one batch, without the witness's; and the witness's remaining TTL.
struct Answer {
    ttl: u32,
    body: Vec<u8>,
}

/// Splits a batch's replies into the two witness lines and what lies between; `None` if the
/// witness lines differ (a clock tick inside the batch).
fn parse(reply: &[u8]) -> Option<Answer> {
    let line_end = |from: usize| {
        reply[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p + 2)
            .expect("a witness line")
    };
    let ttl = |line: &[u8]| -> u32 {
        let text = std::str::from_utf8(line).expect("witness line is text");
        let digits = text
            .strip_prefix("HD t")
            .and_then(|t| t.strip_suffix(" Oclk\r\n"))
            .unwrap_or_else(|| panic!("not a witness line: {text:?}"));
        digits.parse().expect("witness TTL")
    };
    let first_end = line_end(0);
    let last_start = reply[..reply.len() - 2]
        .windows(2)
        .rposition(|w| w == b"\r\n")
        .map_or(0, |p| p + 2);
    assert!(last_start >= first_end, "two witness lines");
    let (first, last) = (ttl(&reply[..first_end]), ttl(&reply[last_start..]));
    (first == last).then(|| Answer {
        ttl: first,
        body: reply[first_end..last_start].to_vec(),
    })
}

fn request(batch: &[u8], first: bool) -> Vec<u8> {
    let mut req = if first { SETUP.to_vec() } else { Vec::new() };
    req.extend_from_slice(WITNESS);
    req.extend_from_slice(batch);
    req.extend_from_slice(WITNESS);
    req
}

/// Reads until both witness replies are in.
fn read_batch(stream: &mut TcpStream) -> Result<Vec<u8>, (std::io::Error, Vec<u8>)> {
    try_read_until(stream, |got| {
        let witnesses = got.windows(WITNESS_END.len()).filter(|w| *w == WITNESS_END);
        got.ends_with(WITNESS_END) && witnesses.count() == 2
    })
}

/// Why a try on memcached gave no answer to compare with.
#[derive(Debug)]
enum NoAnswer {
    /// Its clock ticked inside a batch (or between storing the witness and the first batch's
    /// first reading).
    Ticked,
    /// It could not be talked to: the connection was refused or reset. memcached 1.6.18 does
    /// this now and then in this file's cases (3 times in about 95 runs, a reset with nothing
    /// answered yet; once a refusal right after it had accepted a connection); the same bytes
    /// on a fresh memcached are answered.
    Unreachable(String),
}

/// The case on a fresh memcached.
fn on_memcached(case: &Case, flags: &[&str]) -> Result<Vec<Answer>, NoAnswer> {
    let mut mc = start_memcached(flags);
    let unreachable = |what: String, mc: &mut common::Running| {
        let status = mc.child.try_wait();
        NoAnswer::Unreachable(format!("{what} (memcached: {status:?})"))
    };
    let mut stream = match TcpStream::connect(("127.0.0.1", mc.port)) {
        Ok(s) => s,
        Err(e) => return Err(unreachable(format!("connect: {e}"), &mut mc)),
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answers = Vec::new();
    for (i, batch) in case.batches.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(PAUSE);
        }
        if let Err(e) = stream.write_all(&request(batch, i == 0)) {
            return Err(unreachable(format!("batch {i}: write: {e}"), &mut mc));
        }
        let reply = match read_batch(&mut stream) {
            Ok(reply) => reply,
            Err((e, got)) => {
                // A time-out is memcached not answering what it was sent: that is a finding,
                // not a reason to try again.
                assert!(
                    e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::TimedOut,
                    "{}, memcached {flags:?}, batch {i}: {e}; got so far {:?}",
                    case.name,
                    String::from_utf8_lossy(&got)
                );
                let what = format!(
                    "batch {i}: {e}; got so far {:?}",
                    String::from_utf8_lossy(&got)
                );
                return Err(unreachable(what, &mut mc));
            }
        };
        let answer = parse(&reply).ok_or(NoAnswer::Ticked)?;
        if i == 0 && answer.ttl != WITNESS_TTL {
            return Err(NoAnswer::Ticked);
        }
        answers.push(answer);
    }
    Ok(answers)
}

/// The case on a fresh store and session, each batch at the time memcached answered it.
fn on_session(case: &Case, times: &[u32]) -> Vec<Vec<u8>> {
    let store = Store::new(StoreConfig::new(64 << 20, 1 << 20, 1_700_000_000));
    let mut session = Session::new(Limits::default());
    let mut bodies = Vec::new();
    for (i, (batch, &ttl)) in case.batches.iter().zip(times).enumerate() {
        let now = NOW0 + (WITNESS_TTL - ttl);
        session.feed(&request(batch, i == 0));
        let mut out = Vec::new();
        while session.run(&store, now, &mut out) == Status::OutputFull {}
        let answer = parse(&out).expect("one clock reading per batch");
        assert_eq!(answer.ttl, ttl, "{}: the session's clock", case.name);
        bodies.push(answer.body);
    }
    bodies
}

fn run(case: &Case, flags: &[&str]) -> Result<(), String> {
    let mut failed = Vec::new();
    let answers = (0..5)
        .find_map(|_| {
            on_memcached(case, flags)
                .map_err(|e| {
                    if let NoAnswer::Unreachable(what) = &e {
                        eprintln!(
                            "{}: memcached could not be talked to, once more: {what}",
                            case.name
                        );
                    }
                    failed.push(e);
                })
                .ok()
        })
        .ok_or_else(|| {
            format!(
                "{}: no answer from memcached in 5 tries: {failed:?}",
                case.name
            )
        })?;
    let times: Vec<u32> = answers.iter().map(|a| a.ttl).collect();
    let ours = on_session(case, &times);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let theirs: Vec<String> = answers.iter().map(|a| text(&a.body)).collect();
    let ours: Vec<String> = ours.iter().map(|b| text(b)).collect();
    let ok = match case.differs {
        None => theirs == ours,
        Some((memcached, corral_kv)) => theirs.concat() == memcached && ours.concat() == corral_kv,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} (memcached {flags:?}):\n  memcached: {theirs:?}\n  corral-kv: {ours:?}{}",
            case.name,
            match case.differs {
                Some((m, c)) => format!("\n  pinned:    {m:?}\n             {c:?}"),
                None => String::new(),
            }
        ))
    }
}

fn run_all(config: Config, flags: &[&str]) {
    let failures: Vec<String> = cases()
        .iter()
        .filter(|c| c.config == config || c.config == Config::Both)
        .filter_map(|c| run(c, flags).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn meta_cases_match_memcached_as_installed() {
    run_all(Config::Default, &[]);
}

#[test]
fn meta_cases_match_memcached_without_background_threads() {
    run_all(Config::NoBackgroundThreads, MEMCACHED_FLAGS);
}
