//! Synchronization: spinlocks, mutexes, condition variables, wait groups, barriers,
//! reader-writer locks, RCU and futex-style waiting on a word.

pub(crate) mod condvar;
pub mod futex;
pub(crate) mod kernel_sleepers;
pub(crate) mod mutex;
pub mod rcu;
pub(crate) mod rwlock;
pub(crate) mod spin;
pub(crate) mod wait_state;
pub(crate) mod waitgroup;
pub(crate) mod waitq;
