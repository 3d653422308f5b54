//! Runtime stand-ins that speak iokerneld's shared-memory ABI directly, for tests and
//! benchmarks: a runtime of plain OS threads ([`client`], wrapped by the `corral-abi-client`
//! binary) and its network kthread ([`netclient`]).

pub mod client;
pub mod netclient;
