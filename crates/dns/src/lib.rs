//! An authoritative DNS server's protocol logic without I/O: the wire format (RFC 1035),
//! zones from master files, and the answer to a query (RFC 1034 section 4.3.2) with
//! wildcards (RFC 4592), EDNS0 (RFC 6891) and truncation. The server binary (`apps/dns`) only
//! moves datagrams and TCP frames between sockets and [`Catalog::respond`].

pub mod catalog;
mod hash;
pub mod message;
pub mod name;
pub mod rdata;
pub mod wire;
pub mod writer;
pub mod zone;

pub use catalog::{Catalog, Dropped, Outcome, Transport};
pub use name::Name;
pub use zone::{Zone, ZoneError};

/// Length of the well-formed uncompressed name at the start of `wire`.
pub(crate) fn name_len(wire: &[u8]) -> usize {
    let mut i = 0;
    while wire[i] != 0 {
        i += 1 + wire[i] as usize;
    }
    i + 1
}

/// As [`name_len`], for bytes not known to hold a well-formed name.
pub(crate) fn name_len_checked(wire: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        let l = *wire.get(i)? as usize;
        if l > name::MAX_LABEL || i + 1 > name::MAX_NAME {
            return None;
        }
        if l == 0 {
            return (i < name::MAX_NAME).then_some(i + 1);
        }
        i += 1 + l;
    }
}
