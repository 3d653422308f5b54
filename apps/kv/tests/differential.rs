//! The same seeded random command stream goes to corral-kv on Linux sockets and to memcached
//! 1.6.18; every reply must be byte-identical. The streams and what they leave out are in
//! `common/differential.rs`.

mod common;

use common::differential::{MEMCACHED_FLAGS, compare};
use common::{start_kv, start_memcached};

#[test]
fn random_streams_match_memcached() {
    for seed in 1..=16 {
        let kv = start_kv(&[]);
        let mc = start_memcached(MEMCACHED_FLAGS);
        compare(&kv, &mc, seed, 3000);
    }
}
