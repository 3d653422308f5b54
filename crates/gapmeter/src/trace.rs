//! The kernel's trace of the measured CPU while the loop runs, for `--attribute`: a tracefs
//! instance of its own (the machine's global trace is left alone), the `mono` clock the loop
//! reads, and only the events [`attribution::EVENTS`] names, on that CPU alone. Everything is
//! removed when the trace is dropped.

use std::path::{Path, PathBuf};

use corral_gapmeter::attribution::{self, TraceEvent};

const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU ring size: a minute of a busy CPU's interrupts and switches is a few MB.
const BUFFER_KB: u32 = 65_536;

pub struct CpuTrace {
    instance: PathBuf,
    cpu: usize,
    mounted_here: bool,
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text)
        .map_err(|e| format!("cannot write {text:?} to {}: {e}", path.display()))
}

fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(1) == Some(TRACEFS)))
}

impl CpuTrace {
    /// Starts tracing `cpu`, mounting tracefs if it is not.
    pub fn start(cpu: usize) -> Result<CpuTrace, String> {
        let mounted_here = !tracefs_mounted();
        if mounted_here {
            rustix::mount::mount(
                "nodev",
                TRACEFS,
                "tracefs",
                rustix::mount::MountFlags::empty(),
                None,
            )
            .map_err(|e| format!("cannot mount tracefs on {TRACEFS}: {e}"))?;
        }
        let instance = PathBuf::from(format!(
            "{TRACEFS}/instances/corral-gapmeter-{}",
            std::process::id()
        ));
        let trace = CpuTrace {
            instance,
            cpu,
            mounted_here,
        };
        std::fs::create_dir(&trace.instance).map_err(|e| {
            format!(
                "cannot create the trace instance {}: {e}",
                trace.instance.display()
            )
        })?;
        write(&trace.instance.join("tracing_on"), "0")?;
        write(&trace.instance.join("trace_clock"), "mono")?;
        write(
            &trace.instance.join("tracing_cpumask"),
            &corral_iokernel::shield::plan::format_hex_mask(&[cpu]),
        )?;
        write(
            &trace
                .instance
                .join(format!("per_cpu/cpu{cpu}/buffer_size_kb")),
            &BUFFER_KB.to_string(),
        )?;
        for event in attribution::EVENTS {
            write(&trace.instance.join(format!("events/{event}/enable")), "1")?;
        }
        write(&trace.instance.join("tracing_on"), "1")?;
        Ok(trace)
    }

    /// Stops tracing and reads what was traced, with the number of events the ring lost.
    pub fn finish(&self, loop_tid: u32) -> Result<(Vec<TraceEvent>, u64), String> {
        write(&self.instance.join("tracing_on"), "0")?;
        let cpu_dir = self.instance.join(format!("per_cpu/cpu{}", self.cpu));
        let read = |name: &str| {
            std::fs::read_to_string(cpu_dir.join(name))
                .map_err(|e| format!("cannot read {}: {e}", cpu_dir.join(name).display()))
        };
        let text = read("trace")?;
        let mut events: Vec<TraceEvent> = text
            .lines()
            .filter_map(|l| attribution::parse_line(l, loop_tid))
            .collect();
        events.sort_by_key(|e| e.at_ns);
        let overrun = read("stats")?
            .lines()
            .find_map(|l| l.strip_prefix("overrun: ")?.trim().parse().ok())
            .unwrap_or(0);
        Ok((events, overrun))
    }
}

impl Drop for CpuTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(self.instance.join("tracing_on"), "0");
        for event in attribution::EVENTS {
            let _ = std::fs::write(self.instance.join(format!("events/{event}/enable")), "0");
        }
        if let Err(e) = std::fs::remove_dir(&self.instance) {
            eprintln!(
                "corral-gapmeter: cannot remove the trace instance {}: {e}",
                self.instance.display()
            );
        }
        if self.mounted_here
            && let Err(e) = rustix::mount::unmount(TRACEFS, rustix::mount::UnmountFlags::empty())
        {
            eprintln!("corral-gapmeter: cannot unmount {TRACEFS}: {e}");
        }
    }
}

/// The steal time the guest kernel accounted to `cpu` so far, in nanoseconds (from
/// `/proc/stat`, in clock ticks).
pub fn steal_ns(cpu: usize) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("cpu{cpu}")))?;
    // cpuN user nice system idle iowait irq softirq steal ...
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}
