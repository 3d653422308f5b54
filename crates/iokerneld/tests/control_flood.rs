//! A flood of refused requests on the control socket: iokerneld's log stays bounded (a burst,
//! then a few lines a second, then a summary of what was left out), the statistics count what
//! was left out, and a well-formed runtime still registers afterwards.

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::{Launch, serial, wait_until};
use corral_abi::control::{Registration, Reply, Request};
use corral_iokernel::daemon::Stats;
use corral_testclient::client::{self, Options, RegionFile, Runtime};

type Daemon = common::Daemon<Stats>;

/// Flooding threads and requests each sends, one connection per request (iokerneld closes a
/// connection that is not a runtime's after refusing it).
const THREADS: usize = 4;
const REQUESTS_PER_THREAD: usize = 1000;

/// As in iokerneld's control plane: the burst and the steady rate of refusal lines.
const BURST: u64 = 20;
const PER_SECOND: u64 = 5;

const SUMMARY: &str = " refused-request messages suppressed";

fn registration(tids: Vec<i32>) -> Registration {
    Registration {
        name: "flood".into(),
        guaranteed_cores: 0,
        max_cores: 1,
        spinning_kthreads: 0,
        run_queue_capacity: 256,
        preemption: corral_abi::control::PreemptionMode::Cooperative,
        tids,
        net: None,
    }
}

/// Request `i` of a flood: garbage, a truncated or wrong-version header, a registration without
/// its descriptors, or a registration naming another process's thread (refused while
/// registering, after its descriptors were checked).
fn flood_request(daemon: &Daemon, i: usize, region: &RegionFile) {
    let good = Request::Register(registration(vec![corral_iokernel::sys::gettid()])).encode();
    let reply = match i % 5 {
        0 => {
            let garbage: Vec<u8> = (0..1 + i % 200).map(|_| fastrand::u8(..)).collect();
            client::request(&daemon.socket, &garbage, &[])
        }
        1 => client::request(&daemon.socket, &good[..7], &[]),
        2 => {
            let mut wrong_version = good.clone();
            wrong_version[4] = 200;
            client::request(&daemon.socket, &wrong_version, &[])
        }
        3 => client::request(&daemon.socket, &good, &[]),
        _ => {
            let foreign = Request::Register(registration(vec![1])).encode();
            let fds = [region.memfd.as_fd()];
            client::request(&daemon.socket, &foreign, &fds)
        }
    };
    match reply {
        Ok((_, Reply::Error { .. })) => {}
        other => panic!(
            "flood request {i} was not refused: {other:?}\n{}",
            daemon.log()
        ),
    }
}

fn lines_with(log: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// The sum of N over the summary lines "N refused-request messages suppressed ...".
fn summarized(log: &str) -> u64 {
    lines_with(log, SUMMARY)
        .iter()
        .map(|line| {
            let before = &line[..line.find(SUMMARY).unwrap()];
            let n = before.rsplit(' ').next().unwrap();
            n.parse::<u64>()
                .unwrap_or_else(|e| panic!("bad summary line {line:?}: {e}"))
        })
        .sum()
}

#[test]
fn a_flood_of_refused_requests_leaves_the_log_bounded_and_the_daemon_serving() {
    let _serial = serial();
    let started = Instant::now();
    let mut daemon = Daemon::launch(Launch {
        args: &["--nic", "none"],
        socket: "iokerneld.sock",
        extra: &[],
        log: true,
    });
    let region = RegionFile::new(1, true).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (daemon, region) = (&daemon, &region);
            s.spawn(move || {
                for i in 0..REQUESTS_PER_THREAD {
                    flood_request(daemon, t * REQUESTS_PER_THREAD + i, region);
                }
            });
        }
    });
    daemon.assert_alive();
    let flooded = (THREADS * REQUESTS_PER_THREAD) as u64;

    let stats = daemon.stats();
    let refused = stats.global.refused_registrations;
    let suppressed = stats.global.refused_messages_suppressed;
    assert_eq!(refused, flooded, "every flood request is a refusal");
    let log = daemon.log();
    let logged = lines_with(&log, "refused a request from pid").len() as u64;
    assert_eq!(
        logged + suppressed,
        refused,
        "each refusal is either logged or counted as suppressed"
    );
    // The bucket's bound, over at least as long as the flood took.
    let bound = BURST + PER_SECOND * (started.elapsed().as_secs() + 1);
    assert!(
        logged <= bound,
        "{logged} refusal lines for {refused} refusals (bound {bound})"
    );
    assert!(
        (log.lines().count() as u64) < bound + 50,
        "the log grew to {} lines:\n{log}",
        log.lines().count()
    );

    // The lines left out are summed up once the summary period is over.
    wait_until(
        "the summary line to count every suppressed line",
        Duration::from_secs(30),
        || summarized(&daemon.log()) == suppressed,
    );

    // The daemon still serves a well-formed runtime, and its statistics.
    let runtime = Runtime::start(Options::new(&daemon.socket, "after-the-flood")).unwrap();
    let stats = daemon.stats();
    assert_eq!(stats.runtimes.len(), 1);
    assert_eq!(stats.runtimes[0].id, runtime.id);
    assert_eq!(stats.runtimes[0].name, "after-the-flood");
    assert_eq!(stats.global.refused_registrations, flooded);
    assert_eq!(stats.global.refused_messages_suppressed, suppressed);
    daemon.assert_alive();
}
