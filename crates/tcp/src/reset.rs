//! The answer to a segment that matches no connection (RFC 9293 §3.10.7.1): a RST, unless the
//! segment was itself a RST.

use core::net::SocketAddrV4;

use corral_wire::TcpSegment;

/// Writes the RST answering `seg` (which arrived from `remote` to `local`) into `out`; returns
/// its length, or `None` when no answer is due.
pub fn reset_for(
    local: SocketAddrV4,
    remote: SocketAddrV4,
    seg: &TcpSegment<'_>,
    out: &mut [u8],
) -> Option<usize> {
    let _ = (local, remote, seg, out);
    todo!()
}
