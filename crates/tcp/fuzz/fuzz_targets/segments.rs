//! Drives a connection, a listener and the RST answer with arbitrary segments and application
//! calls: `cargo +nightly fuzz run segments` from crates/tcp. The same function runs on stable
//! in `tests/fuzz_smoke.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drive.rs"]
mod drive;

fuzz_target!(|data: &[u8]| drive::drive(data));
