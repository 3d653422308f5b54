//! What a comparison of DNS servers needs besides the servers: one zone and one query file
//! that every server gets ([`workload`]), and how to run the Linux servers Corral is measured
//! against on them, one core each ([`linux`]). `corral-bench-dns` and the demo's DNS
//! experiment both use them, so both measure the same thing.

pub mod linux;
pub mod workload;

/// The zone's origin.
pub const ORIGIN: &str = "bench.example.";
