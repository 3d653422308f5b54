//! Child processes that cannot outlive the runner.
//!
//! Every child gets its own process group, so that a Ctrl-C at the terminal reaches only the
//! runner, which then stops the children in a known order (the runtimes before iokerneld) and
//! reaps them. Each child also asks the kernel for a signal when the runner dies, so that even a
//! `kill -9` of the runner leaves no busy-polling daemon or spinning server behind.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// How often the runner wakes while it waits on a measurement. Each wake-up takes a few
/// microseconds of a CPU that the system under test is using, so it is kept rare; it bounds
/// how late a stop signal or a child's exit is noticed.
pub const POLL: Duration = Duration::from_millis(50);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP set a flag that every wait in the runner checks, instead of
/// killing the runner before it has stopped its children.
pub fn install_interrupt_handler() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction is fully initialized (zeroed, then the handler and an empty mask).
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::msg(format!(
                "cannot install a handler for signal {sig}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Fails with [`Error::Interrupted`] once a stop signal has arrived.
pub fn check_interrupt() -> Result<()> {
    if interrupted() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// Sleeps for `d` in short steps, returning early with [`Error::Interrupted`] on a stop signal.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        check_interrupt()?;
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(POLL));
    }
}

/// How to run one child.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Short name for messages and the log file, e.g. `iokerneld`.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Where its standard error (and standard output, unless piped) goes.
    pub log: PathBuf,
    /// Whether the runner reads its standard output through a pipe.
    pub pipe_stdout: bool,
    /// The signal that asks it to stop cleanly (iokerneld removes its socket on SIGTERM).
    pub stop_signal: libc::c_int,
    /// Whether its standard output is thrown away (a program whose output is not the point).
    pub discard_stdout: bool,
    /// Runs it at SCHED_IDLE, pinned to this CPU.
    pub idle_on_cpu: Option<usize>,
    /// Pins it (every thread it starts inherits the mask) to this CPU at its normal priority.
    pub pin_to_cpu: Option<usize>,
    /// Whether stopping it stops its whole process group (the processes it started too).
    pub stop_group: bool,
    /// Runs it (every thread it starts inherits the class) at SCHED_FIFO with this priority.
    pub fifo_priority: Option<u32>,
}

impl Spec {
    pub fn new(name: &str, program: &Path, args: Vec<String>, log: PathBuf) -> Spec {
        Spec {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            log,
            pipe_stdout: false,
            stop_signal: libc::SIGKILL,
            discard_stdout: false,
            idle_on_cpu: None,
            pin_to_cpu: None,
            stop_group: false,
            fifo_priority: None,
        }
    }

    /// The scheduling class and CPU it is started with, for the report.
    pub fn class(&self) -> String {
        let class = match (self.idle_on_cpu, self.fifo_priority) {
            (Some(_), _) => "SCHED_IDLE".to_owned(),
            (None, Some(p)) => format!("SCHED_FIFO {p}"),
            (None, None) => "SCHED_OTHER".to_owned(),
        };
        match self.idle_on_cpu.or(self.pin_to_cpu) {
            Some(cpu) => format!("{class} on CPU {cpu}"),
            None => class,
        }
    }

    /// The command line, as a list of words, for the record.
    pub fn command_line(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// A running child; stopping and reaping it happens on drop at the latest.
pub struct Proc {
    pub spec: Spec,
    child: Child,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(spec: Spec) -> Result<Proc> {
        let log = File::create(&spec.log)
            .map_err(|e| Error::msg(format!("cannot create {}: {e}", spec.log.display())))?;
        let stdout = if spec.pipe_stdout {
            Stdio::piped()
        } else if spec.discard_stdout {
            Stdio::null()
        } else {
            Stdio::from(
                log.try_clone()
                    .map_err(|e| Error::msg(format!("{}: {e}", spec.log.display())))?,
            )
        };
        let death_signal = spec.stop_signal;
        let idle_on_cpu = spec.idle_on_cpu;
        let pin_to_cpu = spec.pin_to_cpu;
        let fifo_priority = spec.fifo_priority.map(|p| p as libc::c_int);
        // SAFETY: getpid has no preconditions.
        let runner = unsafe { libc::getpid() };
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::from(log))
            .process_group(0);
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (prctl, getppid, and the system calls sched_setaffinity and
        // sched_setscheduler on the child itself, with structures built on its stack).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, death_signal as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The runner may have died before the request above took effect.
                if libc::getppid() != runner {
                    return Err(std::io::Error::other("the runner exited"));
                }
                if let Some(cpu) = idle_on_cpu.or(pin_to_cpu) {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                let class = match (idle_on_cpu, fifo_priority) {
                    (Some(_), _) => Some((libc::SCHED_IDLE, 0)),
                    (None, Some(p)) => Some((libc::SCHED_FIFO, p)),
                    (None, None) => None,
                };
                if let Some((policy, priority)) = class {
                    let param = libc::sched_param {
                        sched_priority: priority,
                    };
                    if libc::sched_setscheduler(0, policy, &param) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            Error::msg(format!(
                "cannot start {} ({}): {e}",
                spec.name,
                spec.program.display()
            ))
        })?;
        Ok(Proc {
            spec,
            child,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Its exit status, if it has exited (reaping it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Fails, with the end of its log, if it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.try_status() {
            None => Ok(()),
            Some(status) => Err(Error::msg(format!(
                "{} exited ({status}): {}",
                self.spec.name,
                self.log_tail()
            ))),
        }
    }

    /// The last lines of its log, on one line, for error messages.
    pub fn log_tail(&self) -> String {
        tail_of(&self.spec.log, 1500)
    }

    /// Waits for it to exit by itself, up to `timeout`, checking `also` (the other children it
    /// depends on) meanwhile. On time-out it is killed and an error names it.
    pub fn wait_timeout(
        &mut self,
        timeout: Duration,
        mut also: impl FnMut() -> Result<()>,
    ) -> Result<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return Ok(status);
            }
            check_interrupt()?;
            also()?;
            if Instant::now() >= end {
                self.stop();
                return Err(Error::msg(format!(
                    "{} did not finish within {:.0} s; killed it. Its log: {}",
                    self.spec.name,
                    timeout.as_secs_f64(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Asks it to stop with its stop signal, then kills it if it has not exited within a
    /// couple of seconds, and reaps it.
    pub fn stop(&mut self) {
        if self.try_status().is_some() {
            return;
        }
        let pid = self.child.id() as libc::pid_t;
        // Its process group has its pid (see `spawn`).
        let target = if self.spec.stop_group { -pid } else { pid };
        // SAFETY: the child has not been reaped (try_status saw it running), so its pid still
        // names it and its group.
        unsafe { libc::kill(target, self.spec.stop_signal) };
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            if self.try_status().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `max` bytes of a file, lines joined with " | "; says so when the file is empty.
pub fn tail_of(path: &Path, max: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        format!("(nothing in {})", path.display())
    } else {
        format!("{} (log: {})", lines.join(" | "), path.display())
    }
}

/// Runs a short command to completion with a time-out and returns its standard output; for
/// `iokerneld stats`.
pub fn run_capture(program: &Path, args: &[&str], timeout: Duration) -> Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::msg(format!("cannot run {}: {e}", program.display())))?;
    // Readers on their own threads, so that a large output cannot fill a pipe and stall the
    // child while this thread waits for it to exit.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let end = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            break status;
        }
        if Instant::now() >= end || interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            check_interrupt()?;
            return Err(Error::msg(format!(
                "{} {} did not finish within {:.0} s",
                program.display(),
                args.join(" "),
                timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::msg(format!(
            "{} {} failed ({status}): {}",
            program.display(),
            args.join(" "),
            err.trim()
        )));
    }
    Ok(out)
}
