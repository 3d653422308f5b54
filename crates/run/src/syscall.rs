//! `syscall(2)`: futex operations on process-private words become [`corral::futex`] waits and
//! wakes, so that code that waits through `syscall(SYS_futex, ...)` (Rust's std, and C code
//! that rolls its own locks) gives its kthread back instead of blocking it in the kernel, and
//! its wakes reach waiters of either kind. Shared futexes (another process may wait on the
//! word), priority-inheritance futexes and every other system call go to the C library.
//!
//! `REQUEUE` and `CMP_REQUEUE` wake the waiters they would move instead of moving them: a futex
//! waiter re-checks its word whenever it returns, so an early wake costs a look, never a lost
//! wake. A bad address that is neither null nor misaligned faults here where the kernel would
//! return `EFAULT`.

use core::ffi::c_long;
use core::sync::atomic::{AtomicU32, Ordering};

use corral::futex::{self as rt, MATCH_ANY, WakeOp};

use crate::real::real;

/// The C library's variadic `syscall`.
type Syscall = unsafe extern "C" fn(c_long, ...) -> c_long;

/// Looks the C library's `syscall` up now, so that a later first call (possibly from a signal
/// handler, which must not enter the dynamic linker) finds it cached.
pub fn resolve() {
    let _ = real!(syscall: Syscall);
}

/// The number and six arguments, as x86-64 passes them to a variadic function: in registers,
/// the sixth on the stack. A caller that passed fewer leaves the rest unspecified, which only
/// the system calls that ignore them receive.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    if number == libc::SYS_futex {
        let call = FutexCall {
            addr: a1 as usize,
            op: a2 as i32,
            val: a3 as u32,
            timeout_or_val2: a4 as usize,
            addr2: a5 as usize,
            val3: a6 as u32,
        };
        // SAFETY: the caller's futex arguments, read as the kernel would read them.
        if let Some(result) = unsafe { call.run() } {
            return match result {
                Ok(v) => v,
                Err(errno) => {
                    // SAFETY: the calling thread's errno (its own on a uthread with its TLS).
                    unsafe { *libc::__errno_location() = errno };
                    -1
                }
            };
        }
    }
    let f = real!(syscall: Syscall);
    // SAFETY: forwarded as received.
    unsafe { f(number, a1, a2, a3, a4, a5, a6) }
}

struct FutexCall {
    addr: usize,
    op: i32,
    val: u32,
    timeout_or_val2: usize,
    addr2: usize,
    val3: u32,
}

impl FutexCall {
    /// The result, or `None` for an operation left to the kernel.
    ///
    /// # Safety
    /// The addresses and the timeout pointer are the caller's, as for the system call.
    unsafe fn run(&self) -> Option<Result<c_long, i32>> {
        if self.op & libc::FUTEX_PRIVATE_FLAG == 0 {
            return None;
        }
        let realtime = self.op & libc::FUTEX_CLOCK_REALTIME != 0;
        let operation = self.op & !(libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME);
        // SAFETY: per the contract, for whichever operation runs.
        let result = unsafe {
            match operation {
                libc::FUTEX_WAIT => self.wait(MATCH_ANY, Timeout::Relative),
                libc::FUTEX_WAIT_BITSET => self.wait(self.val3, Timeout::Absolute { realtime }),
                libc::FUTEX_WAKE => self.wake(MATCH_ANY),
                libc::FUTEX_WAKE_BITSET => self.wake(self.val3),
                libc::FUTEX_REQUEUE => self.requeue(None),
                libc::FUTEX_CMP_REQUEUE => self.requeue(Some(self.val3)),
                libc::FUTEX_WAKE_OP => self.wake_op(),
                _ => return None,
            }
        };
        Some(result)
    }

    /// # Safety
    /// `addr`, if not null and aligned, is a live u32 the caller lets every thread touch.
    unsafe fn word(addr: usize) -> Result<&'static AtomicU32, i32> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        if !addr.is_multiple_of(4) {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the contract; AtomicU32 has u32's layout.
        Ok(unsafe { &*(addr as *const AtomicU32) })
    }

    /// # Safety
    /// As for [`FutexCall::run`].
    unsafe fn wait(&self, bitset: u32, timeout: Timeout) -> Result<c_long, i32> {
        // SAFETY: per the contract.
        let word = unsafe { Self::word(self.addr)? };
        if bitset == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the contract.
        let deadline = unsafe { timeout.deadline(self.timeout_or_val2)? };
        match rt::wait(word, self.val, bitset, deadline) {
            Ok(()) => Ok(0),
            Err(rt::NotWoken::Changed) => Err(libc::EAGAIN),
            Err(rt::NotWoken::TimedOut) => Err(libc::ETIMEDOUT),
            Err(rt::NotWoken::Interrupted) => Err(libc::EINTR),
            Err(rt::NotWoken::Refused(errno)) => Err(errno),
        }
    }

    /// How many to wake, as the kernel reads its count: at least one.
    fn count(n: u32) -> usize {
        (n as i32).max(1) as usize
    }

    /// # Safety
    /// As for [`FutexCall::run`].
    unsafe fn wake(&self, bitset: u32) -> Result<c_long, i32> {
        // SAFETY: per the contract.
        let word = unsafe { Self::word(self.addr)? };
        if bitset == 0 {
            return Err(libc::EINVAL);
        }
        Ok(rt::wake(word, Self::count(self.val), bitset) as c_long)
    }

    /// # Safety
    /// As for [`FutexCall::run`].
    unsafe fn requeue(&self, compare: Option<u32>) -> Result<c_long, i32> {
        // SAFETY: per the contract.
        let (word, _) = unsafe { (Self::word(self.addr)?, Self::word(self.addr2)?) };
        let moved = self.timeout_or_val2 as i32;
        if moved < 0 || self.addr == self.addr2 {
            return Err(libc::EINVAL);
        }
        if compare.is_some_and(|v| word.load(Ordering::SeqCst) != v) {
            return Err(libc::EAGAIN);
        }
        let n = (self.val as i32).max(0) as usize + moved as usize;
        Ok(rt::wake(word, n, MATCH_ANY) as c_long)
    }

    /// # Safety
    /// As for [`FutexCall::run`].
    unsafe fn wake_op(&self) -> Result<c_long, i32> {
        // SAFETY: per the contract.
        let (word, word2) = unsafe { (Self::word(self.addr)?, Self::word(self.addr2)?) };
        let op = WakeOp::decode(self.val3).ok_or(libc::ENOSYS)?;
        let old = op.apply(word2);
        let mut woken = rt::wake(word, Self::count(self.val), MATCH_ANY);
        if op.holds(old) {
            let n = Self::count(self.timeout_or_val2 as u32);
            woken += rt::wake(word2, n, MATCH_ANY);
        }
        Ok(woken as c_long)
    }
}

/// How a wait's timeout argument reads.
#[derive(Clone, Copy)]
enum Timeout {
    /// `FUTEX_WAIT`: a duration from now.
    Relative,
    /// `FUTEX_WAIT_BITSET`: a time on CLOCK_MONOTONIC, or CLOCK_REALTIME.
    Absolute { realtime: bool },
}

impl Timeout {
    /// The deadline in nanoseconds on CLOCK_MONOTONIC, or `None` for a null pointer.
    ///
    /// # Safety
    /// `ptr` is null or points to a readable timespec.
    unsafe fn deadline(self, ptr: usize) -> Result<Option<u64>, i32> {
        if ptr == 0 {
            return Ok(None);
        }
        // SAFETY: per the contract.
        let ts = unsafe { (ptr as *const libc::timespec).read_unaligned() };
        if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
            return Err(libc::EINVAL);
        }
        let ns = (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64);
        let now = corral::now_ns();
        Ok(Some(match self {
            Timeout::Relative => now.saturating_add(ns),
            Timeout::Absolute { realtime: false } => ns,
            Timeout::Absolute { realtime: true } => {
                now.saturating_add(ns.saturating_sub(clock_ns(libc::CLOCK_REALTIME)))
            }
        }))
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
