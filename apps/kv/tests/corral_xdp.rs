//! Unmodified memcached clients against corral-kv on Corral's runtime through a real interface:
//! iokerneld takes the root end of a veth pair with its AF_XDP backend, and libmemcached's
//! conformance tester (`memccapable`) and load generator (`memcslap`) run in the namespace at
//! the other end, as on another machine. Each test makes its own pair and iokerneld.

mod common;
mod tap;

use std::process::Command;

use common::clients::{memccapable_passes, memcslap_without_errors};
use corral_xdp::testnet::VethPair;
use tap::{TapKv, serial};

/// A veth pair whose namespace end sends whole checksums, as a wire does.
fn veth() -> VethPair {
    let pair = VethPair::create(1).expect("create a veth pair and a namespace");
    pair.full_checksums()
        .expect("turn off the namespace end's checksum offload (ethtool: scripts/setup.sh)");
    pair
}

/// A command that runs `program` inside the pair's namespace.
fn in_namespace(pair: &VethPair) -> impl Fn(&str) -> Command + '_ {
    move |program| {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &pair.namespace, program]);
        cmd
    }
}

#[test]
fn memccapable_text_protocol_passes_over_xdp() {
    let _serial = serial();
    let pair = veth();
    let mut kv = TapKv::start_xdp(1, &pair, &["-t", "1"]);
    memccapable_passes(in_namespace(&pair), &kv.ip.to_string(), kv.port, || {
        kv.logs()
    });
    kv.assert_alive();
}

#[test]
fn memcslap_load_has_no_errors_over_xdp() {
    let _serial = serial();
    let pair = veth();
    // Two kthreads on the one managed core, as over TAP.
    let mut kv = TapKv::start_xdp(2, &pair, &["-t", "2"]);
    memcslap_without_errors(in_namespace(&pair), &kv.server(), 8, || kv.logs());
    kv.assert_alive();
}
