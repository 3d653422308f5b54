//! Corral's runtime: user-level threads (uthreads) on kernel threads (kthreads), scheduled
//! with per-kthread run queues and work stealing, with blocking synchronization and timers.
//!
//! ```no_run
//! let rt = corral::Runtime::new(corral::Config::default().kthreads(2)).unwrap();
//! let sum = rt.block_on(|| {
//!     let handles: Vec<_> = (0..100u64).map(|i| corral::spawn(move || i * i)).collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 328_350);
//! ```
//!
//! Per-kthread state is reached through the `%gs` segment base; see `docs/architecture.md`.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("corral runs on x86-64 only");

// Under loom only the protocols written against `primitives` are built, for tests/loom.rs.
#[cfg(loom)]
#[doc(hidden)]
pub mod primitives;
#[cfg(loom)]
#[doc(hidden)]
pub mod iokernel {
    pub mod grant_wait;
    pub mod last_parker;
}
#[cfg(loom)]
#[doc(hidden)]
pub mod sched {
    pub mod idle;
    pub mod running;
    pub mod runqueue;
    pub mod timer_watch;
}
#[cfg(loom)]
#[doc(hidden)]
pub mod sync {
    pub mod kernel_sleepers;
    pub mod spin;
    pub mod wait_state;
}
#[cfg(loom)]
#[doc(hidden)]
pub use {sched::runqueue, sync::spin};

#[cfg(not(loom))]
mod arch;
#[cfg(not(loom))]
mod config;
#[cfg(not(loom))]
mod iokernel;
#[cfg(not(loom))]
mod malloc;
#[cfg(not(loom))]
pub mod net;
#[cfg(not(loom))]
pub mod preempt;
#[cfg(not(loom))]
mod primitives;
#[cfg(not(loom))]
mod runtime;
#[cfg(not(loom))]
mod sched;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
pub mod sync;
#[cfg(not(loom))]
mod timer;

#[cfg(not(loom))]
pub use {
    config::{
        Config, ConfigError, DEFAULT_IOKERNELD_SOCKET, DEFAULT_STACK_SIZE, IOKERNELD_SOCKET_ENV,
        IokernelSettings, Mode, allowed_cpus,
    },
    corral_abi::control::PreemptionMode,
    iokernel::core_granted_at_ns,
    iokernel::core_wake_sent_at_ns,
    malloc::PreemptSafeAlloc,
    runtime::{IokernelKthreadStats, Runtime, run},
    sched::uthread::{
        Builder, JoinHandle, ThreadId, current_id, current_name, current_stack, exit_uthread,
        kthread_index, set_uthread_fs_base, spawn, spawn_detached,
    },
    sched::{preemption_point, yield_now},
    signal::PREEMPT_SIGNAL,
    sync::condvar::{Condvar, WaitTimeoutResult},
    sync::futex,
    sync::mutex::{Mutex, MutexGuard},
    sync::rcu::{RcuCell, RcuRef},
    sync::rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard},
    sync::spin::{SpinLock, SpinLockGuard},
    sync::waitgroup::{Barrier, BarrierWaitResult, WaitGroup},
    timer::{now_ns, sleep, sleep_until},
};
