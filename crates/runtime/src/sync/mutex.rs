//! A blocking mutex. Uncontended lock and unlock are one compare-exchange each, inlined;
//! contended unlock hands the lock straight to the oldest waiter.

use core::cell::UnsafeCell;
use core::fmt;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
/// Locked, and the wait queue may be non-empty: unlock must take the slow path.
const CONTENDED: u32 = 2;

/// The lock word and wait queue without data; also used by [`crate::Condvar`].
pub(crate) struct RawMutex {
    state: AtomicU32,
    waiters: WaitQueue,
}

impl RawMutex {
    pub const fn new() -> Self {
        RawMutex {
            state: AtomicU32::new(UNLOCKED),
            waiters: WaitQueue::new(),
        }
    }

    #[inline]
    pub fn lock(&self) {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[inline]
    pub fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn lock_slow(&self) {
        let node = WaitNode::for_current();
        block_with(&node, || {
            self.waiters.with(|list| {
                loop {
                    match self.state.load(Ordering::Relaxed) {
                        UNLOCKED => {
                            if self
                                .state
                                .compare_exchange(
                                    UNLOCKED,
                                    LOCKED,
                                    Ordering::Acquire,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                            {
                                return false;
                            }
                        }
                        LOCKED => {
                            if self
                                .state
                                .compare_exchange(
                                    LOCKED,
                                    CONTENDED,
                                    Ordering::Relaxed,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                            {
                                list.push(WaitRef::Stack(&node));
                                return true;
                            }
                        }
                        _ => {
                            list.push(WaitRef::Stack(&node));
                            return true;
                        }
                    }
                }
            })
        });
        // Either we took it, or the unlocker handed it to us (its release of the wait queue
        // lock and our wake-up order its writes before ours).
    }

    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        // One locked subtract: LOCKED becomes UNLOCKED. CONTENDED becomes LOCKED, which keeps
        // the lock held (by us) until the slow path hands it to a waiter.
        if self.state.fetch_sub(1, Ordering::Release) != LOCKED {
            self.unlock_slow();
        }
    }

    /// The lock was CONTENDED and is now LOCKED, still ours: hand it to the oldest waiter.
    #[cold]
    fn unlock_slow(&self) {
        let next = self.waiters.with(|list| {
            let next = list.pop();
            match &next {
                // Waiters that queued after our subtract set CONTENDED again under this lock;
                // with none left the lock is simply released.
                None => self.state.store(UNLOCKED, Ordering::Release),
                Some(_) if list.is_empty() => self.state.store(LOCKED, Ordering::Release),
                Some(_) => self.state.store(CONTENDED, Ordering::Release),
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
