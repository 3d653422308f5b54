//! A blocking mutex. The uncontended lock is one compare-exchange and the uncontended unlock
//! is a plain store followed by a load, both inlined.
//!
//! An unlock without a locked instruction races with a waiter that announces itself: on x86
//! the unlocker's load of the "contended" flag may be satisfied before its store releasing the
//! lock is visible, so neither side would see the other. The waiter closes that race with an
//! asymmetric fence, `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes every thread
//! of the process that is running execute a full barrier: after it, either the unlocker saw the
//! flag (and wakes the waiter) or its release is visible (and the waiter takes the lock instead
//! of sleeping). The cost moves to the contended path, which is about to sleep anyway. Where
//! the kernel lacks membarrier, unlock uses a locked exchange and both sides are plain Dekker.
//!
//! Unlock does not hand the lock over: it wakes the oldest waiter, which competes for it again.

use core::cell::UnsafeCell;
use core::fmt;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU8, Ordering, compiler_fence};
use std::sync::OnceLock;

use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with};

const UNLOCKED: u8 = 0;
const LOCKED: u8 = 1;

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Whether this process may use the expedited private membarrier; decided once, before the
/// first unlock or wait of any mutex relies on it. `Runtime::new` decides it up front, so no
/// uthread is ever preempted in the middle of the one-time initialization.
#[inline]
pub(crate) fn asymmetric_fences() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // SAFETY: membarrier registration takes no pointers.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            ) == 0
        }
    })
}

/// A full barrier on every running thread of this process.
fn process_wide_barrier() {
    // SAFETY: registered in asymmetric_fences; the command takes no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
    assert_eq!(rc, 0, "membarrier failed after registration");
}

/// The lock word and wait queue without data; also used by [`crate::Condvar`].
pub(crate) struct RawMutex {
    locked: AtomicU8,
    /// Set (under the wait queue's lock) while a waiter may be queued; tells unlock to wake.
    contended: AtomicU8,
    waiters: WaitQueue,
}

impl RawMutex {
    pub const fn new() -> Self {
        RawMutex {
            locked: AtomicU8::new(UNLOCKED),
            contended: AtomicU8::new(0),
            waiters: WaitQueue::new(),
        }
    }

    #[inline]
    pub fn lock(&self) {
        if !self.try_lock() {
            self.lock_slow();
        }
    }

    #[inline]
    pub fn try_lock(&self) -> bool {
        self.locked
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn lock_slow(&self) {
        loop {
            let node = WaitNode::for_current();
            let mut acquired = false;
            block_with(&node, || {
                self.waiters.with(|list| {
                    if self.try_lock() {
                        acquired = true;
                        return false;
                    }
                    // Announce ourselves, then make sure an unlock that missed the
                    // announcement has its release visible before we look again.
                    self.contended.swap(1, Ordering::SeqCst);
                    if asymmetric_fences() {
                        process_wide_barrier();
                    }
                    if self.try_lock() {
                        if list.is_empty() {
                            self.contended.store(0, Ordering::Relaxed);
                        }
                        acquired = true;
                        return false;
                    }
                    list.push(WaitRef::Stack(&node));
                    true
                })
            });
            if acquired {
                return;
            }
            // Woken by an unlock, which released the lock rather than handing it over.
            if self.try_lock() {
                return;
            }
        }
    }

    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        if asymmetric_fences() {
            self.locked.store(UNLOCKED, Ordering::Release);
            // The hardware may still satisfy the load below first: see the module comment.
            compiler_fence(Ordering::SeqCst);
        } else {
            self.locked.swap(UNLOCKED, Ordering::SeqCst);
        }
        if self.contended.load(Ordering::Relaxed) != 0 {
            self.unlock_slow();
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        let next = self.waiters.with(|list| {
            let next = list.pop();
            if list.is_empty() {
                self.contended.store(0, Ordering::Relaxed);
            }
            next
        });
        if let Some(w) = next {
            // SAFETY: mutex waiters are untimed, so the node is alive and still waiting.
            let woke = unsafe { w.wake() };
            debug_assert!(woke);
        }
    }
}

/// A mutual exclusion lock that blocks the uthread (or OS thread) that waits for it.
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serializes access to data.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: owning the mutex owns the data.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Mutex {
            raw: RawMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized> Mutex<T> {
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard {
            mutex: self,
            _not_send: core::marker::PhantomData,
        }
    }

    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.raw.try_lock().then(|| MutexGuard {
            mutex: self,
            _not_send: core::marker::PhantomData,
        })
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    pub(crate) fn raw(&self) -> &RawMutex {
        &self.raw
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("Mutex").field("data", &&*g).finish(),
            None => f.debug_struct("Mutex").field("data", &"<locked>").finish(),
        }
    }
}

/// Holds a [`Mutex`] locked; unlocks on drop.
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    _not_send: core::marker::PhantomData<*mut ()>,
}

// SAFETY: sharing a guard only shares &T.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.mutex
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock.
        unsafe { self.mutex.raw.unlock() };
    }
}
