//! Property tests: answering never panics and stays within its limits on arbitrary bytes, on
//! queries with random damage, and on names built label by label; and what the server writes
//! parses back to what the zone holds.

use std::path::Path;

use corral_dns_proto::message::{self, Message};
use corral_dns_proto::wire::{self, rtype};
use corral_dns_proto::{Catalog, Name, Outcome, Transport, Zone};
use proptest::prelude::*;

const ZONE: &str = "$ORIGIN example.com.\n$TTL 300\n\
    @ SOA ns1 hm 1 2 3 4 60\n@ NS ns1\nns1 A 192.0.2.1\nwww CNAME host\nhost A 192.0.2.2\n\
    host AAAA 2001:db8::2\nhost MX 10 mail.example.com.\n*.wild TXT \"w\"\nsub NS ns.sub\n\
    ns.sub A 192.0.2.3\nloop CNAME loop\n";

fn catalog() -> Catalog {
    let zone = Zone::load(Path::new("example.com.zone"), None, &mut |_| {
        Ok(ZONE.to_string())
    })
    .unwrap();
    let mut c = Catalog::new();
    c.insert(zone).unwrap();
    c
}

fn answer(c: &Catalog, msg: &[u8], t: Transport) -> (Vec<u8>, Outcome) {
    let mut out = vec![0u8; 65535];
    let (len, o) = c.respond(msg, t, &mut out);
    out.truncate(len);
    (out, o)
}

/// Checks what any answer must be: parseable, the query's ID, QR set, and no bigger than UDP
/// allows.
fn check(msg: &[u8], resp: &[u8], o: Outcome, t: Transport) {
    match o {
        Outcome::Dropped(_) => assert!(resp.is_empty()),
        Outcome::Answered { .. } => {
            let m = Message::parse(resp).expect("the server's answer parses");
            assert_eq!(&resp[..2], &msg[..2]);
            assert!(m.header.has(wire::flag::QR));
            if t == Transport::Udp {
                assert!(resp.len() <= usize::from(wire::UDP_MAX_PAYLOAD));
            }
        }
    }
}

const NAMES: &[&str] = &[
    "example.com.",
    "www.example.com.",
    "HOST.example.com.",
    "x.wild.example.com.",
    "a.b.sub.example.com.",
    "loop.example.com.",
    "nope.example.com.",
    "example.org.",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let c = catalog();
        for t in [Transport::Udp, Transport::Tcp] {
            let (r, o) = answer(&c, &bytes, t);
            check(&bytes, &r, o, t);
        }
    }

    #[test]
    fn damaged_queries_never_panic(
        name in 0..NAMES.len(),
        qtype in any::<u16>(),
        payload in proptest::option::of(any::<u16>()),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        let c = catalog();
        let wire_name = Name::parse(NAMES[name], None).unwrap();
        let mut q = message::query(7, wire_name.wire(), qtype, payload);
        for (at, v) in flips {
            let i = at % q.len();
            q[i] = v;
        }
        if cut % 4 == 0 {
            q.truncate(cut % (q.len() + 1));
        }
        for t in [Transport::Udp, Transport::Tcp] {
            let (r, o) = answer(&c, &q, t);
            if q.len() >= 2 {
                check(&q, &r, o, t);
            }
        }
    }

    #[test]
    fn answers_carry_the_zone_records(
        name in 0..NAMES.len(),
        qtype in prop::sample::select(vec![rtype::A, rtype::AAAA, rtype::MX, rtype::TXT, rtype::NS, rtype::SOA, rtype::ANY]),
        payload in proptest::option::of(512u16..4096),
    ) {
        let c = catalog();
        let wire_name = Name::parse(NAMES[name], None).unwrap();
        let q = message::query(9, wire_name.wire(), qtype, payload);
        let (r, o) = answer(&c, &q, Transport::Udp);
        check(&q, &r, o, Transport::Udp);
        let m = Message::parse(&r).unwrap();
        // The question comes back as asked, case and all.
        prop_assert_eq!(&m.questions[0].name, &wire_name.wire().to_vec());
        let zone = c.zone(&Name::parse("example.com.", None).unwrap()).unwrap();
        for rec in m.answers.iter().chain(&m.authority).chain(&m.additional) {
            if rec.rtype == rtype::OPT {
                continue;
            }
            let owner = rec.canonical().owner;
            // A synthesized owner stands for its wildcard.
            let node = zone.node(&owner).or_else(|| {
                let parent = &owner[1 + owner[0] as usize..];
                let mut w = b"\x01*".to_vec();
                w.extend_from_slice(parent);
                zone.node(&w)
            });
            let set = node.and_then(|n| n.get(rec.rtype)).expect("record from the zone");
            prop_assert!(set.rdatas.iter().any(|d| **d == rec.rdata[..]));
        }
    }
}

#[test]
fn a_name_over_255_bytes_or_a_pointer_in_the_question_is_formerr() {
    let c = catalog();
    let mut long = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for _ in 0..128 {
        long.extend_from_slice(b"\x01a");
    }
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    let ptr = [
        0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'w', b'w', b'w', 0xc0, 12, 0, 1, 0, 1,
    ];
    for q in [&long[..], &ptr[..]] {
        let (r, o) = answer(&c, q, Transport::Udp);
        assert_eq!(
            o,
            Outcome::Answered {
                rcode: 1,
                truncated: false
            }
        );
        assert_eq!(r.len(), 12);
    }
}

#[test]
fn an_answer_too_big_for_512_bytes_is_truncated_and_whole_over_tcp() {
    let mut text = String::from("$TTL 60\n@ SOA ns hm 1 2 3 4 5\n");
    for i in 0..60 {
        text.push_str(&format!("big A 192.0.2.{i}\n"));
    }
    let zone = Zone::load(
        Path::new("z"),
        Some(Name::parse("example.com.", None).unwrap()),
        &mut |_| Ok(text.clone()),
    )
    .unwrap();
    let mut c = Catalog::new();
    c.insert(zone).unwrap();
    let q = message::query(
        1,
        Name::parse("big.example.com.", None).unwrap().wire(),
        rtype::A,
        None,
    );
    let (r, o) = answer(&c, &q, Transport::Udp);
    assert_eq!(
        o,
        Outcome::Answered {
            rcode: 0,
            truncated: true
        }
    );
    let m = Message::parse(&r).unwrap();
    assert!(m.header.has(wire::flag::TC) && m.answers.is_empty() && r.len() <= 512);
    let (r, o) = answer(&c, &q, Transport::Tcp);
    assert_eq!(
        o,
        Outcome::Answered {
            rcode: 0,
            truncated: false
        }
    );
    let m = Message::parse(&r).unwrap();
    assert_eq!(m.answers.len(), 60);
    // Every owner is a 2-byte pointer to the question: 16 bytes a record.
    assert_eq!(r.len(), 12 + 21 + 60 * (2 + 10 + 4));
}
