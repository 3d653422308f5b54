// Rust's std waits through the C library's `syscall(SYS_futex, ...)`: its Mutex, Condvar,
// Barrier, channels, Once and thread parking. Each check needs a thread that waits to leave its
// CPU to the thread that will wake it, so with one kthread a wait that held it would hang.
// Prints one line per check; the output must be the same under corral-run as plain.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

fn check(name: &str, ok: bool) {
    println!("{name:<52} {}", if ok { "ok" } else { "FAILED" });
}

fn main() {
    // Condvar: the waiter sleeps until main, which can run only if the waiter left the CPU,
    // sets the flag.
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let waiter = {
        let pair = pair.clone();
        thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut ready = m.lock().unwrap();
            while !*ready {
                ready = cv.wait(ready).unwrap();
            }
        })
    };
    thread::sleep(Duration::from_millis(20));
    *pair.0.lock().unwrap() = true;
    pair.1.notify_all();
    check("Condvar wait and notify", waiter.join().is_ok());

    // Mutex under contention: every increment counted.
    let counter = Arc::new(Mutex::new(0u64));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let counter = counter.clone();
            thread::spawn(move || {
                for i in 0..20_000 {
                    let mut c = counter.lock().unwrap();
                    if i % 64 == 0 {
                        thread::yield_now();
                    }
                    *c += 1;
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    check("Mutex excludes under contention", *counter.lock().unwrap() == 160_000);

    // Barrier: all arrive before any leaves.
    let barrier = Arc::new(Barrier::new(4));
    let arrived = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (barrier, arrived) = (barrier.clone(), arrived.clone());
            thread::spawn(move || {
                arrived.fetch_add(1, Ordering::SeqCst);
                barrier.wait();
                arrived.load(Ordering::SeqCst) == 4
            })
        })
        .collect();
    let all = threads.into_iter().all(|t| t.join().unwrap());
    check("Barrier holds every thread until all arrive", all);

    // Channels: a consumer blocked in recv while the producer runs.
    let (tx, rx) = mpsc::channel();
    let consumer = thread::spawn(move || rx.iter().take(1000).sum::<u64>());
    for i in 0..1000u64 {
        tx.send(i).unwrap();
        if i % 100 == 0 {
            thread::sleep(Duration::from_millis(1));
        }
    }
    check("mpsc channel delivers every message", consumer.join().unwrap() == 499_500);

    // park and unpark, and park_timeout's timeout.
    let unparked = Arc::new(AtomicBool::new(false));
    let parker = {
        let unparked = unparked.clone();
        thread::spawn(move || {
            while !unparked.load(Ordering::SeqCst) {
                thread::park();
            }
        })
    };
    thread::sleep(Duration::from_millis(20));
    unparked.store(true, Ordering::SeqCst);
    parker.thread().unpark();
    check("park and unpark", parker.join().is_ok());
    let start = Instant::now();
    thread::park_timeout(Duration::from_millis(20));
    check("park_timeout returns after its timeout", start.elapsed() >= Duration::from_millis(20));

    // OnceLock: one initializer runs while the others wait for it.
    static CELL: OnceLock<u64> = OnceLock::new();
    let runs = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let runs = runs.clone();
            thread::spawn(move || {
                *CELL.get_or_init(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(20));
                    42
                })
            })
        })
        .collect();
    let values: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    check(
        "OnceLock initializes once while others wait",
        values.iter().all(|&v| v == 42) && runs.load(Ordering::SeqCst) == 1,
    );

    // A timed Condvar wait times out.
    let (m, cv) = (Mutex::new(()), Condvar::new());
    let start = Instant::now();
    let (_guard, result) = cv
        .wait_timeout(m.lock().unwrap(), Duration::from_millis(20))
        .unwrap();
    check(
        "Condvar wait_timeout times out",
        result.timed_out() && start.elapsed() >= Duration::from_millis(20),
    );
}
