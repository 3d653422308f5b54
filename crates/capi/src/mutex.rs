//! `corral_mutex_t`: the runtime's mutex behind lock and unlock calls, checking who holds it.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use corral::{Mutex, MutexGuard};

use super::error::{PANICKED, ffi_guard};
use super::memory::{free_boxed, obj, try_box};

/// Opaque; see `corral_mutex_t`.
pub struct CorralMutex {
    lock: Mutex<()>,
    /// Token of the holder (see `caller_token`), 0 when unlocked. Written only by the holder,
    /// so a thread that reads its own token knows it holds the lock (Relaxed suffices: it can
    /// only be reading its own latest write).
    owner: AtomicU64,
    /// The holder's guard. The Rust API unlocks by dropping a guard, and C needs lock and unlock
    /// as separate calls, so the guard is parked here between them. Only the holder touches it.
    /// `'static` is sound because `corral_mutex_free` refuses a locked mutex, so the guard is
    /// always dropped before the mutex it borrows.
    guard: UnsafeCell<Option<MutexGuard<'static, ()>>>,
}

/// A mutex that blocks uthreads (and plain OS threads) waiting for it. Error-checking: locking
/// it again from the holder, or unlocking it from another thread, fails instead of deadlocking
/// or corrupting it.
pub type MutexT = CorralMutex;

/// Identifies the calling thread for mutex ownership. A uthread may move between OS threads,
/// so uthreads use their id; other threads use the address of a thread-local, tagged with the
/// top bit so the two kinds never collide (uthread ids are counters far below 2^63).
pub(crate) fn caller_token() -> u64 {
    match corral::current_id() {
        Some(id) => id.as_u64(),
        None => {
            thread_local! { static TOKEN: u8 = const { 0 } }
            TOKEN.with(|t| ptr::from_ref(t).addr() as u64) | (1 << 63)
        }
    }
}

impl CorralMutex {
    /// Gives up ownership and hands the guard to the caller, who unlocks the mutex by dropping
    /// it (or a condvar wait by passing it on).
    ///
    /// # Safety
    /// The caller holds the lock (its token is in `owner`).
    pub(crate) unsafe fn take_guard(&self) -> MutexGuard<'static, ()> {
        self.owner.store(0, Ordering::Relaxed);
        // SAFETY: only the holder touches the cell, and the caller is the holder.
        unsafe { (*self.guard.get()).take() }.expect("a held corral_mutex stores its guard")
    }

    /// # Safety
    /// `guard` is for this mutex and was just acquired by the caller.
    pub(crate) unsafe fn store_guard(&self, guard: MutexGuard<'static, ()>, token: u64) {
        self.owner.store(token, Ordering::Relaxed);
        // SAFETY: the caller holds the lock, so nobody else touches the cell.
        unsafe { *self.guard.get() = Some(guard) };
    }

    pub(crate) fn holds(&self, token: u64) -> bool {
        self.owner.load(Ordering::Relaxed) == token
    }
}

/// Creates an unlocked mutex. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_mutex_new() -> *mut MutexT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralMutex {
            lock: Mutex::new(()),
            owner: AtomicU64::new(0),
            guard: UnsafeCell::new(None),
        })
    })
}

/// Locks `mutex`, blocking the caller until it is free. Returns 0, `-EINVAL` (NULL) or
/// `-EDEADLK` (the caller already holds it).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_lock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live until corral_mutex_free, which refuses it while it is locked, so it
        // outlives the guard we store ('static).
        let Some(m) = (unsafe { obj::<'static>(mutex) }) else {
            return -libc::EINVAL;
        };
        let me = caller_token();
        if m.holds(me) {
            return -libc::EDEADLK;
        }
        let guard = m.lock.lock();
        // SAFETY: just acquired.
        unsafe { m.store_guard(guard, me) };
        0
    })
}

/// Locks `mutex` if it is free. Returns 0, `-EBUSY` (locked, also by the caller) or `-EINVAL`
/// (NULL).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_trylock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: as in corral_mutex_lock.
        let Some(m) = (unsafe { obj::<'static>(mutex) }) else {
            return -libc::EINVAL;
        };
        match m.lock.try_lock() {
            Some(guard) => {
                // SAFETY: just acquired.
                unsafe { m.store_guard(guard, caller_token()) };
                0
            }
            None => -libc::EBUSY,
        }
    })
}

/// Unlocks `mutex`, handing it to the longest waiter if any. Returns 0, `-EINVAL` (NULL) or
/// `-EPERM` (the caller does not hold it).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_unlock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(m) = (unsafe { obj(mutex) }) else {
            return -libc::EINVAL;
        };
        if !m.holds(caller_token()) {
            return -libc::EPERM;
        }
        // SAFETY: the caller holds the lock (checked above).
        drop(unsafe { m.take_guard() });
        0
    })
}

/// Frees `mutex`. Returns 0 (also for NULL), or `-EBUSY` if it is locked, in which case it is
/// left alone. Nobody may use it afterwards, and nobody may be waiting for it.
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`, with no call on it in progress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_free(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(m) = (unsafe { obj(mutex) }) else {
            return 0;
        };
        // Unlocked means no stored guard: the lock hands off straight to waiters, so a
        // successful try_lock also means nobody is queued.
        match m.lock.try_lock() {
            Some(guard) => drop(guard),
            None => return -libc::EBUSY,
        }
        // SAFETY: from corral_mutex_new; unlocked, and the caller promised no further use.
        unsafe { free_boxed(mutex) };
        0
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::SendPtr;
    use super::*;

    #[test]
    fn mutex_checks_ownership_off_runtime() {
        let m = corral_mutex_new();
        assert!(!m.is_null());
        // SAFETY: m is live until freed at the end; the other thread finishes before that.
        unsafe {
            assert_eq!(corral_mutex_unlock(m), -libc::EPERM);
            assert_eq!(corral_mutex_lock(m), 0);
            assert_eq!(corral_mutex_lock(m), -libc::EDEADLK);
            assert_eq!(corral_mutex_trylock(m), -libc::EBUSY);
            assert_eq!(corral_mutex_free(m), -libc::EBUSY);
            let shared = SendPtr(m.cast());
            let other = std::thread::spawn(move || corral_mutex_unlock(shared.get().cast()));
            assert_eq!(other.join().unwrap(), -libc::EPERM);
            assert_eq!(corral_mutex_unlock(m), 0);
            assert_eq!(corral_mutex_free(m), 0);
        }
    }
}
