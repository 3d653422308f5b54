//! Core hand-off without a cross-CPU wake-up.
//!
//! iokerneld runs on its own CPU; waking a kthread parked on another (idle, halted) CPU costs
//! a cross-CPU wake-up of some tens of microseconds on a virtual machine, against about two for
//! a wake-up on the same CPU. So iokerneld keeps one helper thread on each managed core, at
//! `SCHED_IDLE`: Linux runs it only when no kthread on that core is runnable, that is, exactly
//! when the core has gone idle. The helper spins on the core's [`Mailbox`] for a while
//! ([`SpinBudget`]); iokerneld posts the wake word of the kthread it grants the core to, and the
//! helper wakes that kthread right there, which preempts the helper at once.
//!
//! This crate holds the parts with no system calls in them: the mailbox's handshake between
//! iokerneld's loop and a helper (model-checked in `tests/loom.rs`) and the spin budget (unit-
//! and property-tested). iokerneld's `daemon/handoff.rs` owns the threads and the futexes.

pub mod mailbox;
pub mod spin_budget;

pub use mailbox::{Delivery, HelperState, Mailbox};
pub use spin_budget::SpinBudget;
