//! The seeded stream of the differential test and its comparison of two servers' answers; see
//! `differential.rs` for what the stream holds and which differences are intentional.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Rng, TcpClient, UdpClient};
use corral_dns_proto::Name;
use corral_dns_proto::message::{Message, Record};

const NAMES: &[&str] = &[
    "example.com.",
    "ns1.example.com.",
    "ns2.example.com.",
    "mail.example.com.",
    "www.example.com.",
    "web.example.com.",
    "host.example.com.",
    "mixed-case.example.com.",
    "dangling.example.com.",
    "away.example.com.",
    "outside.example.com.",
    "loop1.example.com.",
    "self.example.com.",
    "tochild.example.com.",
    "tosub.example.com.",
    "_sip._tcp.example.com.",
    "_tcp.example.com.",
    "sipserver.example.com.",
    "1.2.example.com.",
    "2.example.com.",
    "a.b.c.example.com.",
    "b.c.example.com.",
    "c.example.com.",
    "wild.example.com.",
    "*.wild.example.com.",
    "x.wild.example.com.",
    "a.b.wild.example.com.",
    "sub.wild.example.com.",
    "host.sub.wild.example.com.",
    "exists.wild.example.com.",
    "x.exists.wild.example.com.",
    "x.wc.example.com.",
    "x.wcloop.example.com.",
    "sub.example.com.",
    "ns.sub.example.com.",
    "deep.below.sub.example.com.",
    "deleg2.example.com.",
    "x.deleg2.example.com.",
    "child.example.com.",
    "host.child.example.com.",
    "alias.child.example.com.",
    "missing.child.example.com.",
    "big.example.com.",
    "ttl-units.example.com.",
    "esc\\.aped.example.com.",
    "example.org.",
    "www.example.org.",
    "mail2.example.org.",
    "sub.example.org.",
    "_imap._tcp.sub.example.org.",
    "_ldap._tcp.sub.example.org.",
    "ldap.sub.example.org.",
    "x.deeper.sub.example.org.",
    "deeper.sub.example.org.",
    "back.example.org.",
    "nothing.example.org.",
    "2.0.192.in-addr.arpa.",
    "53.2.0.192.in-addr.arpa.",
    "7.2.0.192.in-addr.arpa.",
    "com.",
    "org.",
    ".",
    "nowhere.test.",
    "example.net.",
    "xexample.com.",
];

const TYPES: &[u16] = &[
    1, 2, 5, 6, 12, 13, 15, 16, 28, 33, 43, 255, 257, 99, 65534, 0, 48, 46,
];

const PAYLOADS: &[u16] = &[
    0, 1, 100, 511, 512, 513, 600, 700, 1000, 1232, 1233, 1400, 4096, 65535,
];

fn mixed_case(r: &mut Rng, wire: &mut [u8]) {
    let mut i = 0;
    while i < wire.len() && wire[i] != 0 {
        let l = wire[i] as usize;
        for b in &mut wire[i + 1..i + 1 + l] {
            if b.is_ascii_alphabetic() && r.chance(40) {
                *b ^= 0x20;
            }
        }
        i += 1 + l;
    }
}

fn qname(r: &mut Rng) -> Vec<u8> {
    let base = *r.pick(NAMES);
    let under = |label: String| match base {
        "." => format!("{label}."),
        _ => format!("{label}.{base}"),
    };
    let text = match r.below(10) {
        0 => under(["zz", "www", "*", "a-b", "x"][r.below(5) as usize].to_string()),
        1 => under(format!("q{}", r.below(1000))),
        _ => base.to_string(),
    };
    let mut wire = Name::parse(&text, None).unwrap().wire().to_vec();
    if r.chance(30) {
        mixed_case(r, &mut wire);
    }
    wire
}

/// A well-formed query, and whether the stream sends it over TCP.
pub fn query(r: &mut Rng, id: u16) -> Vec<u8> {
    let name = qname(r);
    let qtype = *r.pick(TYPES);
    let mut q = corral_dns_proto::message::query(id, &name, qtype, None);
    if r.chance(15) {
        q[2] &= !0x01; // RD off
    }
    if r.chance(5) {
        q[3] |= 0x30; // AD and CD
    }
    if r.chance(3) {
        // Class ANY, CH or HS.
        let c: u16 = *r.pick(&[255, 3, 4]);
        let at = 12 + name.len() + 2;
        q[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    if r.chance(60) {
        let payload = *r.pick(PAYLOADS);
        let version = if r.chance(5) { 1 } else { 0 };
        let do_bit = if r.chance(20) { 0x80 } else { 0 };
        let mut opts = Vec::new();
        if r.chance(10) {
            // NSID, asked with no data, and an option no one knows.
            opts.extend_from_slice(&[0, 3, 0, 0]);
            opts.extend_from_slice(&[0xfd, 0xe9, 0, 2, 1, 2]);
        }
        q.push(0);
        q.extend_from_slice(&41u16.to_be_bytes());
        q.extend_from_slice(&payload.to_be_bytes());
        q.extend_from_slice(&[0, version, do_bit, 0]);
        q.extend_from_slice(&(opts.len() as u16).to_be_bytes());
        q.extend_from_slice(&opts);
        q[11] = 1;
    }
    q
}

/// A message that is broken in one of the ways a server must survive.
pub fn malformed(r: &mut Rng, id: u16) -> Vec<u8> {
    let mut q = query(r, id);
    match r.below(12) {
        0 => {
            let len = r.below(40) as usize;
            let mut m: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            // NOTIFY is left out (see above): its opcode becomes QUERY.
            if m.len() > 2 && (m[2] >> 3) & 0xf == 4 {
                m[2] &= !0x78;
            }
            m
        }
        1 => {
            let cut = r.below(q.len() as u64) as usize;
            q.truncate(cut);
            q
        }
        2 => {
            // A pointer in the question: to itself, forward, or back into the header.
            let target: u16 = *r.pick(&[12, 14, 2, 0x3fff]);
            let mut m = q[..12].to_vec();
            m.extend_from_slice(b"\x03www");
            m.extend_from_slice(&(0xc000 | target).to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 1]);
            m[11] = 0;
            m
        }
        3 => {
            // 128 one-byte labels: 257 bytes, over the 255 limit.
            let mut m = q[..12].to_vec();
            for _ in 0..128 {
                m.extend_from_slice(b"\x01a");
            }
            m.extend_from_slice(&[0, 0, 1, 0, 1]);
            m[11] = 0;
            m
        }
        4 => {
            q[5] = *r.pick(&[0, 2, 3]); // QDCOUNT
            q
        }
        5 => {
            q[7] = 1; // ANCOUNT
            q
        }
        6 => {
            q[9] = 1; // NSCOUNT
            q
        }
        7 => {
            q[11] = q[11].wrapping_add(1 + r.below(2) as u8); // ARCOUNT beyond what is there
            q
        }
        8 => {
            q[2] |= 0x80; // QR: a response
            q
        }
        9 => {
            let op = *r.pick(&[1u8, 2, 3, 5, 6, 15]);
            q[2] = (q[2] & 0x87) | (op << 3);
            q
        }
        10 => {
            q[2] |= 0x02; // TC
            q
        }
        _ => {
            // A label length with the reserved top bits.
            q[12] = 0x40 | (q[12] & 0x3f);
            q
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Opt {
    payload: u16,
    ext_rcode: u8,
    version: u8,
    do_bit: bool,
    options: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
struct Seen {
    id: u16,
    flags: u16,
    rcode: u16,
    questions: Vec<(Vec<u8>, u16, u16)>,
    counts: Option<[u16; 3]>,
    answer: BTreeSet<Record>,
    authority: BTreeSet<Record>,
    additional: BTreeSet<Record>,
    opt: Option<Opt>,
}

fn seen(raw: &[u8], compare_counts: bool) -> Result<Seen, Vec<u8>> {
    let m = Message::parse(raw).map_err(|_| raw.to_vec())?;
    let set = |rs: &[Record]| -> BTreeSet<Record> {
        rs.iter()
            .filter(|r| r.rtype != 41)
            .map(Record::canonical)
            .collect()
    };
    let opt = m.opt().map(|o| Opt {
        payload: o.class,
        ext_rcode: (o.ttl >> 24) as u8,
        version: (o.ttl >> 16) as u8,
        do_bit: o.ttl & 0x8000 != 0,
        options: o.rdata.clone(),
    });
    Ok(Seen {
        id: m.header.id,
        flags: m.header.flags & !0xf,
        rcode: m.rcode(),
        questions: m
            .questions
            .iter()
            .map(|q| (q.name.clone(), q.qtype, q.qclass))
            .collect(),
        counts: compare_counts.then_some([m.header.ancount, m.header.nscount, m.header.arcount]),
        answer: set(&m.answers),
        authority: set(&m.authority),
        additional: set(&m.additional),
        opt,
    })
}

fn describe(raw: &[u8]) -> String {
    match Message::parse(raw) {
        Ok(m) => {
            let mut s = format!("{:?}\n", m.header);
            for (title, sec) in [
                ("an", &m.answers),
                ("ns", &m.authority),
                ("ar", &m.additional),
            ] {
                for r in sec {
                    s.push_str(&format!("  {title}: {r}\n"));
                }
            }
            s
        }
        Err(e) => format!("unparsable ({e:?}): {raw:02x?}"),
    }
}

/// Sends `n` messages from `seed` to both servers (corral-dns at `ours`, NSD at `nsd`), fails
/// at the first difference, and returns how many answers were compared.
pub fn compare(seed: u64, n: usize, ours: SocketAddr, nsd: SocketAddr) -> usize {
    let mut r = Rng::new(seed);
    let mut ours_udp = UdpClient::new(ours);
    let mut nsd_udp = UdpClient::new(nsd);
    let mut ours_tcp = TcpClient::new(ours);
    let mut nsd_tcp = TcpClient::new(nsd);
    let mut compared = 0;
    let mut nsd_errors = ErrorBudget::default();
    for i in 0..n {
        let id = r.next() as u16;
        let bad = r.chance(10);
        let msg = if bad {
            malformed(&mut r, id)
        } else {
            query(&mut r, id)
        };
        let wcloop = msg
            .windows(7)
            .any(|w| w.eq_ignore_ascii_case(b"\x06wcloop"));
        let tcp = !bad && r.chance(10);
        if let Ok(path) = std::env::var("DNS_DIFF_TRACE") {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .unwrap();
            let hex: String = msg.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(f, "{} {hex}", if tcp { "tcp" } else { "udp" }).unwrap();
        }
        let (a, b): (Vec<Vec<u8>>, Vec<Vec<u8>>) = if tcp {
            let a = ours_tcp.exchange(&msg);
            if is_error(&a) {
                nsd_errors.take();
            }
            (vec![a], vec![nsd_tcp.exchange(&msg)])
        } else {
            // corral-dns answers datagrams in order, so its probes tell for sure whether it
            // answered; NSD then must answer as often, and is waited for by ID (it may answer
            // a batch of datagrams out of order). When corral-dns is silent, NSD's probes say
            // whether NSD is too.
            let a = ours_udp.exchange(&msg);
            let b = if a.is_empty() {
                nsd_udp.exchange(&msg)
            } else {
                let errors = a.iter().any(|x| is_error(x));
                if errors {
                    nsd_errors.take();
                }
                let b = nsd_udp.exchange_expecting(&msg, a.len());
                if errors && b.len() < a.len() {
                    // NSD drops error answers past its rate silently, and its count of a
                    // second can run ahead of the budget's when it reads a message late (a
                    // loaded machine). Asked again in a second of its own, it answers; a
                    // message it still leaves unanswered is a difference.
                    nsd_errors.next_second();
                    nsd_errors.resent += 1;
                    let again = nsd_udp.exchange_expecting(&msg, a.len());
                    b.into_iter().chain(again).collect()
                } else {
                    b
                }
            };
            (a, b)
        };
        let ctx = || {
            format!(
                "seed {seed}, message {i} ({}): {msg:02x?}\ncorral-dns: {}\nnsd: {}",
                if tcp { "tcp" } else { "udp" },
                a.iter()
                    .map(|x| describe(x))
                    .collect::<Vec<_>>()
                    .join(" | "),
                b.iter()
                    .map(|x| describe(x))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        };
        assert_eq!(a.len(), b.len(), "answered by one server only: {}", ctx());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(seen(x, !wcloop), seen(y, !wcloop), "{}", ctx());
            compared += 1;
        }
    }
    eprintln!(
        "seed {seed}: {compared} answers compared; {} FORMERR and NOTIMP answers, {} waits \
         for NSD's next second, {} error-drawing messages NSD left unanswered and answered \
         when asked again",
        nsd_errors.total, nsd_errors.waits, nsd_errors.resent
    );
    compared
}

/// A FORMERR or NOTIMP answer.
fn is_error(answer: &[u8]) -> bool {
    answer.len() >= 12 && matches!(answer[3] & 0xf, 1 | 4)
}

/// NSD 4.6 sends at most 101 FORMERR and NOTIMP answers per second of its clock (`time()`),
/// per server process, and discards the messages past that silently: `query_ratelimit_err` in
/// its `query.c`, with `ERROR_RATELIMIT` fixed at 100 when NSD is built, apart from the
/// `rrl-*` settings. The stream keeps the messages that draw these answers under that rate,
/// with a margin for a message sent at the end of one second and read by NSD in the next.
#[derive(Default)]
struct ErrorBudget {
    second: u64,
    used: u32,
    total: u64,
    waits: u64,
    /// Messages sent to NSD a second time (see the caller).
    resent: u64,
}

impl ErrorBudget {
    const PER_SECOND: u32 = 90;
    /// The longest a kernel tick (HZ of 100 or more) keeps the coarse clock behind.
    const COARSE_CLOCK_LAG: Duration = Duration::from_millis(10);

    /// Waits for the next second of the wall clock and takes one answer of it.
    fn next_second(&mut self) {
        self.second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        self.used = Self::PER_SECOND;
        self.take();
    }

    /// Called before sending NSD a message that draws an error answer: waits for the next
    /// second of the wall clock if this one has had its share.
    fn take(&mut self) {
        let now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let mut t = now();
        if t.as_secs() == self.second && self.used >= Self::PER_SECOND {
            std::thread::sleep(
                Duration::from_secs(1) - Duration::from_nanos(t.subsec_nanos().into()),
            );
            self.waits += 1;
            t = now();
            while t.as_secs() == self.second {
                std::thread::sleep(Duration::from_millis(1));
                t = now();
            }
        }
        if t.as_secs() != self.second {
            // NSD reads its second with time(), the kernel's coarse clock, which trails this
            // one by up to a tick: early in a second, NSD may still be counting the last one.
            if t.subsec_nanos() < Self::COARSE_CLOCK_LAG.as_nanos() as u32 {
                std::thread::sleep(
                    Self::COARSE_CLOCK_LAG - Duration::from_nanos(t.subsec_nanos().into()),
                );
            }
            self.second = t.as_secs();
            self.used = 0;
        }
        self.used += 1;
        self.total += 1;
    }
}

pub fn env_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{var}={v:?} is not a count"))
        })
        .unwrap_or(default)
}
