//! Signals reach the uthread that waits for them or has them unblocked, under corral-run as
//! under plain Linux: each path of `programs/signals.c` prints the same plain and under Corral;
//! signals from other processes (handled, waited for, default action) end the waits they
//! should; and lbzip2 and pbzip2, which steer their threads with signals, produce the plain
//! programs' output and end on SIGTERM.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn program() -> &'static PathBuf {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        support::build(
            "gcc",
            "signals.c",
            &support::scratch("signals"),
            &["-pthread"],
        )
    })
}

/// Runs a mode plain and under corral-run (with `flags`) and checks both print the same.
fn same_as_plain(mode: &str, flags: &[&str]) {
    let plain = support::run(Command::new(program()).arg(mode));
    let expected = support::success(&format!("plain signals {mode}"), &plain);
    let mut command = support::corral_run();
    command.args(flags).arg("--").arg(program()).arg(mode);
    let shimmed = support::run(&mut command);
    let got = support::success(
        &format!("signals {mode} under corral-run {flags:?}"),
        &shimmed,
    );
    assert_eq!(
        got, expected,
        "signals {mode}: corral-run printed otherwise"
    );
}

#[test]
fn sigsuspend_takes_a_signal_another_thread_sent_the_process() {
    same_as_plain("suspend", &[]);
    same_as_plain("suspend", &["--kthreads", "1"]);
}

#[test]
fn sigwait_takes_pthread_kill_and_sigqueue_without_holding_a_kthread() {
    // With one kthread, main runs only if the thread in sigwait gave it back.
    same_as_plain("sigwait", &["--kthreads", "1"]);
    same_as_plain("sigwait", &[]);
}

#[test]
fn blocked_signals_stay_pending_until_unblocked() {
    same_as_plain("pending", &[]);
}

#[test]
fn a_handler_interrupts_the_computing_thread_that_has_the_signal_unblocked() {
    same_as_plain("interrupt", &[]);
}

#[test]
fn a_handler_ends_sleeps_early() {
    same_as_plain("sleep", &[]);
}

#[test]
fn signalfd_reads_what_the_process_was_sent() {
    same_as_plain("signalfd", &[]);
}

#[test]
fn children_start_with_the_programs_mask_not_the_kthreads() {
    same_as_plain("children", &[]);
}

/// A process whose stdout is read line by line, killed if the test ends before it.
struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

/// How long a line may take: only a hang takes this long.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

impl Running {
    fn start(command: &mut Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    fn expect_line(&mut self, wanted: &str) {
        let line = self.lines.recv_timeout(LINE_TIMEOUT).ok();
        if line.as_deref() != Some(wanted) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let mut stderr = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            panic!("expected {wanted:?}, got {line:?}; stderr:\n{stderr}");
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill of our own child, which we have not reaped.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill");
    }

    /// Waits for the end (killing it after a minute: a hang is a failure, not a wait).
    fn wait(mut self) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if started.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                panic!("the process did not end on its signal");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn under_corral(args: &[&str]) -> Command {
    let mut command = support::corral_run();
    command.arg("--").args(args);
    command
}

#[test]
fn signals_from_another_process_reach_the_handler_and_the_waiter() {
    let program = program().to_str().expect("a UTF-8 path").to_owned();
    let mut running = Running::start(&mut under_corral(&[&program, "external"]));
    running.expect_line("ready");
    running.signal(libc::SIGHUP);
    running.expect_line("SIGHUP handled");
    running.signal(libc::SIGTERM);
    running.expect_line("SIGTERM taken");
    let status = running.wait();
    assert!(status.success(), "external mode ended with {status}");
}

#[test]
fn a_default_action_from_another_process_ends_the_program() {
    let program = program().to_str().expect("a UTF-8 path").to_owned();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut running = Running::start(&mut under_corral(&[&program, "default"]));
        running.expect_line("ready");
        running.signal(sig);
        let status = running.wait();
        assert_eq!(
            status.signal(),
            Some(sig),
            "ended with {status}, not by signal {sig}"
        );
    }
}

/// About 8 MiB of text that compresses a little, written once.
fn input() -> &'static PathBuf {
    static INPUT: OnceLock<PathBuf> = OnceLock::new();
    INPUT.get_or_init(|| {
        let dir = support::scratch("signals");
        let path = dir.join("input.txt");
        let mut data = Vec::with_capacity(8 << 20);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        while data.len() < 8 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let word = ["signal ", "mask ", "pending ", "handler\n"][(x >> 40) as usize % 4];
            data.extend_from_slice(word.as_bytes());
            if x.is_multiple_of(7) {
                data.extend_from_slice(format!("{:x} ", x >> 16).as_bytes());
            }
        }
        let tmp = dir.join("input.tmp");
        std::fs::write(&tmp, &data).expect("write the input");
        std::fs::rename(&tmp, &path).expect("rename the input");
        path
    })
}

fn tool(name: &str) -> PathBuf {
    let exe = Path::new("/usr/bin").join(name);
    assert!(
        exe.is_file(),
        "{} is missing: scripts/setup.sh installs it",
        exe.display()
    );
    exe
}

/// Compresses and decompresses under corral-run; the output is the plain tool's, byte for
/// byte, and nothing is printed on stderr.
fn round_trip(name: &str, threads: &[&str]) {
    let exe = tool(name);
    let dir = support::scratch("signals");
    let plain = support::run(Command::new(&exe).args(threads).args(["-c"]).arg(input()));
    support::success(&format!("plain {name}"), &plain);
    let packed = support::run(
        support::corral_run()
            .arg("--")
            .arg(&exe)
            .args(threads)
            .arg("-c")
            .arg(input()),
    );
    support::success(&format!("{name} under corral-run"), &packed);
    assert!(
        packed.stdout == plain.stdout,
        "{name}: corral-run's output ({} bytes) differs from plain ({} bytes)",
        packed.stdout.len(),
        plain.stdout.len()
    );
    assert!(
        packed.stderr.is_empty(),
        "{name} printed: {}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let file = dir.join(format!("packed-{name}.bz2"));
    std::fs::write(&file, &packed.stdout).expect("write the compressed file");
    let unpacked = support::run(
        support::corral_run()
            .arg("--")
            .arg(&exe)
            .args(threads)
            .args(["-d", "-c"])
            .arg(&file),
    );
    support::success(&format!("{name} -d under corral-run"), &unpacked);
    assert!(
        unpacked.stdout == std::fs::read(input()).expect("read the input"),
        "{name} -d under corral-run did not give the input back"
    );
    assert!(
        unpacked.stderr.is_empty(),
        "{name} -d printed: {}",
        String::from_utf8_lossy(&unpacked.stderr)
    );
}

#[test]
fn lbzip2_compresses_and_decompresses_as_plain() {
    round_trip("lbzip2", &["-n4"]);
}

#[test]
fn pbzip2_compresses_and_decompresses_as_plain() {
    round_trip("pbzip2", &["-p4"]);
}

/// Starts `name` compressing a pipe that never ends, under corral-run.
fn compressing_forever(name: &str, threads: &str) -> Child {
    support::corral_run()
        .arg("--")
        .arg(tool(name))
        .arg(threads)
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"))
}

fn wait_for_end(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{what}: still running a minute after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_ends_lbzip2_by_sigterm_and_pbzip2_with_its_message() {
    for (name, threads) in [("lbzip2", "-n4"), ("pbzip2", "-p4")] {
        let mut child = compressing_forever(name, threads);
        let mut stdin = child.stdin.take().expect("stdin");
        use std::io::Write;
        stdin.write_all(&[b'x'; 1 << 16]).expect("feed it");
        // Let it start its threads and block in its reads; the signal must end it either way.
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill of our own child, which we have not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let status = wait_for_end(&mut child, name);
        drop(stdin);
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        match name {
            // lbzip2 cleans up, then dies by the signal itself.
            "lbzip2" => assert_eq!(
                status.signal(),
                Some(libc::SIGTERM),
                "{name}: {status}; {stderr}"
            ),
            // pbzip2's signal thread takes it in sigwait and quits with status 1.
            _ => {
                assert_eq!(status.code(), Some(1), "{name}: {status}; {stderr}");
                assert!(
                    stderr.contains("caught [sig=15]"),
                    "{name} did not report the signal: {stderr}"
                );
            }
        }
    }
}
