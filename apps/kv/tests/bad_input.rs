//! Bad input gets memcached's answer or a closed connection, memory stays bounded, and other
//! clients carry on, on Linux sockets. Where memcached 1.6.18 can be asked, it is, and the
//! answers must match. The checks are in `common/bad_input.rs`.

mod common;

use common::bad_input;
use common::{start_kv, start_memcached};

#[test]
fn malformed_and_oversized_requests_get_memcacheds_replies() {
    let kv = start_kv(&[]);
    let mc = start_memcached(&[]);
    bad_input::malformed_and_oversized_requests_get_memcacheds_replies(&kv, &mc);
}

#[test]
fn unterminated_lines_and_http_close_the_connection_like_memcached() {
    let kv = start_kv(&[]);
    let mc = start_memcached(&[]);
    bad_input::unterminated_lines_and_http_close_the_connection_like_memcached(&kv, &mc);
}

#[test]
fn oversized_values_are_swallowed_in_bounded_memory() {
    bad_input::oversized_values_are_swallowed_in_bounded_memory(&start_kv(&[]));
}

#[test]
fn a_client_that_never_reads_stalls_only_itself() {
    bad_input::a_client_that_never_reads_stalls_only_itself(&start_kv(&[]));
}
