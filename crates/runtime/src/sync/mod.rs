//! Synchronization: spinlocks, mutexes, condition variables, wait groups, barriers,
//! reader-writer locks and RCU.

pub(crate) mod condvar;
pub(crate) mod mutex;
pub mod rcu;
pub(crate) mod rwlock;
pub(crate) mod spin;
pub(crate) mod wait_state;
pub(crate) mod waitgroup;
pub(crate) mod waitq;
