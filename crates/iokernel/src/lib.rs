//! iokerneld's building blocks: the core allocation policies (`alloc`, the `corral-policy`
//! crate), its settings (`config`), the
//! machine's CPUs (`cpus`), the control socket (`control`), the daemon loop and packet switch
//! (`daemon`), the NIC backends (`nic`), the traffic generator's run spec and results
//! (`genrun`), and a client that speaks the shared-memory ABI directly (`client`, for tests and
//! benchmarks).

pub use corral_policy as alloc;
pub mod client;
pub mod config;
pub mod control;
pub mod cpus;
pub mod daemon;
pub mod genrun;
pub mod logger;
pub mod netclient;
pub mod nic;
pub mod sys;
