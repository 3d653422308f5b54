//! iokerneld's privileged core: its settings (`config`), the
//! machine's CPUs (`cpus`), the control socket (`control`), the daemon loop and packet switch
//! (`daemon`), and the NIC backend interface with the TAP backend (`nic`). Which runtime gets
//! which core is decided by a policy from the pure `corral-policy` crate. The `iokerneld` binary
//! (package corral-iokerneld) puts them together with the `gen` backend (corral-gen).

pub mod config;
pub mod control;
pub mod cpus;
pub mod daemon;
pub mod logger;
pub mod nic;
pub mod shield;
pub mod sys;
