//! End-to-end tests of the real `iokerneld` binary: configuration errors, registrations good
//! and bad, many runtimes, crashed, garbage-writing and signal-blocking runtimes, and a
//! preemption round trip between two `corral-abi-client` processes.
//!
//! Every daemon runs on CPU 0 and manages CPU 1, with its socket in a fresh temporary
//! directory. The daemon tests share CPU 1, so they hold `serial()` while they run. Every wait
//! is bounded and fails with what was seen so far.

mod common;

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{IOKERNELD, Launch, WAIT, serial, wait_until};
use corral_abi::control::{Registration, Reply, Request};
use corral_iokernel::control;
use corral_iokernel::daemon::Stats;
use corral_testclient::client::{self, Options, RegionFile, Runtime};

type Daemon = common::Daemon<Stats>;

impl Daemon {
    /// iokerneld with no NIC, its socket in a directory it has to create, and its log kept.
    fn start(extra: &[&str]) -> Daemon {
        Daemon::launch(Launch {
            args: &["--nic", "none"],
            socket: "run/iokerneld.sock",
            extra,
            log: true,
        })
    }

    fn client(&self, name: &str, args: &[&str]) -> Client {
        Client::start(&self.socket, name, args, Some(self.log_file()))
    }
}

type Client = common::client::AbiClient;

/// `grant K CPU running-on C since-decision-ns N`: the CPU granted and the CPU the kthread ran
/// on when it read the grant. Also checks that iokerneld recorded when it decided the grant,
/// and that it did so before the kthread saw it.
fn grant_cpus(line: &str) -> (u64, i64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 7, "{line}");
    let since: i64 = words[6].parse().unwrap();
    assert!(
        (0..WAIT.as_nanos() as i64).contains(&since),
        "no plausible decision time: {line}"
    );
    (words[2].parse().unwrap(), words[4].parse().unwrap())
}

fn run_iokerneld(args: &[&str]) -> (i32, String) {
    let out = Command::new(IOKERNELD)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn bad_settings_are_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("never.sock");
    let socket = socket.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--core", "0", "--managed-cores", "0"],
            "invalid managed_cores = \"0\": iokerneld's own core 0 cannot also be managed",
        ),
        (
            &["--managed-cores", "1-x"],
            "invalid managed_cores = \"1-x\"",
        ),
        (&["--managed-cores", "4095"], "CPU 4095 does not exist"),
        (&["--core", "4000"], "invalid core = 4000"),
        (&["--interval-us", "0"], "invalid interval_us = 0"),
        (
            &["--preemption-timeout-us", "0"],
            "invalid preemption_timeout_us = 0",
        ),
        (&["--control-poll-us", "0"], "invalid control_poll_us = 0"),
        (&["--log-level", "loud"], "invalid log_level = \"loud\""),
        (&["--interval-us", "fast"], "--interval-us"),
        (&["--no-such-flag"], "--no-such-flag"),
        (
            &["--policy", "arachne", "--policy-option", "interval_us=0"],
            "invalid policy_options = interval_us=0: policy \"arachne\" option interval_us = \"0\"",
        ),
        (
            &["--policy-option", "interval_us=5000"],
            "policy \"shenango\" has no option \"interval_us\"; its options: burst_sharing",
        ),
        (&["--policy-option", "burst_sharing"], "expected KEY=VALUE"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["--socket", socket];
        all.extend_from_slice(args);
        let (code, text) = run_iokerneld(&all);
        assert_ne!(code, 0, "{args:?} was accepted");
        assert!(text.contains(expected), "{args:?}: {text}");
    }
    assert!(!Path::new(socket).exists());

    let files: &[(&str, &str)] = &[
        ("interval = 5\n", "unknown field `interval`"),
        (
            "managed_cores = [0]\n",
            "invalid managed_cores = [0]: iokerneld's own core 0",
        ),
        ("managed_cores = [1, 1]\n", "CPU 1 is listed twice"),
        ("interval_us = -3\n", "invalid interval_us = -3"),
        ("interval_us = \"5\"\n", "interval_us"),
        ("log_level = \"chatty\"\n", "invalid log_level = \"chatty\""),
        (
            "policy = \"static\"\npolicy_options = { cores_per_runtime = -1 }\n",
            "option cores_per_runtime = \"-1\": expected a core count",
        ),
        ("core = [\n", "config file"),
    ];
    for (i, (toml, expected)) in files.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, toml).unwrap();
        let (code, text) = run_iokerneld(&["--socket", socket, "--config", path.to_str().unwrap()]);
        assert_ne!(code, 0, "{toml:?} was accepted");
        assert!(text.contains(expected), "{toml:?}: {text}");
    }
    // A flag overrides the bad file value.
    let path = dir.path().join("override.toml");
    std::fs::write(&path, "managed_cores = [0]\ninterval_us = 0\n").unwrap();
    let (code, text) = run_iokerneld(&[
        "--socket",
        socket,
        "--config",
        path.to_str().unwrap(),
        "--managed-cores",
        "0",
    ]);
    assert_ne!(code, 0);
    assert!(text.contains("invalid managed_cores = \"0\""), "{text}");
}

#[test]
fn help_explains_every_setting() {
    let (code, text) = run_iokerneld(&["--help"]);
    assert_eq!(code, 0, "{text}");
    for setting in [
        "--config",
        "--core",
        "`core`",
        "--managed-cores",
        "`managed_cores`",
        "--socket",
        "`socket`",
        "--interval-us",
        "`interval_us`",
        "--preemption-timeout-us",
        "`preemption_timeout_us`",
        "--share-quantum-us",
        "`share_quantum_us`",
        "--control-poll-us",
        "`control_poll_us`",
        "--log-level",
        "`log_level`",
        "--log-file",
        "`log_file`",
        "--nic",
        "`gen`",
        "`xdp`",
        "--interface",
        "`interface`",
        "--xdp-queues",
        "`xdp_queues`",
        "--xdp-attach",
        "`xdp_attach`",
        "stats",
        "gen",
    ] {
        assert!(
            text.contains(setting),
            "--help does not mention {setting}:\n{text}"
        );
    }
    let (code, text) = run_iokerneld(&["stats", "--help"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("--socket"), "{text}");
    let (code, text) = run_iokerneld(&["gen", "--help"]);
    assert_eq!(code, 0, "{text}");
    for flag in [
        "--socket",
        "--target",
        "--rate",
        "--duration",
        "--phase",
        "RPS@SECONDS",
        "--service",
        "--arrivals",
        "--clients",
        "--seed",
        "--payload",
        "--grace-ms",
        "--window-ms",
        "--json",
        "--protocol",
        "--queries",
        "--edns",
    ] {
        assert!(
            text.contains(flag),
            "gen --help does not mention {flag}:\n{text}"
        );
    }
}

#[test]
fn config_file_settings_are_used() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("from-file.sock");
    let log = dir.path().join("logs/iokerneld.log");
    let config = dir.path().join("iokerneld.toml");
    std::fs::write(
        &config,
        format!(
            "core = 0\nmanaged_cores = \"1\"\nsocket = {:?}\ninterval_us = 20\n\
             log_level = \"debug\"\nlog_file = {:?}\nnic = \"none\"\n",
            socket.to_str().unwrap(),
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut child = Command::new(IOKERNELD)
        .args(["--config", config.to_str().unwrap(), "--shield", "off"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(&format!("a socket at {}", socket.display()), WAIT, || {
        control::connect(&socket).is_ok()
    });
    let out = Command::new(IOKERNELD)
        .args(["stats", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stats: Stats = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats.global.interval_us, 20);
    assert_eq!(stats.global.managed_cores, vec![1]);
    // SIGTERM stops it cleanly and removes the socket.
    // SAFETY: kill takes two integers; the child is ours and not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "iokerneld ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "socket left behind");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("managing CPUs 1"), "{text}");
}

#[test]
fn a_good_registration_is_listed_in_stats() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let mut client = daemon.client("good-one", &["--kthreads", "2", "--max-cores", "1"]);
    let id = client.registered();
    let out = Command::new(IOKERNELD)
        .arg("stats")
        .arg("--socket")
        .arg(&daemon.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\n  \"global\""),
        "not pretty-printed: {text}"
    );
    let stats: Stats = serde_json::from_str(&text).unwrap();
    assert_eq!(stats.global.registrations, 1);
    assert_eq!(stats.runtimes.len(), 1);
    let runtime = &stats.runtimes[0];
    assert_eq!(runtime.id, id);
    assert_eq!(runtime.name, "good-one");
    assert_eq!(runtime.pid, client.pid());
    assert_eq!((runtime.kthreads, runtime.max_cores), (2, 1));
    assert_eq!(stats.cores.len(), 1);
    assert_eq!(stats.cores[0].cpu, 1);
}

fn good_registration(tids: Vec<i32>) -> Registration {
    Registration {
        name: "malformed".into(),
        guaranteed_cores: 0,
        max_cores: 1,
        spinning_kthreads: 0,
        run_queue_capacity: 256,
        preemption: corral_abi::control::PreemptionMode::Cooperative,
        tids,
        net: None,
    }
}

/// Sends `bytes` with `fds` and expects a refusal whose message contains `expected`.
fn expect_refusal(
    daemon: &Daemon,
    bytes: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
    expected: &str,
) {
    let (conn, reply) = client::request(&daemon.socket, bytes, fds).unwrap();
    match reply {
        Reply::Error { message } => {
            assert!(
                message.contains(expected),
                "expected {expected:?} in {message:?}"
            )
        }
        other => panic!("expected a refusal naming {expected:?}, got {other:?}"),
    }
    // Refused connections are closed.
    let mut buf = [0u8; 64];
    let deadline = Instant::now() + WAIT;
    loop {
        match rustix::net::recv(&conn, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((0, _)) => break,
            Err(rustix::io::Errno::AGAIN) => {
                assert!(
                    Instant::now() < deadline,
                    "connection left open after {expected:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            other => panic!("unexpected {other:?} after the refusal"),
        }
    }
}

#[test]
fn malformed_registrations_are_refused_naming_the_problem() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let me = corral_iokernel::sys::gettid();
    let region = RegionFile::new(1, true).unwrap();
    let fds = [region.memfd.as_fd()];
    let good = Request::Register(good_registration(vec![me])).encode();

    expect_refusal(
        &daemon,
        &good[..good.len() - 3],
        &fds,
        "header says the body is 64 bytes but 61 arrived",
    );
    expect_refusal(&daemon, &good[..10], &fds, "message truncated");
    let mut wrong_version = good.clone();
    wrong_version[4] = 9;
    expect_refusal(&daemon, &wrong_version, &fds, "version 9");
    let absurd = Request::Register(Registration {
        max_cores: 7,
        ..good_registration(vec![me])
    })
    .encode();
    expect_refusal(&daemon, &absurd, &fds, "invalid max_cores = 7");
    let mut huge = good.clone();
    let kthreads_at = corral_abi::control::HEADER_LEN + corral_abi::control::NAME_LEN + 6;
    huge[kthreads_at..kthreads_at + 2].copy_from_slice(&60000u16.to_le_bytes());
    expect_refusal(&daemon, &huge, &fds, "kthreads = 60000");
    expect_refusal(
        &daemon,
        &good,
        &[],
        "0 file descriptors came with the message: expected 1 (the region)",
    );
    // A descriptor beyond the region: refused, and iokerneld closes what came, so that once our
    // own write end of the pipe is gone its read end sees end-of-file.
    let (extra_read, extra_write) = std::io::pipe().unwrap();
    expect_refusal(
        &daemon,
        &good,
        &[region.memfd.as_fd(), extra_write.as_fd()],
        "2 file descriptors came with the message: expected 1 (the region)",
    );
    drop(extra_write);
    let mut readable = [rustix::event::PollFd::new(
        &extra_read,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    assert_eq!(
        rustix::event::poll(&mut readable, Some(&timeout)).unwrap(),
        1,
        "iokerneld kept the extra descriptor open"
    );
    let mut byte = [0u8; 1];
    assert_eq!(std::io::Read::read(&mut &extra_read, &mut byte).unwrap(), 0);

    let unsealed = RegionFile::new(1, false).unwrap();
    expect_refusal(
        &daemon,
        &good,
        &[unsealed.memfd.as_fd()],
        "not sealed against shrinking",
    );
    let (pipe_read, _pipe_write) = std::io::pipe().unwrap();
    expect_refusal(
        &daemon,
        &good,
        &[pipe_read.as_fd()],
        "descriptor 0 (the region): it is not a memfd that supports sealing (pipe:",
    );
    let two = RegionFile::new(2, true).unwrap();
    expect_refusal(
        &daemon,
        &good,
        &[two.memfd.as_fd()],
        "kthreads = 2 but the registration has 1",
    );
    let other_process = Request::Register(good_registration(vec![1])).encode();
    expect_refusal(
        &daemon,
        &other_process,
        &fds,
        "invalid tids[0] = 1: not a thread of the registering process",
    );
    let guaranteed_too_much = Request::Register(Registration {
        guaranteed_cores: 1,
        max_cores: 1,
        ..good_registration(vec![me])
    });
    // One managed core: a guarantee of 1 fits, a second one does not.
    let (held, reply) =
        client::request(&daemon.socket, &guaranteed_too_much.encode(), &fds).unwrap();
    assert!(matches!(reply, Reply::Registered { .. }), "{reply:?}");
    let region2 = RegionFile::new(1, true).unwrap();
    let bytes = Request::Register(good_registration(vec![me])).encode();
    expect_refusal(
        &daemon,
        &bytes,
        &[region2.memfd.as_fd()],
        &format!("invalid tids[0] = {me}: already registered by runtime"),
    );
    let scoped = std::thread::scope(|s| {
        s.spawn(|| {
            let tid = corral_iokernel::sys::gettid();
            let bytes = Request::Register(Registration {
                guaranteed_cores: 1,
                max_cores: 1,
                ..good_registration(vec![tid])
            })
            .encode();
            client::request(&daemon.socket, &bytes, &[region2.memfd.as_fd()])
                .unwrap()
                .1
        })
        .join()
        .unwrap()
    });
    match scoped {
        Reply::Error { message } => assert!(
            message.contains("guaranteeing 1 more cores on top of 1 exceeds the 1 managed cores"),
            "{message}"
        ),
        other => panic!("oversubscribed guarantee accepted: {other:?}"),
    }
    drop(held);

    let stats = daemon.wait_for("the guaranteed runtime to leave", |s| s.runtimes.is_empty());
    assert_eq!(stats.global.refused_registrations, 13);
    assert!(
        stats
            .global
            .last_refusal
            .as_deref()
            .is_some_and(|r| r.contains("guaranteeing")),
        "{:?}",
        stats.global.last_refusal
    );

    // The daemon still serves a good registration.
    let runtime = Runtime::start(Options::new(&daemon.socket, "after-the-bad-ones")).unwrap();
    let stats = daemon.stats();
    assert_eq!(stats.runtimes.len(), 1);
    assert_eq!(stats.runtimes[0].id, runtime.id);
    assert_eq!(stats.runtimes[0].name, "after-the-bad-ones");
}

#[test]
fn sixty_four_runtimes_at_once() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let runtimes: Vec<Runtime> = (0..64)
        .map(|i| {
            let mut options = Options::new(&daemon.socket, format!("many-{i}"));
            options.kthreads = 2;
            Runtime::start(options).unwrap_or_else(|e| panic!("runtime {i}: {e}"))
        })
        .collect();
    let mut ids: Vec<u64> = runtimes.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 64);
    let stats = daemon.stats();
    assert_eq!(stats.global.runtimes_registered, 64);
    assert_eq!(stats.runtimes.len(), 64);
    assert!(stats.runtimes.iter().all(|r| r.kthreads == 2));
    drop(runtimes);
    let stats = daemon.wait_for("all 64 runtimes to leave", |s| s.runtimes.is_empty());
    assert_eq!(stats.global.disconnects, 64);
    assert_eq!(stats.global.evictions, 0);
}

#[test]
fn a_killed_runtime_frees_its_core() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let mut holder = daemon.client("holder", &["--mode", "busy", "--timer-after-ms", "0"]);
    let id = holder.registered();
    let (granted, ran_on) = grant_cpus(&holder.expect("grant 0 "));
    assert_eq!((granted, ran_on), (1, 1));
    let stats = daemon.stats();
    assert_eq!(stats.cores[0].owner.as_ref().map(|o| o.id), Some(id));

    holder.kill();
    let stats = daemon.wait_for("the killed runtime to be reclaimed", |s| {
        s.runtimes.is_empty() && s.cores[0].owner.is_none()
    });
    assert_eq!(stats.cores[0].state, "idle");
    assert_eq!(stats.global.disconnects, 1);

    let mut next = daemon.client("next", &["--timer-after-ms", "0"]);
    next.registered();
    assert_eq!(grant_cpus(&next.expect("grant 0 ")), (1, 1));
    next.expect("park 0");
}

#[test]
fn a_runtime_writing_garbage_is_evicted() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let mut vandal = daemon.client("vandal", &["--mode", "garbage", "--kthreads", "2"]);
    vandal.registered();
    // Whichever garbage iokerneld reads first (a command slot, queue counters) names the
    // kthread it came from.
    let line = vandal.expect("evicted: ");
    assert!(line.contains("kthread"), "{line}");
    let stats = daemon.wait_for("the eviction", |s| s.runtimes.is_empty());
    assert_eq!(stats.global.evictions, 1);
    assert!(
        daemon.log().contains("evicting runtime"),
        "{}",
        daemon.log()
    );

    let mut next = daemon.client("next", &["--timer-after-ms", "0"]);
    next.registered();
    assert_eq!(grant_cpus(&next.expect("grant 0 ")), (1, 1));
}

#[test]
fn a_runtime_writing_its_cede_word_is_evicted_and_the_others_get_the_core() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let mut vandal = daemon.client(
        "vandal",
        &["--mode", "scribble-cede", "--timer-after-ms", "0"],
    );
    vandal.registered();
    assert_eq!(grant_cpus(&vandal.expect("grant 0 ")), (1, 1));
    // Taking the core back is when iokerneld next writes the cede word, and finds it changed.
    let mut needy = daemon.client("needy", &["--mode", "busy", "--timer-after-ms", "0"]);
    needy.registered();
    let line = vandal.expect("evicted: ");
    assert!(line.contains("cede word"), "{line}");
    assert_eq!(grant_cpus(&needy.expect("grant 0 ")), (1, 1));
    let stats = daemon.wait_for("the eviction", |s| s.runtimes.len() == 1);
    assert_eq!(stats.global.evictions, 1);
    assert_eq!(stats.runtimes[0].name, "needy");
}

#[test]
fn a_kthread_blocking_preemption_is_demoted() {
    let _serial = serial();
    let daemon = Daemon::start(&["--preemption-timeout-us", "2000"]);
    let mut stubborn = daemon.client(
        "stubborn",
        &["--mode", "block-sigusr1", "--timer-after-ms", "0"],
    );
    let stubborn_id = stubborn.registered();
    assert_eq!(grant_cpus(&stubborn.expect("grant 0 ")), (1, 1));
    let tid = stubborn.kthread_tid(0);
    assert_eq!(
        corral_iokernel::sys::sched_policy(tid).unwrap(),
        libc::SCHED_OTHER
    );

    let mut needy = daemon.client("needy", &["--mode", "busy", "--timer-after-ms", "0"]);
    let needy_id = needy.registered();
    assert_eq!(grant_cpus(&needy.expect("grant 0 ")), (1, 1));

    let stats = daemon.wait_for("the demotion", |s| s.global.demotions == 1);
    assert_eq!(
        corral_iokernel::sys::sched_policy(tid).unwrap(),
        libc::SCHED_IDLE
    );
    let stubborn_stats = stats.runtimes.iter().find(|r| r.id == stubborn_id).unwrap();
    assert_eq!(stubborn_stats.demotions, 1);
    assert_eq!(stubborn_stats.cores_held, 0);
    assert_eq!(stats.cores[0].owner.as_ref().map(|o| o.id), Some(needy_id));
    assert!(
        daemon.log().contains("ignored preemption"),
        "{}",
        daemon.log()
    );
}

#[test]
fn preemption_round_trip() {
    let _serial = serial();
    // A timeout far above any scheduling hiccup, so that the busy kthread is never demoted
    // for answering late on a loaded machine.
    let daemon = Daemon::start(&["--log-level", "debug", "--preemption-timeout-us", "2000000"]);
    let mut busy = daemon.client("busy", &["--mode", "busy", "--timer-after-ms", "0"]);
    let busy_id = busy.registered();
    assert_eq!(grant_cpus(&busy.expect("grant 0 ")), (1, 1));

    // Work handed in through the shared queue of a runtime with no core.
    let mut idle = daemon.client("idle", &["--work-after-ms", "200"]);
    let idle_id = idle.registered();
    busy.expect("preempt 0");
    busy.expect("yielded 0");
    assert_eq!(grant_cpus(&idle.expect("grant 0 ")), (1, 1));
    idle.expect("park 0");
    // The busy runtime left work behind and gets the core back once it is free.
    assert_eq!(grant_cpus(&busy.expect("grant 0 ")), (1, 1));

    let stats = daemon.wait_for("the core to return", |s| {
        s.cores[0].owner.as_ref().map(|o| o.id) == Some(busy_id)
    });
    let busy_stats = stats.runtimes.iter().find(|r| r.id == busy_id).unwrap();
    assert_eq!(busy_stats.preemptions_suffered, 1);
    assert_eq!(busy_stats.preempt_signals, 1);
    assert!(busy_stats.preemption_latency_last_ns > 0);
    assert_eq!(busy_stats.grants, 2);
    let idle_stats = stats.runtimes.iter().find(|r| r.id == idle_id).unwrap();
    assert_eq!(idle_stats.grants, 1);
    assert_eq!(idle_stats.parks, 1);
    assert_eq!(stats.global.demotions, 0);
    assert_eq!(stats.cores[0].reallocations, 3);
}

/// One preemption of a busy runtime registered with `busy_args`, under a grace period long
/// enough for its kthread (which polls its ingress ring while it spins) to cede in; returns
/// the busy runtime's statistics and the daemon's log once the core is back with it.
fn one_preemption_under_a_long_grace(
    busy_args: &[&str],
) -> (corral_iokernel::daemon::RuntimeStats, Stats, String) {
    let daemon = Daemon::start(&[
        "--log-level",
        "info",
        "--cede-grace-us",
        "1000000",
        "--preemption-timeout-us",
        "2000000",
    ]);
    let mut args = vec!["--mode", "busy", "--timer-after-ms", "0"];
    args.extend_from_slice(busy_args);
    let mut busy = daemon.client("busy", &args);
    let busy_id = busy.registered();
    assert_eq!(grant_cpus(&busy.expect("grant 0 ")), (1, 1));
    let mut idle = daemon.client("idle", &["--work-after-ms", "200"]);
    idle.registered();
    busy.expect("preempt 0");
    busy.expect("yielded 0");
    assert_eq!(grant_cpus(&idle.expect("grant 0 ")), (1, 1));
    idle.expect("park 0");
    assert_eq!(grant_cpus(&busy.expect("grant 0 ")), (1, 1));
    let stats = daemon.wait_for("the core to return", |s| {
        s.cores[0].owner.as_ref().map(|o| o.id) == Some(busy_id)
    });
    let busy_stats = stats
        .runtimes
        .iter()
        .find(|r| r.id == busy_id)
        .unwrap()
        .clone();
    (busy_stats, stats, daemon.log())
}

/// A runtime that registers for the signal at once is signalled with the request even though
/// it would cede within the grace period; one that does not cedes with no signal.
#[test]
fn the_grace_period_is_per_runtime() {
    let _serial = serial();
    let (cooperative, stats, log) = one_preemption_under_a_long_grace(&[]);
    assert_eq!(cooperative.preemption, "cooperative");
    assert_eq!(cooperative.preemptions_suffered, 1);
    assert_eq!(cooperative.cedes_cooperative, 1);
    assert_eq!(cooperative.preempt_signals, 0);
    assert_eq!(cooperative.preempt_signals_at_once, 0);
    assert_eq!(stats.global.preemptions_signalled_at_once, 0);
    assert!(log.contains("preemption cooperative"), "{log}");

    let (at_once, stats, log) = one_preemption_under_a_long_grace(&["--preempt-at-once"]);
    assert_eq!(at_once.preemption, "signal_at_once");
    assert_eq!(at_once.preemptions_suffered, 1);
    assert_eq!(at_once.cedes_cooperative, 0);
    assert_eq!(at_once.preempt_signals, 1);
    assert_eq!(at_once.preempt_signals_at_once, 1);
    assert_eq!(stats.global.preemptions_signalled_at_once, 1);
    assert_eq!(stats.global.demotions, 0);
    assert!(log.contains("preemption signal_at_once"), "{log}");
}

#[test]
fn spinning_kthreads_hold_their_guaranteed_core() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    // No timer and no work: the spinning kthread is granted its core at registration.
    let mut spinner = daemon.client("spinner", &["--guaranteed", "1", "--spinning", "1"]);
    let spinner_id = spinner.registered();
    assert_eq!(grant_cpus(&spinner.expect("grant 0 ")), (1, 1));

    // A guaranteed core is never taken back, however much another runtime wants it.
    let mut hopeful = daemon.client("hopeful", &["--timer-after-ms", "0"]);
    let hopeful_id = hopeful.registered();
    let stats = daemon.wait_for("the second runtime to wait", |s| {
        s.runtimes.iter().any(|r| r.id == hopeful_id && r.waiting)
    });
    assert_eq!(stats.global.preemptions_signalled, 0);
    assert_eq!(
        stats.cores[0].owner.as_ref().map(|o| o.id),
        Some(spinner_id)
    );

    // Once the guaranteed runtime is gone, the waiting one gets the core.
    drop(spinner);
    assert_eq!(grant_cpus(&hopeful.expect("grant 0 ")), (1, 1));
    hopeful.expect("park 0");
}
