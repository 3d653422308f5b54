//! Uthreads from C: spawning, joining and detaching them, and what a uthread asks about or of
//! itself (yield, sleep, its id, its kernel thread).

use core::ffi::{c_int, c_void};
use std::alloc::{self, Layout};
use std::time::Duration;

use corral::{Builder, JoinHandle};

use super::error::{PANICKED, errno_of, ffi_guard};
use super::memory::{SendPtr, free_boxed, try_alloc};

/// Opaque; see `corral_thread_t`.
pub struct CorralThread {
    handle: JoinHandle<SendPtr>,
}

/// A joinable uthread, from `corral_spawn`. Released by `corral_join` or `corral_detach`.
pub type ThreadT = CorralThread;

/// Spawns on the calling uthread's runtime; only uthreads can, since a plain OS thread has no
/// runtime to spawn onto.
fn spawn_here<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, c_int> {
    if corral::kthread_index().is_none() {
        return Err(-libc::EPERM);
    }
    Builder::new().spawn(f).map_err(|e| -errno_of(&e))
}

/// Spawns a uthread running `fn(arg)` on the caller's runtime and stores a handle to it in
/// `*out` (only on success). The handle must be passed to `corral_join` or `corral_detach`
/// exactly once.
///
/// Returns 0, or `-EINVAL` (`out` or `fn` is NULL), `-EPERM` (the caller is not a uthread),
/// `-ENOMEM` (no memory for the stack), another negative errno value from the OS, or
/// `-ENOTRECOVERABLE` (internal error).
///
/// # Safety
/// `out` is NULL or writable; `fn` may be called with `arg` on another OS thread and must not
/// unwind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_spawn(
    out: *mut *mut ThreadT,
    r#fn: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(f) = r#fn else { return -libc::EINVAL };
        if out.is_null() {
            return -libc::EINVAL;
        }
        // Allocated before spawning: once the uthread exists it cannot be taken back, and a
        // failed call must not leave it running with the caller's `arg`.
        let slot = try_alloc::<CorralThread>();
        if slot.is_null() {
            return -libc::ENOMEM;
        }
        let arg = SendPtr(arg);
        // SAFETY: the caller promised f accepts arg on any thread and never unwinds.
        let run = move || SendPtr(unsafe { f(arg.get()) });
        match spawn_here(run) {
            Ok(handle) => {
                // SAFETY: slot is fresh memory for a CorralThread; out is non-null and
                // writable per the contract.
                unsafe {
                    slot.write(CorralThread { handle });
                    out.write(slot);
                }
                0
            }
            Err(code) => {
                // SAFETY: allocated by try_alloc with this layout and never initialized.
                unsafe { alloc::dealloc(slot.cast(), Layout::new::<CorralThread>()) };
                code
            }
        }
    })
}

/// Spawns a uthread running `fn(arg)` that nobody joins; its resources are freed when it
/// returns. Returns as `corral_spawn` does.
///
/// # Safety
/// `fn` may be called with `arg` on another OS thread and must not unwind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_spawn_detached(
    r#fn: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(f) = r#fn else { return -libc::EINVAL };
        let arg = SendPtr(arg);
        // SAFETY: the caller promised f accepts arg on any thread and never unwinds.
        let run = move || unsafe { f(arg.get()) };
        match spawn_here(run) {
            Ok(handle) => {
                drop(handle);
                0
            }
            Err(code) => code,
        }
    })
}

/// Waits for the uthread of `thread` to return, stores its return value in `*retval` unless
/// `retval` is NULL, and frees the handle. May be called from any thread, uthread or not.
///
/// Returns 0, `-EINVAL` (`thread` is NULL) or `-ENOTRECOVERABLE` (internal error; the handle
/// is freed all the same).
///
/// # Safety
/// `thread` is NULL or a handle from `corral_spawn` not yet joined or detached; `retval` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_join(thread: *mut ThreadT, retval: *mut *mut c_void) -> c_int {
    ffi_guard(PANICKED, || {
        if thread.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live handle from corral_spawn (via try_box), consumed here exactly once.
        let t = unsafe { Box::from_raw(thread) };
        match t.handle.join() {
            Ok(value) => {
                if !retval.is_null() {
                    // SAFETY: non-null and writable per the contract.
                    unsafe { retval.write(value.get()) };
                }
                0
            }
            Err(_) => PANICKED,
        }
    })
}

/// Frees `thread` without waiting; the uthread keeps running and its resources are freed when
/// it returns. Returns 0, or `-EINVAL` if `thread` is NULL.
///
/// # Safety
/// `thread` is NULL or a handle from `corral_spawn` not yet joined or detached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_detach(thread: *mut ThreadT) -> c_int {
    ffi_guard(PANICKED, || {
        if thread.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live handle from corral_spawn, consumed here exactly once.
        unsafe { free_boxed(thread) };
        0
    })
}

/// Lets other uthreads run. Outside a runtime, yields the OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_yield() {
    ffi_guard((), corral::yield_now);
}

/// Blocks the calling uthread for at least `us` microseconds, letting others run meanwhile.
/// Outside a runtime, sleeps the OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_sleep_us(us: u64) {
    ffi_guard((), || corral::sleep(Duration::from_micros(us)));
}

/// The calling uthread's id: nonzero, and never reused within the process. 0 if the caller is
/// not a uthread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_thread_id() -> u64 {
    ffi_guard(0, || corral::current_id().map_or(0, |id| id.as_u64()))
}

/// Index of the kernel thread the caller runs on at this moment (it can change at any blocking
/// call or yield), or -1 if the caller is not on one of a runtime's kernel threads.
#[unsafe(no_mangle)]
pub extern "C" fn corral_kthread_index() -> c_int {
    ffi_guard(-1, || {
        corral::kthread_index().map_or(-1, |i| c_int::try_from(i).unwrap_or(c_int::MAX))
    })
}

#[cfg(test)]
mod tests {
    use core::ptr;

    use super::*;

    #[test]
    fn spawn_needs_a_runtime() {
        unsafe extern "C" fn noop(_: *mut c_void) {}
        // SAFETY: noop never dereferences its argument and cannot unwind.
        let rc = unsafe { corral_spawn_detached(Some(noop), ptr::null_mut()) };
        assert_eq!(rc, -libc::EPERM);
        assert_eq!(corral_thread_id(), 0);
        assert_eq!(corral_kthread_index(), -1);
    }
}
