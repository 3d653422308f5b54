//! The bad-input checks of `bad_input.rs`, against corral-kv on Corral's runtime behind its
//! own iokerneld and TAP device: memcached's replies or a closed connection, bounded memory,
//! other clients unaffected. memcached 1.6.18 on Linux sockets gives the expected answers.

mod common;
mod tap;

use common::bad_input;
use common::start_memcached;
use tap::{TapKv, serial};

#[test]
fn malformed_and_oversized_requests_get_memcacheds_replies_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(11, &["-t", "1"]);
    let mc = start_memcached(&[]);
    bad_input::malformed_and_oversized_requests_get_memcacheds_replies(&kv, &mc);
    kv.assert_alive();
}

#[test]
fn unterminated_lines_and_http_close_the_connection_like_memcached_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(12, &["-t", "1"]);
    let mc = start_memcached(&[]);
    bad_input::unterminated_lines_and_http_close_the_connection_like_memcached(&kv, &mc);
    kv.assert_alive();
}

#[test]
fn oversized_values_are_swallowed_in_bounded_memory_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(13, &["-t", "1"]);
    bad_input::oversized_values_are_swallowed_in_bounded_memory(&kv);
    kv.assert_alive();
}

#[test]
fn a_client_that_never_reads_stalls_only_itself_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(14, &["-t", "1"]);
    bad_input::a_client_that_never_reads_stalls_only_itself(&kv);
    kv.assert_alive();
}
