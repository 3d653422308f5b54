//! Failures that end a process, run in a child copy of this test binary: a stack overflow must
//! be reported with the uthread's name, and running out of memory must surface as an error.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::process::Command;

use corral::{Builder, Config, Runtime};

const ROLE: &str = "CORRAL_TEST_CHILD";

fn run_child(role: &str, test_name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .output()
        .expect("child runs")
}

fn is_child(role: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|r| r == role)
}

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let pad = std::hint::black_box([depth; 64]);
    if depth == u64::MAX {
        0
    } else {
        recurse(depth + 1) + pad[3]
    }
}

#[test]
fn stack_overflow_is_reported_with_the_uthread_name() {
    if is_child("overflow") {
        let rt = Runtime::new(Config::default().kthreads(1)).unwrap();
        rt.block_on(|| {
            Builder::new()
                .name("deep-diver")
                .stack_size(64 * 1024)
                .spawn(|| recurse(0))
                .unwrap()
                .join()
                .ok();
        });
        unreachable!("the overflow must have ended the process");
    }
    let out = run_child(
        "overflow",
        "stack_overflow_is_reported_with_the_uthread_name",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "stderr: {stderr}");
    assert!(
        stderr.contains("uthread 'deep-diver'")
            && stderr.contains("overflowed its stack of 65536 bytes"),
        "stderr: {stderr}"
    );
}

#[test]
fn os_thread_segfaults_still_reach_the_default_handler() {
    if is_child("segv") {
        let _rt = Runtime::new(Config::default().kthreads(1)).unwrap();
        // SAFETY: deliberately faulting in this child process.
        unsafe { std::ptr::write_volatile(std::ptr::dangling_mut::<u64>(), 1) };
        unreachable!();
    }
    let out = run_child(
        "segv",
        "os_thread_segfaults_still_reach_the_default_handler",
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("overflowed"));
}

#[test]
fn spawn_reports_memory_exhaustion_as_an_error() {
    if is_child("oom") {
        // Cap the address space a little above what we use now, then ask for big stacks.
        let vm = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("VmSize:")
                    .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap())
            })
            .unwrap();
        let rt = Runtime::new(Config::default().kthreads(1)).unwrap();
        let limit = (vm + 512 * 1024) * 1024;
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: lowering our own limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let outcome = rt.block_on(|| {
            let gate = std::sync::Arc::new(corral::WaitGroup::new());
            gate.add(1);
            let mut held = Vec::new();
            for i in 0..10_000 {
                let g = gate.clone();
                match Builder::new().stack_size(16 << 20).spawn(move || g.wait()) {
                    Ok(h) => held.push(h),
                    Err(e) => {
                        gate.done();
                        for h in held {
                            h.join().unwrap();
                        }
                        return format!("spawned {i}, then: {e}");
                    }
                }
            }
            gate.done();
            "never ran out".to_string()
        });
        println!("OUTCOME: {outcome}");
        return;
    }
    let out = run_child("oom", "spawn_reports_memory_exhaustion_as_an_error");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("OUTCOME: spawned"), "stdout: {stdout}");
    assert!(
        stdout.contains("cannot map a 16777216-byte uthread stack"),
        "stdout: {stdout}"
    );
}
