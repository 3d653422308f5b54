//! Pinning threads to CPUs, and reading which CPUs this process may use.
//!
//! The runtime pins its kthreads, iokerneld pins itself and moves runtimes' kthreads between
//! cores, and the load generators and apps pin their threads; all of them go through here, so
//! a CPU out of range or outside the allowed set fails the same way everywhere: with an error
//! naming the CPU, never silently.

use std::io;

use rustix::process::Pid;
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    set_thread_affinity(0, &[cpu])
}

/// Restricts thread `tid` (0: the calling thread) to `cpus`, which must not be empty.
pub fn set_thread_affinity(tid: i32, cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(invalid("an empty CPU list".into()));
    }
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if cpu >= CpuSet::MAX_CPU {
            return Err(invalid(format!(
                "invalid cpu = {cpu}: out of range (at most {})",
                CpuSet::MAX_CPU - 1
            )));
        }
        set.set(cpu);
    }
    sched_setaffinity(target(tid)?, &set).map_err(|e| {
        let list = cpus.iter().map(usize::to_string).collect::<Vec<_>>();
        io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "invalid cpu = {}: cannot pin thread {tid} there: {e}",
                list.join(",")
            ),
        )
    })
}

/// The CPUs the calling thread may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect())
}

fn target(tid: i32) -> io::Result<Option<Pid>> {
    match tid {
        0 => Ok(None),
        _ => Pid::from_raw(tid)
            .map(Some)
            .ok_or_else(|| invalid(format!("invalid thread id {tid}"))),
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_new_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn pinning_restricts_the_thread_to_that_cpu() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let cpu = *allowed.last().unwrap();
        let seen = on_new_thread(move || {
            pin_current_thread(cpu).unwrap();
            allowed_cpus().unwrap()
        });
        assert_eq!(seen, vec![cpu]);
    }

    #[test]
    fn out_of_range_cpu_is_named() {
        let err = on_new_thread(|| pin_current_thread(1 << 20).unwrap_err());
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("invalid cpu = 1048576"), "{err}");
    }

    #[test]
    fn empty_list_and_bad_tid_are_refused() {
        assert!(set_thread_affinity(0, &[]).is_err());
        let err = set_thread_affinity(-5, &[0]).unwrap_err();
        assert!(err.to_string().contains("-5"), "{err}");
    }

    #[test]
    fn a_cpu_outside_the_machine_is_an_os_error_naming_it() {
        let cpu = CpuSet::MAX_CPU - 1;
        if allowed_cpus().unwrap().contains(&cpu) {
            return;
        }
        let err = on_new_thread(move || pin_current_thread(cpu).unwrap_err());
        assert!(
            err.to_string().contains(&format!("invalid cpu = {cpu}")),
            "{err}"
        );
    }
}
