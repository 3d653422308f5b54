//! The concurrency primitives the scheduler and the sync primitives are built on: atomics,
//! interior-mutable cells, a futex word and a kthread's wake word (a futex shared with
//! iokerneld). Normally these are the std/libc ones; under
//! `--cfg loom` they are loom's, so that the protocols built on them (see the `tests/loom.rs`
//! models) run under the model checker unchanged.
//!
//! The futex is modelled with a loom `Mutex` + `Condvar`: the value check and the sleep happen
//! under the mutex, and a wake takes the mutex before notifying, which is exactly the atomicity
//! the kernel gives `FUTEX_WAIT` against `FUTEX_WAKE`. A timed wait may return at any time under
//! loom (as a real one may on timeout or a signal), so every caller re-checks its condition.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

/// What a busy-wait loop does each turn: a CPU pause, or under loom a yield, so that the model
/// checker lets the thread being waited for run.
#[inline]
pub fn spin_wait_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// An `UnsafeCell` with loom's closure-based access, so that loom can check every access to
/// what a lock protects.
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub const fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a pointer for writing. The caller upholds whatever protects the cell.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub use loom::cell::UnsafeCell;

/// A 32-bit futex word: a value that a thread can sleep on until another changes it.
pub struct Futex {
    word: AtomicU32,
    #[cfg(loom)]
    sleep: loom::sync::Mutex<()>,
    #[cfg(loom)]
    wakeup: loom::sync::Condvar,
}

impl Futex {
    #[cfg(not(loom))]
    pub const fn new(value: u32) -> Self {
        Futex {
            word: AtomicU32::new(value),
        }
    }

    #[cfg(loom)]
    pub fn new(value: u32) -> Self {
        Futex {
            word: AtomicU32::new(value),
            sleep: loom::sync::Mutex::new(()),
            wakeup: loom::sync::Condvar::new(),
        }
    }

    #[inline]
    pub fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }

    #[inline]
    pub fn store(&self, value: u32, order: Ordering) {
        self.word.store(value, order)
    }

    /// Adds one to the word (sequentially consistent). Wake sleepers afterwards.
    #[cfg(loom)]
    pub fn fetch_add(&self, n: u32) -> u32 {
        self.word.fetch_add(n, Ordering::SeqCst)
    }

    /// Sleeps while the word reads `expected`, for at most `timeout_ns`. May return early
    /// (a signal, a spurious wake): callers re-check.
    #[cfg(not(loom))]
    pub fn wait(&self, expected: u32, timeout_ns: Option<u64>) {
        let ts = timeout_ns.map(|ns| rustix::thread::futex::Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        });
        // A raw system call, not the C library's `syscall`, which a program may interpose (the
        // `corral-run` shim does, turning futex waits into uthread waits). The timeout is
        // relative. Any return is fine: callers re-check.
        let _ = rustix::thread::futex::wait(
            &self.word,
            rustix::thread::futex::Flags::PRIVATE,
            expected,
            ts.as_ref(),
        );
    }

    #[cfg(loom)]
    pub fn wait(&self, expected: u32, timeout_ns: Option<u64>) {
        let guard = self.sleep.lock().unwrap();
        // A timed wait may time out at any point: model it as returning at once.
        if timeout_ns.is_none() && self.word.load(Ordering::SeqCst) == expected {
            drop(self.wakeup.wait(guard).unwrap());
        }
    }

    /// Wakes one thread sleeping on the word. Change the word first.
    #[cfg(not(loom))]
    pub fn wake_one(&self) {
        // Raw, as in `wait`.
        let _ = rustix::thread::futex::wake(&self.word, rustix::thread::futex::Flags::PRIVATE, 1);
    }

    #[cfg(loom)]
    pub fn wake_one(&self) {
        let _guard = self.sleep.lock().unwrap();
        self.wakeup.notify_one();
    }
}

/// A kthread's wake word (iokerneld mode): a futex in iokerneld's line of the region, shared by
/// both processes. iokerneld (or the runtime itself, to shut down) adds one and wakes it; a
/// parked kthread sleeps while it still reads what it read before looking for a grant.
///
/// A plain futex, not an eventfd: a wake never blocks the waker whatever the runtime does to
/// the word, and iokerneld's helper thread on the granted core can wake it with one syscall.
/// Under loom it is a [`Futex`] model.
pub struct WakeWord {
    #[cfg(not(loom))]
    word: &'static core::sync::atomic::AtomicU32,
    #[cfg(loom)]
    futex: Futex,
}

impl WakeWord {
    /// The word at `word`, in the region shared with iokerneld.
    #[cfg(not(loom))]
    pub fn in_region(word: &'static core::sync::atomic::AtomicU32) -> Self {
        WakeWord { word }
    }

    /// A word of its own, for models.
    #[cfg(loom)]
    pub fn new() -> Self {
        WakeWord {
            futex: Futex::new(0),
        }
    }

    /// The word now.
    #[inline]
    pub fn load(&self) -> u32 {
        #[cfg(not(loom))]
        return self.word.load(Ordering::SeqCst);
        #[cfg(loom)]
        return self.futex.load(Ordering::SeqCst);
    }

    /// Sleeps while the word reads `seen`. May return early (a signal): callers re-check.
    #[cfg(not(loom))]
    pub fn wait(&self, seen: u32) {
        // Not private: iokerneld wakes it from its own mapping. A raw system call, as in
        // `Futex::wait`; any return is fine, callers re-check.
        let _ = rustix::thread::futex::wait(
            self.word,
            rustix::thread::futex::Flags::empty(),
            seen,
            None,
        );
    }

    #[cfg(loom)]
    pub fn wait(&self, seen: u32) {
        self.futex.wait(seen, None);
    }

    /// Adds one and wakes every sleeper: what iokerneld does after a grant, and what the
    /// runtime does to its own kthreads to shut down.
    #[cfg(not(loom))]
    pub fn ring(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        let _ = rustix::thread::futex::wake(
            self.word,
            rustix::thread::futex::Flags::empty(),
            i32::MAX as u32,
        );
    }

    #[cfg(loom)]
    pub fn ring(&self) {
        self.futex.fetch_add(1);
        self.futex.wake_one();
    }
}
