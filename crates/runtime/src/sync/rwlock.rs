//! Reader-writer lock. Fair in arrival order: once a writer waits, new readers queue behind it,
//! and releases hand the lock straight to the next waiters.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use std::collections::VecDeque;

use crate::sync::spin::SpinLock;
use crate::sync::waitq::{WaitNode, WaitRef, block_with};

#[derive(Default)]
struct State {
    readers: usize,
    writer: bool,
    /// Waiters in arrival order; `true` marks a writer.
    queue: VecDeque<(WaitRef, bool)>,
}

// SAFETY: WaitRefs only make threads runnable.
unsafe impl Send for State {}

pub struct RwLock<T: ?Sized> {
    state: SpinLock<State>,
    data: UnsafeCell<T>,
}

// SAFETY: readers share &T (T: Sync), writers are exclusive (T: Send).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}
// SAFETY: owning the lock owns the data.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}

impl<T> RwLock<T> {
    pub fn new(value: T) -> Self {
        RwLock {
            state: SpinLock::new(State::default()),
            data: UnsafeCell::new(value),
        }
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let node = WaitNode::for_current();
        block_with(&node, || {
            let mut s = self.state.lock();
            if !s.writer && s.queue.is_empty() {
                s.readers += 1;
                false
            } else {
                s.queue.push_back((WaitRef::Stack(&node), false));
                true
            }
        });
        RwLockReadGuard { lock: self }
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        let node = WaitNode::for_current();
        block_with(&node, || {
            let mut s = self.state.lock();
            if !s.writer && s.readers == 0 && s.queue.is_empty() {
                s.writer = true;
                false
            } else {
                s.queue.push_back((WaitRef::Stack(&node), true));
                true
            }
        });
        RwLockWriteGuard { lock: self }
    }

    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let mut s = self.state.lock();
        (!s.writer && s.queue.is_empty()).then(|| {
            s.readers += 1;
            RwLockReadGuard { lock: self }
        })
    }

    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let mut s = self.state.lock();
        (!s.writer && s.readers == 0 && s.queue.is_empty()).then(|| {
            s.writer = true;
            RwLockWriteGuard { lock: self }
        })
    }

    /// Hands the lock to the waiters at the head of the queue; called with no holder left.
    fn grant(s: &mut State) -> Vec<WaitRef> {
        let mut woken = Vec::new();
        match s.queue.front() {
            Some((_, true)) => {
                s.writer = true;
                woken.push(s.queue.pop_front().expect("front").0);
            }
            Some((_, false)) => {
                while let Some((_, false)) = s.queue.front() {
                    s.readers += 1;
                    woken.push(s.queue.pop_front().expect("front").0);
                }
            }
            None => {}
        }
        woken
    }

    fn wake(woken: Vec<WaitRef>) {
        for w in woken {
            // SAFETY: queued untimed waiters stay alive until woken.
            unsafe { w.wake() };
        }
    }

    fn read_unlock(&self) {
        let woken = {
            let mut s = self.state.lock();
            s.readers -= 1;
            if s.readers == 0 {
                Self::grant(&mut s)
            } else {
                Vec::new()
            }
        };
        Self::wake(woken);
    }

    fn write_unlock(&self) {
        let woken = {
            let mut s = self.state.lock();
            s.writer = false;
            Self::grant(&mut s)
        };
        Self::wake(woken);
    }
}

pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read guard excludes writers.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.read_unlock();
    }
}

pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write guard is exclusive.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write guard is exclusive.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.write_unlock();
    }
}
