//! The concurrency primitives the scheduler and the sync primitives are built on: atomics,
//! interior-mutable cells, a futex word and an event counter (a kthread's eventfd). Normally
//! these are the std/libc ones; under
//! `--cfg loom` they are loom's, so that the protocols built on them (see the `tests/loom.rs`
//! models) run under the model checker unchanged.
//!
//! The futex is modelled with a loom `Mutex` + `Condvar`: the value check and the sleep happen
//! under the mutex, and a wake takes the mutex before notifying, which is exactly the atomicity
//! the kernel gives `FUTEX_WAIT` against `FUTEX_WAKE`. A timed wait may return at any time under
//! loom (as a real one may on timeout or a signal), so every caller re-checks its condition.
//!
//! The event counter is an eventfd normally (iokerneld, another process, writes it, so it must
//! be a real descriptor), and under loom a `Mutex<u64>` + `Condvar` with the same semantics: a
//! signal adds one, a read takes the whole count, and a wait sleeps while the count is zero.

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

    /// Sleeps while the word reads `expected`, for at most `timeout_ns`. May return early
    /// (a signal, a spurious wake): callers re-check.
    #[cfg(not(loom))]
    pub fn wait(&self, expected: u32, timeout_ns: Option<u64>) {
        let ts = timeout_ns.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the word is a live, aligned u32 for the whole call; the timeout, when given,
        // points to a timespec on our stack that outlives the call (it is relative).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                ts_ptr,
            )
        };
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
        // SAFETY: FUTEX_WAKE only uses the address as a key; it reads and writes no memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            )
        };
    }

    #[cfg(loom)]
    pub fn wake_one(&self) {
        let _guard = self.sleep.lock().unwrap();
        self.wakeup.notify_one();
    }
}

/// A counter that one side signals and the other consumes, sleeping while it is zero: a
/// kthread's eventfd, which iokerneld (or the runtime itself, at shutdown) writes to wake it.
pub struct EventCount {
    #[cfg(not(loom))]
    fd: std::os::fd::OwnedFd,
    #[cfg(loom)]
    count: loom::sync::Mutex<u64>,
    #[cfg(loom)]
    nonzero: loom::sync::Condvar,
}

impl EventCount {
    /// A zero counter: a nonblocking eventfd from corral-abi's transport, the kind iokerneld
    /// accepts at registration.
    #[cfg(not(loom))]
    pub fn new() -> std::io::Result<Self> {
        Ok(EventCount {
            fd: corral_abi::transport::eventfd::create()?,
        })
    }

    #[cfg(loom)]
    pub fn new() -> std::io::Result<Self> {
        Ok(EventCount {
            count: loom::sync::Mutex::new(0),
            nonzero: loom::sync::Condvar::new(),
        })
    }

    /// The eventfd, to pass to iokerneld.
    #[cfg(not(loom))]
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }

    /// Adds one. Never blocks: a full counter already means "wake up".
    #[cfg(not(loom))]
    pub fn signal(&self) -> std::io::Result<()> {
        corral_abi::transport::eventfd::signal(self.as_fd())
    }

    #[cfg(loom)]
    pub fn signal(&self) -> std::io::Result<()> {
        let mut count = self.count.lock().unwrap();
        *count = count.saturating_add(1);
        self.nonzero.notify_one();
        Ok(())
    }

    /// Takes the whole count if it is nonzero, without blocking: whether it was. A read that
    /// fails counts as nothing taken; the caller sleeps and tries again.
    #[cfg(not(loom))]
    pub fn try_consume(&self) -> bool {
        corral_abi::transport::eventfd::try_consume(self.as_fd()).unwrap_or(false)
    }

    #[cfg(loom)]
    pub fn try_consume(&self) -> bool {
        core::mem::take(&mut *self.count.lock().unwrap()) != 0
    }

    /// Sleeps until the count is nonzero, then takes it.
    ///
    /// The eventfd is nonblocking (corral-abi's transport creates it so, and iokerneld insists,
    /// so that no runtime can ever block its write): sleep in `poll`, then read. A signal (a
    /// stale preemption) only sends the loop round again.
    #[cfg(not(loom))]
    pub fn wait(&self) {
        while !self.try_consume() {
            let _ = corral_abi::transport::eventfd::wait_readable(self.as_fd(), None);
        }
    }

    #[cfg(loom)]
    pub fn wait(&self) {
        let mut count = self.count.lock().unwrap();
        while *count == 0 {
            count = self.nonzero.wait(count).unwrap();
        }
        *count = 0;
    }
}
