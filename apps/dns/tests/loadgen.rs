//! corral-loadgen's DNS client against corral-dns on Linux sockets: an open-loop schedule of
//! queries from a dnsperf-format file, every response matched to its query by DNS ID and
//! checked against its question, and the RCODEs as the zones give them.

mod common;

use std::time::Duration;

use common::start_corral_dns;
use corral_loadgen::dns::{DnsClientConfig, QueryMix};
use corral_loadgen::{AdherencePolicy, ScheduleConfig};

/// Four names: one that exists, one missing from a served zone, one outside every zone, and
/// one under a wildcard; requests ask them in turn.
const QUERIES: &str = "\
; dnsperf's format
www.example.com A
nothing.example.com AAAA
nowhere.test. A
x.wild.example.com TXT
";

#[test]
fn every_query_of_an_open_loop_schedule_is_matched_and_checked() {
    let server = start_corral_dns(&[]);
    let mix = QueryMix::parse(QUERIES).unwrap();
    let mut schedule = ScheduleConfig::new(2000.0, Duration::from_secs(1))
        .clients(8)
        .seed(3);
    schedule.first_id = 1;
    let cfg = DnsClientConfig {
        server: server.addr(),
        schedule,
        flows: 4,
        edns: Some(1232),
        cpu: None,
        rx_cpu: None,
        grace_ns: 2_000_000_000,
        // A loaded test machine may send late; that is not what this test is about.
        policy: AdherencePolicy {
            max_p99_lateness_ns: u64::MAX,
            min_send_ratio: 0.0,
        },
    };
    let report = corral_loadgen::dns::run(&cfg, &mix).unwrap();
    let (s, c) = (&report.summary, &report.counts);
    eprintln!("{report}");
    assert!(s.matched > 0, "{report}");
    assert_eq!(s.matched + s.lost, s.scheduled, "{report}");
    assert_eq!(
        (s.unknown, s.malformed, s.duplicates),
        (0, 0, 0),
        "{report}"
    );
    assert_eq!(c.mismatched, 0, "{report}");
    // Every matched answer is one of the three RCODEs the mix draws, none truncated.
    assert_eq!(c.noerror + c.nxdomain + c.refused, s.matched, "{report}");
    assert_eq!(
        (c.servfail, c.other_rcode, c.truncated),
        (0, 0, 0),
        "{report}"
    );
    // Request n asks question n mod 4 (ids from 1): two in four are NOERROR (the name and the
    // wildcard), one NXDOMAIN, one REFUSED, give or take the ones lost.
    let lost = s.lost;
    let near = |got: u64, want: u64| got <= want && got + lost >= want;
    // Ids 1..=n that are k mod 4, for k of 1 to 3.
    let asked = |k: u64| (s.scheduled - k) / 4 + 1;
    assert!(near(c.nxdomain, asked(1)), "{report}");
    assert!(near(c.refused, asked(2)), "{report}");
}
