//! Sessions on a virtual clock: requests split anywhere give the same replies as whole ones;
//! arbitrary bytes never panic and never make a session hold more than its limits allow;
//! expiry, touch and delayed flush follow the supplied time.

use corral_memcache::{Limits, Session, Status, Store, StoreConfig};
use proptest::prelude::*;

const STARTED: i64 = 1_700_000_000;

fn store() -> Store {
    Store::new(StoreConfig::new(64 << 20, 1 << 20, STARTED))
}

/// Feeds `input` in pieces of the given sizes and returns all replies and the last status.
fn drive(store: &Store, now: u32, input: &[u8], pieces: &[usize]) -> (Vec<u8>, Status) {
    let mut s = Session::new(Limits::default());
    let mut out = Vec::new();
    let mut status = Status::NeedInput;
    let mut at = 0;
    let mut sizes = pieces.iter().cycle();
    while at < input.len() {
        let n = (*sizes.next().unwrap_or(&input.len()))
            .max(1)
            .min(input.len() - at);
        s.feed(&input[at..at + n]);
        at += n;
        loop {
            status = s.run(store, now, &mut out);
            if status != Status::OutputFull {
                break;
            }
        }
        if status == Status::Close {
            break;
        }
    }
    (out, status)
}

fn ask(store: &Store, now: u32, input: &[u8]) -> String {
    String::from_utf8(drive(store, now, input, &[input.len().max(1)]).0).unwrap()
}

const SCRIPT: &[u8] = b"set a 1 0 3\r\nabc\r\nget a b\r\ngets a\r\nappend a 0 0 2\r\nde\r\n\
incr n 1\r\nset n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nget n\r\n\
ms m 2 T0 F3 c k\r\nhi\r\nmg m v f s k O9\r\nma m\r\nma ctr N0 J7 v\r\nmd m q\r\nmn\r\n\
delete a noreply\r\nget a\r\nverbosity 1\r\nbogus\r\n";

const SCRIPT_REPLY: &str = "STORED\r\nVALUE a 1 3\r\nabc\r\nEND\r\nVALUE a 1 3 1\r\nabc\r\nEND\r\nSTORED\r\n\
NOT_FOUND\r\nSTORED\r\n15\r\n0\r\nVALUE n 0 2\r\n0 \r\nEND\r\n\
HD c6 km\r\nVA 2 f3 s2 km O9\r\nhi\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
VA 1\r\n7\r\nMN\r\nEND\r\nOK\r\nERROR\r\n";

#[test]
fn a_script_of_commands() {
    assert_eq!(ask(&store(), 100, SCRIPT), SCRIPT_REPLY);
}

#[test]
fn expiry_touch_and_delayed_flush_follow_the_clock() {
    let s = store();
    assert_eq!(ask(&s, 100, b"set k 0 10 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(ask(&s, 109, b"get k\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n");
    assert_eq!(ask(&s, 110, b"get k\r\n"), "END\r\n");
    // Absolute time: 50 s after the store's start.
    let at = STARTED + 150;
    assert_eq!(
        ask(&s, 100, format!("set abs 0 {at} 1\r\nv\r\n").as_bytes()),
        "STORED\r\n"
    );
    assert_eq!(ask(&s, 149, b"mg abs v t\r\n"), "VA 1 t1\r\nv\r\n");
    assert_eq!(ask(&s, 150, b"get abs\r\n"), "END\r\n");
    // touch and gat move the expiry.
    assert_eq!(
        ask(&s, 200, b"set t 0 5 1\r\nv\r\ntouch t 100\r\n"),
        "STORED\r\nTOUCHED\r\n"
    );
    assert_eq!(ask(&s, 250, b"gat 10 t\r\n"), "VALUE t 0 1\r\nv\r\nEND\r\n");
    assert_eq!(ask(&s, 260, b"get t\r\n"), "END\r\n");
    // flush_all with a delay: items live until then.
    assert_eq!(
        ask(&s, 300, b"set f 0 0 1\r\nv\r\nflush_all 20\r\n"),
        "STORED\r\nOK\r\n"
    );
    assert_eq!(ask(&s, 318, b"get f\r\n"), "VALUE f 0 1\r\nv\r\nEND\r\n");
    assert_eq!(ask(&s, 319, b"get f\r\n"), "END\r\n");
}

#[test]
fn unterminated_line_closes_and_value_size_is_enforced() {
    let s = store();
    let (out, status) = drive(&s, 1, &[b'x'; 3000], &[100]);
    assert_eq!((out.as_slice(), status), (&b""[..], Status::Close));
    let mut big = b"set k 0 0 1048576\r\n".to_vec();
    big.extend(vec![b'v'; 1 << 20]);
    big.extend_from_slice(b"\r\nget k\r\n");
    assert_eq!(
        ask(&s, 1, &big),
        "SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn split_anywhere_same_replies(pieces in proptest::collection::vec(1usize..40, 1..8)) {
        let (out, _) = drive(&store(), 100, SCRIPT, &pieces);
        prop_assert_eq!(String::from_utf8(out).unwrap(), SCRIPT_REPLY);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        chunks in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300),
                proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b' '), Just(b'a'), Just(b'1'), Just(b'm'), Just(b'g')], 0..300),
                prop_oneof![
                    Just(b"set k 0 0 5\r\n".to_vec()), Just(b"get k k k\r\n".to_vec()), Just(b"ms k 3 c\r\n".to_vec()),
                    Just(b"mg k v c f s k O1\r\n".to_vec()), Just(b"ma k N0 v\r\n".to_vec()), Just(b"incr k 1\r\n".to_vec()),
                    Just(b"set k 0 0 999999999\r\n".to_vec()), Just(b"get ".to_vec()),
                ],
            ],
            1..30,
        )
    ) {
        let store = Store::new(StoreConfig::new(1 << 20, 64 << 10, STARTED));
        let limits = Limits::default();
        let mut s = Session::new(limits);
        let mut out = Vec::new();
        for c in &chunks {
            s.feed(c);
            loop {
                let status = s.run(&store, 5, &mut out);
                // A session holds at most a line limit's worth, a get line, or one item.
                prop_assert!(s.buffered() <= limits.get_line.max(64 << 10) + 2 + c.len());
                prop_assert!(out.len() <= limits.output_high_water + (64 << 10) + 4096);
                out.clear();
                if status != Status::OutputFull {
                    break;
                }
            }
        }
        prop_assert!(store.used_bytes() <= 1 << 20);
    }
}
