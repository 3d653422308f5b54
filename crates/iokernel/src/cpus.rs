//! CPU lists and the machine's CPU topology, read from sysfs.
//!
//! The sysfs root is a parameter so that tests can lay out a fake tree (with or without
//! hyperthreads) in a temporary directory.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use corral_policy::{CoreId, Topology};

/// Where Linux describes its CPUs.
pub const SYSFS_CPU_ROOT: &str = "/sys/devices/system/cpu";

/// Highest CPU number accepted anywhere (the kernel's own `NR_CPUS` ceiling).
pub const MAX_CPU: usize = 8191;

/// Parses a kernel-style CPU list such as `0-3,5,7-8`. Whitespace around items is ignored and an
/// empty list is allowed (sysfs writes an empty line for "none").
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for item in text.trim().split(',') {
        let item = item.trim();
        if item.is_empty() {
            if text.trim().is_empty() {
                continue;
            }
            return Err("empty item in CPU list".into());
        }
        let number = |s: &str| -> Result<usize, String> {
            let n: usize = s
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a CPU number"))?;
            if n > MAX_CPU {
                return Err(format!("CPU {n} is above the limit of {MAX_CPU}"));
            }
            Ok(n)
        };
        match item.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    return Err(format!("range {item} runs backwards"));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(number(item)?),
        }
    }
    Ok(cpus)
}

/// Formats CPUs as a compact kernel-style list (`1-3,5`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Why the topology could not be read.
#[derive(Debug)]
pub struct SysfsError {
    pub path: PathBuf,
    pub problem: String,
}

impl fmt::Display for SysfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for SysfsError {}

/// A sysfs CPU directory (normally [`SYSFS_CPU_ROOT`]).
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn read_list(&self, path: PathBuf) -> Result<Vec<usize>, SysfsError> {
        let text = std::fs::read_to_string(&path).map_err(|e| SysfsError {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        parse_cpu_list(&text).map_err(|problem| SysfsError { path, problem })
    }

    /// CPUs currently online.
    pub fn online(&self) -> Result<Vec<usize>, SysfsError> {
        self.read_list(self.root.join("online"))
    }

    /// Whether the kernel knows a CPU with this number (online or not).
    pub fn exists(&self, cpu: usize) -> bool {
        self.root.join(format!("cpu{cpu}")).is_dir()
    }

    /// The CPUs sharing `cpu`'s physical core, `cpu` included.
    pub fn thread_siblings(&self, cpu: usize) -> Result<Vec<usize>, SysfsError> {
        self.read_list(
            self.root
                .join(format!("cpu{cpu}"))
                .join("topology")
                .join("thread_siblings_list"),
        )
    }

    /// The allocator's topology over `managed` (allocator core `i` is CPU `managed[i]`). A
    /// hyperthread sibling counts only if it is managed too; a core with more than one managed
    /// sibling (SMT wider than 2) is treated as having none, since the allocator pairs cores.
    pub fn topology(&self, managed: &[usize]) -> Result<Topology, SysfsError> {
        let mut siblings = Vec::with_capacity(managed.len());
        for &cpu in managed {
            let others: Vec<usize> = self
                .thread_siblings(cpu)?
                .into_iter()
                .filter(|&other| other != cpu)
                .filter_map(|other| managed.iter().position(|&m| m == other))
                .collect();
            siblings.push(match others.as_slice() {
                [index] => Some(CoreId(*index as u16)),
                _ => None,
            });
        }
        Topology::from_siblings(siblings).map_err(|e| SysfsError {
            path: self.root.clone(),
            problem: format!("inconsistent thread_siblings_list files: {e}"),
        })
    }
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new(SYSFS_CPU_ROOT)
    }
}

/// Whether `err` means "no such process or thread".
pub fn is_gone(err: &io::Error) -> bool {
    err.raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lays out `root/online` and one `cpuN/topology/thread_siblings_list` per CPU.
    fn fake_tree(root: &Path, online: &str, siblings: &[&str]) {
        std::fs::write(root.join("online"), format!("{online}\n")).unwrap();
        for (cpu, list) in siblings.iter().enumerate() {
            let dir = root.join(format!("cpu{cpu}")).join("topology");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("thread_siblings_list"), format!("{list}\n")).unwrap();
        }
    }

    #[test]
    fn cpu_lists_parse_and_format() {
        assert_eq!(parse_cpu_list("0-3,5\n").unwrap(), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_cpu_list(" 7 ").unwrap(), vec![7]);
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<usize>::new());
        assert!(parse_cpu_list("3-1").unwrap_err().contains("backwards"));
        assert!(parse_cpu_list("1,,2").is_err());
        assert!(parse_cpu_list("x").unwrap_err().contains("\"x\""));
        assert!(parse_cpu_list("99999").is_err());
        assert_eq!(format_cpu_list(&[5, 1, 2, 3, 9]), "1-3,5,9");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn topology_without_hyperthreads() {
        let dir = tempfile::tempdir().unwrap();
        fake_tree(dir.path(), "0-3", &["0", "1", "2", "3"]);
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(sysfs.online().unwrap(), vec![0, 1, 2, 3]);
        assert!(sysfs.exists(3));
        assert!(!sysfs.exists(4));
        let topology = sysfs.topology(&[1, 2, 3]).unwrap();
        assert_eq!(topology.core_count(), 3);
        assert!(topology.cores().all(|c| topology.sibling(c).is_none()));
    }

    #[test]
    fn topology_with_hyperthreads_counts_only_managed_siblings() {
        let dir = tempfile::tempdir().unwrap();
        // Two physical cores, numbered the way Linux usually does: CPU n and n+2 are siblings.
        fake_tree(dir.path(), "0-3", &["0,2", "1,3", "0,2", "1,3"]);
        let sysfs = Sysfs::new(dir.path());
        // Managed: 1, 2, 3. CPU 1 and 3 pair up; CPU 2's sibling (0) is iokerneld's, not managed.
        let topology = sysfs.topology(&[1, 2, 3]).unwrap();
        assert_eq!(topology.sibling(CoreId(0)), Some(CoreId(2)));
        assert_eq!(topology.sibling(CoreId(2)), Some(CoreId(0)));
        assert_eq!(topology.sibling(CoreId(1)), None);
        // Range syntax in the sibling file.
        let dir = tempfile::tempdir().unwrap();
        fake_tree(dir.path(), "0-3", &["0-1", "0-1", "2-3", "2-3"]);
        let topology = Sysfs::new(dir.path()).topology(&[0, 1, 2, 3]).unwrap();
        assert_eq!(topology.sibling(CoreId(0)), Some(CoreId(1)));
        assert_eq!(topology.sibling(CoreId(3)), Some(CoreId(2)));
    }

    #[test]
    fn topology_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        fake_tree(dir.path(), "0-1", &["0", "1"]);
        let err = Sysfs::new(dir.path()).topology(&[1, 2]).unwrap_err();
        assert!(
            err.to_string()
                .contains("cpu2/topology/thread_siblings_list"),
            "{err}"
        );
        // Siblings that do not name each other back.
        let dir = tempfile::tempdir().unwrap();
        fake_tree(dir.path(), "0-2", &["0,1", "1,2", "2"]);
        let err = Sysfs::new(dir.path()).topology(&[0, 1, 2]).unwrap_err();
        assert!(err.to_string().contains("inconsistent"), "{err}");
    }
}
