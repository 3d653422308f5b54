//! The answer to a segment that matches no connection (RFC 9293 §3.10.7.1): a RST, unless the
//! segment was itself a RST.

use core::net::SocketAddrV4;

use corral_wire::{TcpFlags, TcpHeader, TcpOptionSet, TcpSegment};

/// Writes the RST answering `seg` (which arrived from `remote` to `local`) into `out`; returns
/// its length, or `None` when no answer is due.
///
/// If `seg` carries an ACK, the RST takes its sequence number from that ACK (and carries no
/// ACK); otherwise it has sequence number 0 and acknowledges everything `seg` occupied: its
/// payload, plus one for a SYN and one for a FIN. `out` must hold at least 20 bytes.
pub fn reset_for(
    local: SocketAddrV4,
    remote: SocketAddrV4,
    seg: &TcpSegment<'_>,
    out: &mut [u8],
) -> Option<usize> {
    let flags = seg.flags();
    if flags.contains(TcpFlags::RST) {
        return None;
    }
    let (seq, ack, flags) = if flags.contains(TcpFlags::ACK) {
        (seg.ack(), 0, TcpFlags::RST)
    } else {
        let len = seg.payload().len() as u32
            + u32::from(flags.contains(TcpFlags::SYN))
            + u32::from(flags.contains(TcpFlags::FIN));
        (
            0,
            seg.seq().wrapping_add(len),
            TcpFlags::RST | TcpFlags::ACK,
        )
    };
    let header = TcpHeader {
        src_port: local.port(),
        dst_port: remote.port(),
        seq,
        ack,
        flags,
        window: 0,
        urgent: 0,
        options: TcpOptionSet::default(),
    };
    header.emit(out, 0, *local.ip(), *remote.ip()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use corral_wire::Timestamps;

    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
    const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);

    /// A segment from REMOTE to LOCAL.
    fn segment(seq: u32, ack: u32, flags: TcpFlags, payload: &[u8]) -> Vec<u8> {
        let h = TcpHeader {
            src_port: REMOTE.port(),
            dst_port: LOCAL.port(),
            seq,
            ack,
            flags,
            window: 1000,
            urgent: 0,
            options: TcpOptionSet {
                timestamps: Some(Timestamps { tsval: 5, tsecr: 6 }),
                ..TcpOptionSet::default()
            },
        };
        let mut buf = vec![0u8; h.header_len() + payload.len()];
        buf[h.header_len()..].copy_from_slice(payload);
        let n = h
            .emit(&mut buf, payload.len(), *REMOTE.ip(), *LOCAL.ip())
            .unwrap();
        buf.truncate(n);
        buf
    }

    /// The RST answering `bytes`, parsed with its checksum verified.
    fn answer(bytes: &[u8]) -> Option<(u32, u32, TcpFlags, usize)> {
        let seg = TcpSegment::parse(bytes, *REMOTE.ip(), *LOCAL.ip()).unwrap();
        let mut out = [0u8; 64];
        let n = reset_for(LOCAL, REMOTE, &seg, &mut out)?;
        let rst = TcpSegment::parse(&out[..n], *LOCAL.ip(), *REMOTE.ip()).unwrap();
        assert_eq!((rst.src_port(), rst.dst_port()), (80, 40000));
        assert!(rst.payload().is_empty() && rst.option_bytes().is_empty());
        assert_eq!(rst.window(), 0);
        Some((rst.seq(), rst.ack(), rst.flags(), n))
    }

    #[test]
    fn a_segment_with_ack_gets_a_rst_at_its_ack() {
        let seg = segment(1000, 77_777, TcpFlags::ACK | TcpFlags::PSH, b"hello");
        assert_eq!(answer(&seg), Some((77_777, 0, TcpFlags::RST, 20)));
        let fin = segment(5, u32::MAX, TcpFlags::ACK | TcpFlags::FIN, b"");
        assert_eq!(answer(&fin), Some((u32::MAX, 0, TcpFlags::RST, 20)));
    }

    #[test]
    fn a_segment_without_ack_gets_a_rst_ack_covering_it() {
        let rst_ack = TcpFlags::RST | TcpFlags::ACK;
        let syn = segment(1000, 0, TcpFlags::SYN, b"");
        assert_eq!(answer(&syn), Some((0, 1001, rst_ack, 20)));
        let data = segment(1000, 0, TcpFlags::PSH, b"hello");
        assert_eq!(answer(&data), Some((0, 1005, rst_ack, 20)));
        let syn_fin_data = segment(u32::MAX - 1, 0, TcpFlags::SYN | TcpFlags::FIN, b"abc");
        assert_eq!(answer(&syn_fin_data), Some((0, 3, rst_ack, 20)), "wraps");
        let bare = segment(42, 0, TcpFlags(0), b"");
        assert_eq!(answer(&bare), Some((0, 42, rst_ack, 20)));
    }

    #[test]
    fn a_rst_is_never_answered() {
        for flags in [TcpFlags::RST, TcpFlags::RST | TcpFlags::ACK] {
            assert_eq!(answer(&segment(1, 2, flags, b"x")), None);
        }
    }

    #[test]
    fn a_buffer_too_small_gives_no_answer() {
        let bytes = segment(1, 2, TcpFlags::ACK, b"");
        let seg = TcpSegment::parse(&bytes, *REMOTE.ip(), *LOCAL.ip()).unwrap();
        assert_eq!(reset_for(LOCAL, REMOTE, &seg, &mut [0u8; 19]), None);
    }
}
