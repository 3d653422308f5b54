//! Read-copy-update.
//!
//! A read section disables preemption, so a uthread cannot switch inside one; a kthread that
//! passes through its scheduler (or is parked) is therefore outside every read section it ran.
//! [`synchronize`] waits until each kthread has done so once. Threads that are not kthreads may
//! read too; they are counted while inside a read section.

use core::marker::PhantomData;
use core::ops::Deref;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering, fence};
use std::sync::{Condvar as OsCondvar, Mutex as OsMutex, OnceLock};
use std::time::Duration;

use crate::preempt;
use crate::sched::kthread::{self, Kthread, KthreadState};
use crate::sync::spin::SpinLock;

/// Every kthread of every runtime in the process (kthreads are never freed).
static KTHREADS: SpinLock<Vec<&'static Kthread>> = SpinLock::new(Vec::new());
/// Read sections currently open on threads that are not kthreads.
static FOREIGN_READERS: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn register_kthread(k: &'static Kthread) {
    KTHREADS.lock().push(k);
}

/// An open read section. Must not be held across anything that blocks or yields.
pub struct RcuReadGuard {
    foreign: bool,
    _not_send: PhantomData<*mut ()>,
}

/// Enters a read section.
#[inline]
pub fn read_lock() -> RcuReadGuard {
    if kthread::current_kthread().is_some() {
        preempt::disable();
        RcuReadGuard {
            foreign: false,
            _not_send: PhantomData,
        }
    } else {
        FOREIGN_READERS.fetch_add(1, Ordering::SeqCst);
        RcuReadGuard {
            foreign: true,
            _not_send: PhantomData,
        }
    }
}

impl Drop for RcuReadGuard {
    #[inline]
    fn drop(&mut self) {
        if self.foreign {
            FOREIGN_READERS.fetch_sub(1, Ordering::SeqCst);
        } else {
            preempt::enable();
        }
    }
}

/// Waits until every read section that was open when it was called has ended.
pub fn synchronize() {
    fence(Ordering::SeqCst);
    let me = kthread::current_kthread().map(|k| k as *const Kthread);
    let snapshot: Vec<(&'static Kthread, u64)> = KTHREADS
        .lock()
        .iter()
        .filter(|k| Some(**k as *const Kthread) != me)
        .map(|k| (*k, k.rcu_gen.load(Ordering::Acquire)))
        .collect();
    for (k, gen_then) in snapshot {
        while k.rcu_gen.load(Ordering::Acquire) == gen_then
            && !matches!(
                k.state.load(Ordering::SeqCst),
                KthreadState::Parked | KthreadState::Gone
            )
        {
            backoff();
        }
    }
    while FOREIGN_READERS.load(Ordering::SeqCst) != 0 {
        backoff();
    }
    fence(Ordering::SeqCst);
}

fn backoff() {
    if kthread::current_kthread().is_some() {
        crate::timer::sleep(Duration::from_micros(5));
    } else {
        std::thread::yield_now();
    }
}

type Callback = Box<dyn FnOnce() + Send>;

struct Deferred {
    queue: OsMutex<Vec<Callback>>,
    ready: OsCondvar,
}

/// Runs `f` after a grace period, on a background thread, without blocking the caller.
pub fn call_rcu(f: impl FnOnce() + Send + 'static) {
    static DEFERRED: OnceLock<&'static Deferred> = OnceLock::new();
    let d = *DEFERRED.get_or_init(|| {
        let d: &'static Deferred = Box::leak(Box::new(Deferred {
            queue: OsMutex::new(Vec::new()),
            ready: OsCondvar::new(),
        }));
        std::thread::Builder::new()
            .name("corral-rcu".into())
            .spawn(move || {
                loop {
                    let batch = {
                        let mut q = d.queue.lock().unwrap_or_else(|e| e.into_inner());
                        while q.is_empty() {
                            q = d.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                        }
                        core::mem::take(&mut *q)
                    };
                    synchronize();
                    for f in batch {
                        f();
                    }
                }
            })
            .expect("corral: cannot start the RCU reclamation thread");
        d
    });
    d.queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(f));
    d.ready.notify_one();
}

/// A pointer readers follow without locks; writers replace the value and free the old one
/// after a grace period.
pub struct RcuCell<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
    writers: crate::sync::mutex::Mutex<()>,
}

impl<T: Send + Sync + 'static> RcuCell<T> {
    pub fn new(value: T) -> Self {
        RcuCell {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
            writers: crate::sync::mutex::Mutex::new(()),
        }
    }

    /// Reads the current value inside a read section.
    pub fn read(&self) -> RcuRef<'_, T> {
        let guard = read_lock();
        // SAFETY: the value is freed only after a grace period that waits for this section.
        let value = unsafe { &*self.ptr.load(Ordering::Acquire) };
        RcuRef {
            value,
            _guard: guard,
        }
    }

    /// Publishes `value`, waits for a grace period, then drops the old value.
    pub fn update(&self, value: T) {
        let old = self.swap(value);
        synchronize();
        // SAFETY: no reader can still see `old` after the grace period.
        drop(unsafe { Box::from_raw(old) });
    }

    /// Publishes `value`; the old one is dropped after a grace period, in the background.
    pub fn update_deferred(&self, value: T) {
        let old = SendPtr(self.swap(value));
        call_rcu(move || {
            let old = old;
            // SAFETY: the grace period has passed.
            drop(unsafe { Box::from_raw(old.0) });
        });
    }

    fn swap(&self, value: T) -> *mut T {
        let _w = self.writers.lock();
        self.ptr
            .swap(Box::into_raw(Box::new(value)), Ordering::AcqRel)
    }
}

struct SendPtr<T>(*mut T);
// SAFETY: the pointee is Send; the pointer is only used once, by the reclaimer.
unsafe impl<T: Send> Send for SendPtr<T> {}

impl<T: Send + Sync + 'static> Drop for RcuCell<T> {
    fn drop(&mut self) {
        // SAFETY: &mut self: no reader holds a reference into this cell.
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}

/// A value read from an [`RcuCell`], valid while the read section lasts.
pub struct RcuRef<'a, T> {
    value: &'a T,
    _guard: RcuReadGuard,
}

impl<T> Deref for RcuRef<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}
