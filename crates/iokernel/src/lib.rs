//! iokerneld's privileged core: the core allocator (`alloc`), its settings (`config`), the
//! machine's CPUs (`cpus`), the control socket (`control`), the daemon loop and packet switch
//! (`daemon`), and the NIC backend interface with the TAP backend (`nic`). The `iokerneld`
//! binary (package corral-iokerneld) puts them together with the `gen` backend (corral-gen).

pub mod alloc;
pub mod config;
pub mod control;
pub mod cpus;
pub mod daemon;
pub mod logger;
pub mod nic;
pub mod sys;
