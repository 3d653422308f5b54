//! The shim that `corral-run` preloads into an unmodified, dynamically linked program to run it
//! as a Corral runtime: `main` and every `pthread_create`d thread become uthreads, each with
//! its own TLS, and the pthread and waiting functions block uthreads instead of kthreads.
//!
//! Interposed: `__libc_start_main` ([`start`]); threads, keys ([`thread`]); mutexes, condition
//! variables, rwlocks, barriers, spinlocks, `pthread_once`, unnamed semaphores; `sched_yield`
//! and the sleeps ([`wait`]); futexes waited on through `syscall` ([`syscall`]); signal masks
//! ([`sigmask`]); signals routed to the uthread that takes them, signal waits, `kill` of the
//! process itself, `raise`, `pthread_kill` ([`signals`]); the preemption signal's disposition
//! ([`disposition`]); the `exec` family and `posix_spawn`, to keep Corral across an exec
//! ([`exec`]); children started with the program's signal mask, `system` ([`spawn`]); `malloc`
//! and its family (`corral-preempt-malloc`); what cannot work is refused ([`refuse`]).

#![allow(clippy::missing_safety_doc)]

use corral_preempt_malloc as _;

mod barrier;
mod cond;
mod disposition;
mod exec;
mod futex;
mod layout;
mod mutex;
mod once;
mod real;
mod refuse;
mod rwlock;
mod sem;
mod settings;
mod sigmask;
mod signals;
mod spawn;
mod spin;
mod start;
mod syscall;
mod thread;
mod time;
mod tls;
mod wait;
