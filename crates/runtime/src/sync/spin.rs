//! Test-and-test-and-set spinlock, the building block under every runtime structure.

use crate::primitives::{AtomicBool, Ordering, spin_wait_hint};

/// A bare lock word. Callers decide what it protects; [`crate::SpinLock`] wraps it with data
/// and disables preemption while held.
pub struct RawSpinLock {
    locked: AtomicBool,
}

impl Default for RawSpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl RawSpinLock {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawSpinLock {
            locked: AtomicBool::new(false),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        RawSpinLock {
            locked: AtomicBool::new(false),
        }
    }

    #[inline]
    pub fn try_lock(&self) -> bool {
        !self.locked.load(Ordering::Relaxed)
            && self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    pub fn lock(&self) {
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[cold]
    fn lock_contended(&self) {
        loop {
            while self.locked.load(Ordering::Relaxed) {
                spin_wait_hint();
            }
            if self.try_lock() {
                return;
            }
        }
    }

    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// Takes the lock, released when the guard drops. Does not touch preemption: the caller
    /// keeps it disabled while a uthread holds the guard.
    #[inline]
    pub fn guard(&self) -> RawSpinGuard<'_> {
        self.lock();
        RawSpinGuard { lock: self }
    }

    /// Takes the lock if it is free; see [`RawSpinLock::guard`].
    #[inline]
    pub fn try_guard(&self) -> Option<RawSpinGuard<'_>> {
        // Lazily: a guard made for a failed attempt would unlock someone else's lock on drop.
        self.try_lock().then(|| RawSpinGuard { lock: self })
    }
}

/// Proof that a [`RawSpinLock`] is held; unlocks it when dropped.
pub struct RawSpinGuard<'a> {
    lock: &'a RawSpinLock,
}

impl Drop for RawSpinGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: a guard exists only while its lock is held (made by guard/try_guard).
        unsafe { self.lock.unlock() };
    }
}

#[cfg(not(loom))]
pub use guarded::{SpinLock, SpinLockGuard};

#[cfg(not(loom))]
mod guarded {
    use super::RawSpinLock;
    use core::cell::UnsafeCell;
    use core::ops::{Deref, DerefMut};

    /// A spinlock around `T` that disables preemption while held. For short critical sections
    /// only: a uthread must not block or yield while holding it (that panics).
    pub struct SpinLock<T: ?Sized> {
        raw: RawSpinLock,
        data: UnsafeCell<T>,
    }

    // SAFETY: access to data is serialized by the lock.
    unsafe impl<T: ?Sized + Send> Sync for SpinLock<T> {}
    // SAFETY: owning the lock owns the data.
    unsafe impl<T: ?Sized + Send> Send for SpinLock<T> {}

    impl<T> SpinLock<T> {
        pub const fn new(value: T) -> Self {
            SpinLock {
                raw: RawSpinLock::new(),
                data: UnsafeCell::new(value),
            }
        }

        pub fn into_inner(self) -> T {
            self.data.into_inner()
        }
    }

    impl<T: ?Sized> SpinLock<T> {
        #[inline]
        pub fn lock(&self) -> SpinLockGuard<'_, T> {
            crate::preempt::disable();
            self.raw.lock();
            SpinLockGuard {
                lock: self,
                _not_send: core::marker::PhantomData,
            }
        }

        #[inline]
        pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
            crate::preempt::disable();
            if self.raw.try_lock() {
                Some(SpinLockGuard {
                    lock: self,
                    _not_send: core::marker::PhantomData,
                })
            } else {
                crate::preempt::enable();
                None
            }
        }

        pub fn get_mut(&mut self) -> &mut T {
            self.data.get_mut()
        }
    }

    pub struct SpinLockGuard<'a, T: ?Sized> {
        lock: &'a SpinLock<T>,
        _not_send: core::marker::PhantomData<*mut ()>,
    }

    impl<T: ?Sized> Deref for SpinLockGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the guard holds the lock.
            unsafe { &*self.lock.data.get() }
        }
    }

    impl<T: ?Sized> DerefMut for SpinLockGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the guard holds the lock.
            unsafe { &mut *self.lock.data.get() }
        }
    }

    impl<T: ?Sized> Drop for SpinLockGuard<'_, T> {
        #[inline]
        fn drop(&mut self) {
            // SAFETY: the guard holds the lock.
            unsafe { self.lock.raw.unlock() };
            crate::preempt::enable();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::RawSpinLock;

    #[test]
    fn a_failed_try_guard_leaves_the_lock_held() {
        let lock = RawSpinLock::new();
        let held = lock.guard();
        assert!(lock.try_guard().is_none());
        assert!(
            !lock.try_lock(),
            "the holder's lock was released by a failed attempt"
        );
        drop(held);
        let again = lock.try_guard();
        assert!(again.is_some());
        drop(again);
        assert!(lock.try_lock());
    }
}
