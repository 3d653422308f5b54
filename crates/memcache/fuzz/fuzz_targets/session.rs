//! Arbitrary bytes, split at an arbitrary point, through one session against a small store:
//! no panic, and the session never holds more input than its limits allow.
#![no_main]

use corral_memcache::{Limits, Session, Status, Store, StoreConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = Store::new(StoreConfig::new(1 << 20, 64 << 10, 1_700_000_000));
    let limits = Limits::default();
    let mut session = Session::new(limits);
    let mut out = Vec::new();
    let split = data.first().map_or(0, |&b| b as usize).min(data.len());
    for chunk in [&data[..split], &data[split..]] {
        session.feed(chunk);
        loop {
            let status = session.run(&store, 10, &mut out);
            assert!(session.buffered() <= limits.get_line + (64 << 10) + chunk.len());
            out.clear();
            if status != Status::OutputFull {
                break;
            }
        }
    }
    assert!(store.used_bytes() <= 1 << 20);
});
