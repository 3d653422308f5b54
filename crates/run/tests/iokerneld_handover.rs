//! Under iokerneld, an unmodified `xz -T2` run by corral-run as the batch job on the one
//! managed core gives that core up each time a latency-critical runtime (this test's own) needs
//! it, over 1,000 hand-overs: never so late that iokerneld has to demote it (its preemption
//! bound), and its output is still byte-identical to a plain run.
//!
//! iokerneld comes from `target/<profile>/iokerneld`, which scripts/test.sh builds before the
//! workspace tests (`cargo test` does not build other packages' binaries).

mod support;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use corral::{Config, IokernelSettings, Runtime};

const HANDOVERS: u64 = 1000;
/// Only against a hang: hand-overs come every few hundred microseconds.
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// iokerneld's preemption bound: a kthread still holding its core this long after being asked
/// to give it back is demoted off the managed cores. Ten times iokerneld's default, because
/// on a loaded machine Linux alone can keep a runnable kthread (or iokerneld) off a CPU for
/// over 10 ms, and a plain Rust batch runtime is then demoted as well; a program that ignores
/// the preemption signal is demoted at any bound.
const PREEMPTION_TIMEOUT_US: u64 = 100_000;

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    /// SIGTERM first, as in service. It runs unshielded: a shield left by an iokerneld killed
    /// outright would last until the next iokerneld starts, and every process started
    /// meanwhile (the next test programs) would be held off CPU 0.
    fn drop(&mut self) {
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let asked = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && asked.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start() -> Daemon {
        let exe = support::profile_dir().join("iokerneld");
        assert!(
            exe.is_file(),
            "{} is missing: build it with `cargo build -p corral-iokerneld --bin iokerneld` \
             (scripts/test.sh does)",
            exe.display()
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("iokerneld.sock");
        let child = Command::new(exe)
            .args([
                "--core",
                "0",
                "--managed-cores",
                "1",
                "--nic",
                "none",
                "--log-level",
                "warn",
                // Never the machine-wide shield: a test killed mid-run would leave it.
                "--shield",
                "off",
            ])
            .args([
                "--preemption-timeout-us",
                &PREEMPTION_TIMEOUT_US.to_string(),
            ])
            // A grace period for cooperative cedes, as in the co-location demo: programs under
            // corral-run must not wait it out.
            .args(["--cede-grace-us", "20"])
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start iokerneld");
        // Killed on drop from here on, even if it never comes up.
        let daemon = Daemon {
            child,
            socket,
            _dir: dir,
        };
        let start = Instant::now();
        while daemon.stats().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "iokerneld did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }

    /// `iokerneld stats`, once it answers.
    fn stats(&self) -> Option<serde_json::Value> {
        let exe = support::profile_dir().join("iokerneld");
        let out = Command::new(exe)
            .args(["stats", "--socket"])
            .arg(&self.socket)
            .stderr(Stdio::null())
            .output()
            .expect("run iokerneld stats");
        serde_json::from_slice(&out.stdout).ok()
    }

    fn has_runtime(&self, name: &str) -> bool {
        self.stats().is_some_and(|s| {
            s["runtimes"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["name"] == name))
        })
    }

    fn runtime_stats(&self, name: &str) -> serde_json::Value {
        let stats = self.stats().expect("iokerneld stats prints JSON");
        stats["runtimes"]
            .as_array()
            .expect("a runtimes array")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("runtime {name} not in {stats:#}"))
    }
}

/// Text for xz in 64 KiB chunks: the same stream every time it is made anew.
struct Text {
    x: u64,
}

impl Text {
    const CHUNK: usize = 64 << 10;

    fn new() -> Text {
        Text {
            x: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn chunk(&mut self) -> Vec<u8> {
        let mut data = Vec::with_capacity(Self::CHUNK + 16);
        while data.len() < Self::CHUNK {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            data.extend_from_slice(format!("{:x} {} ", self.x % 100_000, self.x % 7).as_bytes());
        }
        data
    }
}

/// Writes `Text` to `to` until `stop` is set (or, with `chunks`, that many chunks), then
/// closes it; returns how many chunks it wrote.
fn feed(
    mut to: std::process::ChildStdin,
    stop: Arc<AtomicBool>,
    chunks: Option<usize>,
) -> std::io::Result<usize> {
    let mut text = Text::new();
    let mut written = 0;
    while !stop.load(Ordering::Relaxed) && chunks.is_none_or(|n| written < n) {
        to.write_all(&text.chunk())?;
        written += 1;
    }
    Ok(written)
}

/// Everything `from` yields until its end.
fn drain(
    mut from: impl Read + Send + 'static,
) -> std::thread::JoinHandle<std::io::Result<Vec<u8>>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        from.read_to_end(&mut out).map(|_| out)
    })
}

/// The latency-critical runtime: the managed core is its guaranteed core, which it takes back
/// whenever it has work, and which a batch job gets only while it sleeps. (Without the
/// guarantee the two would be peers: the batch job, woken by its own timers while it holds no
/// core, could take the core from it, and iokerneld would leave it waiting for an idle one.)
fn latency_critical(daemon: &Daemon) -> IokernelSettings {
    IokernelSettings::new(&daemon.socket, "lc").guaranteed_cores(1)
}

/// Each thread of process `pid`: its name, state, the kernel function it waits in, its
/// system call and CPU time, for a failure message.
fn threads_of(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    tasks
        .flatten()
        .map(|task| {
            let dir = task.path();
            let stat = read(dir.join("stat"));
            let fields = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = fields.split_whitespace().collect();
            format!(
                "{} {}: state {} utime {} stime {} cpu {} wchan {} syscall {}\n",
                task.file_name().to_string_lossy(),
                read(dir.join("comm")),
                fields.first().unwrap_or(&"?"),
                fields.get(11).unwrap_or(&"?"),
                fields.get(12).unwrap_or(&"?"),
                fields.get(36).unwrap_or(&"?"),
                read(dir.join("wchan")),
                read(dir.join("syscall")),
            )
        })
        .collect()
}

/// Every thread's backtrace in process `pid`, from gdb (installed by scripts/setup.sh), for a
/// failure message.
fn backtraces(pid: u32) -> String {
    // Bounded: a failure message must not turn into a hang.
    match Command::new("timeout")
        .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("no backtraces: cannot run gdb: {e}"),
    }
}

/// One iokerneld at a time: each manages the same core.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE_DAEMON: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner())
}

/// A latency-critical runtime that sleeps and wakes (each wake-up takes the managed core back
/// from whoever holds it) until `stop` is set.
fn hand_overs_until(daemon: &Daemon, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let lc = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(latency_critical(daemon)),
    )
    .expect("register the latency-critical runtime");
    std::thread::spawn(move || {
        lc.block_on(move || {
            while !stop.load(Ordering::Relaxed) {
                corral::sleep(Duration::from_micros(300));
            }
        })
    })
}

/// With the signal: each preemption request reaches the runtime, never xz's own handler.
#[test]
fn a_corral_run_batch_job_gives_the_core_back_each_time_when_signalled() {
    xz_gives_the_core_back_each_time("signal");
}

/// In the idle class (corral-run's default for a runtime with no guarantee): iokerneld wakes
/// the latency-critical kthread on top of xz's, with no request and no signal.
#[test]
fn a_corral_run_batch_job_in_the_idle_class_gives_the_core_back_each_time() {
    xz_gives_the_core_back_each_time("idle-class");
}

fn xz_gives_the_core_back_each_time(preemption: &str) {
    let _serial = serial();
    // Small blocks: xz reads ahead only a few blocks, so little work is left queued when
    // the hand-overs end and its input with them.
    let xz = ["-T2", "-6", "--block-size=1MiB", "-c"];
    let daemon = Daemon::start();
    let mut batch = support::corral_run()
        .args(["--iokerneld"])
        .arg(&daemon.socket)
        .args([
            "--name",
            "xz-batch",
            "--kthreads",
            "1",
            "--preemption",
            preemption,
        ])
        .args(["--", "/usr/bin/xz"])
        .args(xz)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start corral-run xz");
    // xz compresses its input for as long as the hand-overs last, however slow the machine
    // (a fixed input could run out first). Its output is read as it comes: with a full pipe its
    // main thread would wait in poll(2), holding its only kthread.
    let stop_input = Arc::new(AtomicBool::new(false));
    let input = {
        let stdin = batch.stdin.take().expect("xz's stdin");
        let stop = stop_input.clone();
        std::thread::spawn(move || feed(stdin, stop, None))
    };
    let compressed = drain(batch.stdout.take().expect("xz's stdout"));
    let messages = drain(batch.stderr.take().expect("xz's stderr"));
    // Wait until the batch job registered and holds the core.
    let start = Instant::now();
    while !daemon.has_runtime("xz-batch") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "xz did not register"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = daemon.runtime_stats("xz-batch");
    let counter = |s: &serde_json::Value, key: &str| {
        s[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {s:#}"))
    };
    // Each sleep of the latency-critical runtime parks it, which hands the core to the batch
    // job; each wake-up takes it back. Not every sleep makes a hand-over: a kthread that Linux
    // keeps off its CPU past the 300 us finds its timer due and never parks, and an iokerneld
    // kept off its own CPU that long sees the timer due with the core still idle. So the
    // hand-overs go on until xz has lost the core HANDOVERS times, however many sleeps that
    // takes, and what is checked is that xz gave it back each time.
    let stop_lc = Arc::new(AtomicBool::new(false));
    let lc = hand_overs_until(&daemon, stop_lc.clone());
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let now = counter(&daemon.runtime_stats("xz-batch"), "preemptions_suffered")
            - counter(&before, "preemptions_suffered");
        if now >= HANDOVERS {
            break;
        }
        if now != last {
            (last, since) = (now, Instant::now());
        }
        // A hand-over that never comes is reported with iokerneld's view rather than hanging.
        assert!(
            since.elapsed() < STALL_LIMIT,
            "xz stopped losing the core after {last} preemptions: {:#}",
            daemon.stats().unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop_lc.store(true, Ordering::Relaxed);
    lc.join().expect("the latency-critical runtime");
    // With the latency-critical runtime gone nothing takes the core any more: wait for the
    // last hand-over to end, so that every preemption counted has had its chance to complete.
    let settled = Instant::now();
    let after = loop {
        let now = daemon.runtime_stats("xz-batch");
        if counter(&now, "cores_handing_over") == 0 || settled.elapsed() > STALL_LIMIT {
            break now;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let preemptions =
        counter(&after, "preemptions_suffered") - counter(&before, "preemptions_suffered");
    let parks = counter(&after, "parks") - counter(&before, "parks");
    // Every preemption ends in the kthread parking (a hand-over completed); any more parks
    // are xz's own, when it ran out of work.
    assert!(
        counter(&after, "cores_handing_over") == 0 && parks >= preemptions,
        "xz lost the core {preemptions} times but gave it back {parks} times: {after:#}\n\
         before the hand-overs: {before:#}\nxz's threads now:\n{}\n{}",
        threads_of(batch.id()),
        backtraces(batch.id())
    );
    assert_eq!(
        counter(&after, "demotions"),
        0,
        "xz held the core past the bound: {after:#}"
    );
    let delta = |key: &str| counter(&after, key) - counter(&before, key);
    if preemption == "signal" {
        // Preempted by signal at once: no preemption waited for the grace period, and none
        // was ceded within it.
        assert_eq!(after["preemption"], "signal_at_once", "{after:#}");
        assert_eq!(
            delta("preempt_signals_at_once"),
            delta("preempt_signals"),
            "{after:#}"
        );
        assert!(delta("preempt_signals") >= preemptions, "{after:#}");
    } else {
        // Every core was taken in place, with no signal.
        assert_eq!(after["preemption"], "idle_class", "{after:#}");
        assert!(delta("taken_in_place") >= preemptions, "{after:#}");
        assert_eq!(delta("preempt_signals"), 0, "{after:#}");
    }
    assert_eq!(delta("cedes_cooperative"), 0, "{after:#}");
    let latency_max = counter(&after, "preemption_latency_max_ns");
    assert!(
        latency_max < PREEMPTION_TIMEOUT_US * 1000,
        "slowest hand-over {latency_max} ns"
    );
    stop_input.store(true, Ordering::Relaxed);
    let chunks = input
        .join()
        .expect("the input thread")
        .expect("write xz's input");
    let compressed = compressed
        .join()
        .expect("the output thread")
        .expect("read xz's output");
    let messages = messages
        .join()
        .expect("the error thread")
        .expect("read xz's messages");
    let status = batch.wait().expect("wait for xz");
    assert!(status.success(), "xz under corral-run: {status}");
    // xz prints a progress report for each SIGUSR1 its own handler sees: none of the
    // preemption requests may reach it.
    assert!(
        messages.is_empty(),
        "xz under corral-run wrote: {}",
        String::from_utf8_lossy(&messages)
    );
    let mut plain = Command::new("/usr/bin/xz")
        .args(xz)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("plain xz");
    let stdin = plain.stdin.take().expect("xz's stdin");
    let plain_input =
        std::thread::spawn(move || feed(stdin, Arc::new(AtomicBool::new(false)), Some(chunks)));
    let plain_output = drain(plain.stdout.take().expect("xz's stdout"));
    assert_eq!(
        plain_input
            .join()
            .expect("the input thread")
            .expect("write"),
        chunks
    );
    let plain_output = plain_output
        .join()
        .expect("the output thread")
        .expect("read");
    assert!(plain.wait().expect("wait for plain xz").success());
    assert!(
        compressed == plain_output,
        "xz output under iokerneld differs from plain"
    );
}

/// The preemption signal is also `SIGUSR1`, for which programs install handlers of their own
/// (xz's progress reports): under iokerneld, with hundreds of preemptions landing meanwhile, a
/// program's handlers run exactly for the signals it sends itself with `kill`, and
/// `sigaction`/`signal` report what it installed, as in a plain run.
#[test]
fn a_program_keeps_its_own_sigusr1_handlers_under_preemption() {
    const PREEMPTIONS: u64 = 300;
    let _serial = serial();
    let dir = support::scratch("usr1");
    let exe = support::build("gcc", "usr1.c", &dir, &["-pthread"]);
    let plain = support::success("plain run", &support::run(&mut Command::new(&exe)));

    let daemon = Daemon::start();
    let stop = Arc::new(AtomicBool::new(false));
    let lc = hand_overs_until(&daemon, stop.clone());
    let mut program = support::corral_run()
        .arg("--iokerneld")
        .arg(&daemon.socket)
        // Signalled preemptions are what the program's handlers must not see.
        .args([
            "--name",
            "usr1",
            "--kthreads",
            "1",
            "--preemption",
            "signal",
            "--",
        ])
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start corral-run usr1");
    // It keeps the core busy until its stdin ends: let the hand-overs preempt it a while.
    let start = Instant::now();
    loop {
        let signals = daemon
            .has_runtime("usr1")
            .then(|| daemon.runtime_stats("usr1")["preempt_signals"].as_u64())
            .flatten()
            .unwrap_or(0);
        if signals >= PREEMPTIONS {
            break;
        }
        assert!(
            start.elapsed() < support::RUN_TIMEOUT,
            "only {signals} preemption signals sent to the program"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(program.stdin.take());
    let out = program.wait_with_output().expect("wait for usr1");
    stop.store(true, Ordering::Relaxed);
    lc.join().expect("the latency-critical runtime");
    let shimmed = support::success("corral-run usr1", &out);
    assert_eq!(shimmed, plain);
}
