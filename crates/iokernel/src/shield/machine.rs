//! The machine half of shielding: reads and writes the files in /proc, /sys and debugfs and
//! the threads' affinities that [`super::plan`] decides about.

use std::io;
use std::path::{Path, PathBuf};

use rustix::process::Pid;
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

use super::plan::{ThreadStat, parse_hex_mask, parse_stat};
use crate::cpus::{format_cpu_list, parse_cpu_list};

pub const RT_RUNTIME: &str = "/proc/sys/kernel/sched_rt_runtime_us";
pub const WORKQUEUE_MASK: &str = "/sys/devices/virtual/workqueue/cpumask";
pub const IRQ_ROOT: &str = "/proc/irq";
pub const IRQ_DEFAULT: &str = "/proc/irq/default_smp_affinity";
pub const DEBUGFS: &str = "/sys/kernel/debug";

pub fn read_trimmed(path: impl AsRef<Path>) -> io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_owned())
}

/// Writes `text` in one write, as the kernel's files want.
pub fn write_value(path: impl AsRef<Path>, text: &str) -> io::Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

fn invalid_data(problem: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, problem)
}

pub fn read_hex_mask(path: &str) -> io::Result<Vec<usize>> {
    parse_hex_mask(&read_trimmed(path)?).map_err(invalid_data)
}

pub fn read_cpu_list(path: impl AsRef<Path>) -> io::Result<Vec<usize>> {
    parse_cpu_list(&read_trimmed(path)?).map_err(invalid_data)
}

pub fn write_cpu_list(path: impl AsRef<Path>, cpus: &[usize]) -> io::Result<()> {
    write_value(path, &format_cpu_list(cpus))
}

/// Numeric entries of a /proc directory.
fn numbered(dir: &Path) -> io::Result<Vec<u32>> {
    let mut numbers: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

pub fn processes() -> io::Result<Vec<u32>> {
    numbered(Path::new("/proc"))
}

/// The threads of `pid`; none if it is gone.
pub fn threads(pid: u32) -> Vec<u32> {
    numbered(&PathBuf::from(format!("/proc/{pid}/task"))).unwrap_or_default()
}

pub fn process_stat(pid: u32) -> io::Result<ThreadStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?).map_err(invalid_data)
}

pub fn thread_stat(pid: u32, tid: u32) -> io::Result<ThreadStat> {
    parse_stat(&std::fs::read_to_string(format!(
        "/proc/{pid}/task/{tid}/stat"
    ))?)
    .map_err(invalid_data)
}

fn pid(tid: u32) -> io::Result<Pid> {
    i32::try_from(tid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

pub fn affinity(tid: u32) -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(Some(pid(tid)?))?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

pub fn set_affinity(tid: u32, cpus: &[usize]) -> io::Result<()> {
    let mut set = CpuSet::new();
    for &cpu in cpus.iter().filter(|&&c| c < CpuSet::MAX_CPU) {
        set.set(cpu);
    }
    Ok(sched_setaffinity(Some(pid(tid)?), &set)?)
}

/// Clock ticks since boot, in the unit of `/proc/TID/stat`'s start time.
pub fn ticks_since_boot() -> io::Result<u64> {
    let uptime = read_trimmed("/proc/uptime")?;
    let seconds: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid_data(format!("/proc/uptime reads {uptime:?}")))?;
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    // A tick early, so that a thread started in the same tick counts as born into the shield.
    Ok(((seconds * hz) as u64).saturating_sub(1))
}

/// IRQ numbers with an affinity file.
pub fn irqs() -> io::Result<Vec<u32>> {
    numbered(Path::new(IRQ_ROOT))
}

pub fn irq_affinity_path(irq: u32) -> PathBuf {
    PathBuf::from(format!("{IRQ_ROOT}/{irq}/smp_affinity_list"))
}

/// Whether a debugfs is mounted at `path`.
pub fn debugfs_mounted(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|mounts| {
        mounts.lines().any(|line| {
            let mut fields = line.split(' ');
            let (_, point, kind) = (fields.next(), fields.next(), fields.next());
            point == Some(path) && kind == Some("debugfs")
        })
    })
}

pub fn mount_debugfs(path: &str) -> io::Result<()> {
    Ok(rustix::mount::mount(
        "debugfs",
        path,
        "debugfs",
        rustix::mount::MountFlags::empty(),
        None,
    )?)
}

pub fn unmount(path: &str) -> io::Result<()> {
    Ok(rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::empty(),
    )?)
}

pub fn fair_server_file(debugfs: &str, cpu: usize, name: &str) -> PathBuf {
    PathBuf::from(format!("{debugfs}/sched/fair_server/cpu{cpu}/{name}"))
}

pub fn read_number(path: impl AsRef<Path>) -> io::Result<u64> {
    let path = path.as_ref();
    let text = read_trimmed(path)?;
    text.parse()
        .map_err(|_| invalid_data(format!("{} reads {text:?}", path.display())))
}
