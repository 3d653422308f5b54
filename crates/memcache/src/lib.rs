//! memcached's protocols without I/O: a [`Session`] turns request bytes into reply bytes
//! against a shared [`Store`], byte for byte as memcached 1.6.18 answers. The server binary
//! (`apps/kv`) only moves bytes between sockets and sessions.

mod meta;
pub mod number;
mod session;
pub mod store;
mod text;

pub use session::{Limits, Session, Status};
pub use store::{Item, ShardWait, Store, StoreConfig};

/// The version `version` reports.
pub const VERSION: &str = concat!("corral-kv-", env!("CARGO_PKG_VERSION"));
/// Longest key, as memcached's `KEY_MAX_LENGTH`.
pub const KEY_MAX_LENGTH: usize = 250;
