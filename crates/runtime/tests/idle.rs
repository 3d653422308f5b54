//! An idle runtime parks its kthreads and uses (almost) no CPU.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::time::Duration;

use corral::{Config, Runtime};

fn cpu_time() -> Duration {
    // SAFETY: rusage is plain data that getrusage fills in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn idle_runtime_uses_under_five_percent_of_a_core() {
    let rt = Runtime::new(Config::default().kthreads(2)).unwrap();
    // Some work first, so the kthreads have run, cached stacks, and then gone idle.
    let n = rt.block_on(|| {
        (0..1000)
            .map(|i| corral::spawn(move || i))
            .map(|h| h.join().unwrap())
            .sum::<u64>()
    });
    assert_eq!(n, 499_500);
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time() - before;
    assert!(
        used < Duration::from_millis(50),
        "idle runtime used {used:?} of CPU in 1 s"
    );
}
