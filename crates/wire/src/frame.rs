//! Whole-frame entry points: the runtime's full parse, iokerneld's steering classifier, and
//! one-call frame builders.

use core::net::Ipv4Addr;

use crate::arp::ArpPacket;
use crate::checksum::Checksum;
use crate::error::{BuildError, DropReason, need};
use crate::ethernet::{self, EtherType, EthernetFrame, EthernetHeader, MacAddr};
use crate::icmp::{self, IcmpEcho, IcmpEchoHeader};
use crate::ipv4::{self, Ipv4Header, Ipv4Packet, PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use crate::tcp::{self, TcpHeader, TcpSegment};
use crate::udp::{self, UdpDatagram, UdpHeader};

/// A frame parsed and verified down to its transport header.
#[derive(Clone, Copy, Debug)]
pub struct ParsedFrame<'a> {
    /// The Ethernet header and payload.
    pub eth: EthernetFrame<'a>,
    /// What the frame carries.
    pub packet: Packet<'a>,
}

/// The protocol content of a [`ParsedFrame`].
#[derive(Clone, Copy, Debug)]
pub enum Packet<'a> {
    /// An ARP request or reply.
    Arp(ArpPacket),
    /// An ICMP echo request or reply.
    Icmp {
        /// The IPv4 header.
        ip: Ipv4Packet<'a>,
        /// The echo message.
        icmp: IcmpEcho<'a>,
    },
    /// A UDP datagram.
    Udp {
        /// The IPv4 header.
        ip: Ipv4Packet<'a>,
        /// The datagram.
        udp: UdpDatagram<'a>,
    },
    /// A TCP segment.
    Tcp {
        /// The IPv4 header.
        ip: Ipv4Packet<'a>,
        /// The segment.
        tcp: TcpSegment<'a>,
    },
}

/// Parses and verifies every layer of `frame`, checksums included.
///
/// This is the runtime's receive path: anything it returns is safe to hand to the socket layer.
#[inline]
pub fn parse_frame(frame: &[u8]) -> Result<ParsedFrame<'_>, DropReason> {
    let eth = EthernetFrame::parse(frame)?;
    let packet = match eth.ethertype() {
        EtherType::ARP => Packet::Arp(ArpPacket::parse(eth.payload())?),
        EtherType::IPV4 => {
            let ip = Ipv4Packet::parse(eth.payload())?;
            let (src, dst, l4) = (ip.src(), ip.dst(), ip.payload());
            match ip.protocol() {
                PROTO_UDP => Packet::Udp {
                    ip,
                    udp: UdpDatagram::parse(l4, src, dst)?,
                },
                PROTO_TCP => Packet::Tcp {
                    ip,
                    tcp: TcpSegment::parse(l4, src, dst)?,
                },
                PROTO_ICMP => Packet::Icmp {
                    ip,
                    icmp: IcmpEcho::parse(l4)?,
                },
                _ => return Err(DropReason::UnsupportedProtocol),
            }
        }
        _ => return Err(DropReason::UnsupportedEthertype),
    };
    Ok(ParsedFrame { eth, packet })
}

/// An IPv4 transport flow identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// Source address.
    pub src_ip: Ipv4Addr,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// [`ipv4::PROTO_TCP`] or [`ipv4::PROTO_UDP`].
    pub protocol: u8,
}

impl FiveTuple {
    /// The same flow seen from the other end.
    #[inline]
    pub const fn reversed(&self) -> Self {
        FiveTuple {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}

/// What a frame is, as far as steering needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass {
    /// ARP; steered by `target_ip`.
    Arp(ArpPacket),
    /// IPv4 TCP or UDP; steered by hashing the flow.
    Flow(FiveTuple),
    /// IPv4 ICMP; steered by the address pair.
    Icmp {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
}

/// The result of [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification {
    /// Destination MAC, which selects the runtime.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Protocol class and steering key.
    pub class: FrameClass,
    /// A TCP segment that carries only an acknowledgment: ACK set, no SYN, FIN, RST or URG,
    /// and no payload (options such as timestamps and SACK blocks may be present).
    pub bare_tcp_ack: bool,
}

/// Classifies `frame` for steering in one pass.
///
/// Ethernet, ARP and the IPv4 header (checksum included) are fully validated, so corrupt or
/// fragmented packets are dropped before they cost a runtime anything. Transport checksums are
/// not verified: that is per-byte work the receiving runtime does anyway, on its own cores. The
/// transport header must be long enough to hold its fixed part.
#[inline]
pub fn classify(frame: &[u8]) -> Result<Classification, DropReason> {
    let eth = EthernetFrame::parse(frame)?;
    let mut bare_tcp_ack = false;
    let class = match eth.ethertype() {
        EtherType::ARP => FrameClass::Arp(ArpPacket::parse(eth.payload())?),
        EtherType::IPV4 => {
            let ip = Ipv4Packet::parse(eth.payload())?;
            let l4 = ip.payload();
            let (protocol, fixed_len) = match ip.protocol() {
                PROTO_UDP => (PROTO_UDP, udp::HEADER_LEN),
                PROTO_TCP => (PROTO_TCP, tcp::MIN_HEADER_LEN),
                PROTO_ICMP => {
                    return Ok(Classification {
                        dst_mac: eth.dst(),
                        src_mac: eth.src(),
                        class: FrameClass::Icmp {
                            src: ip.src(),
                            dst: ip.dst(),
                        },
                        bare_tcp_ack: false,
                    });
                }
                _ => return Err(DropReason::UnsupportedProtocol),
            };
            if l4.len() < fixed_len {
                return Err(DropReason::Truncated);
            }
            bare_tcp_ack = protocol == PROTO_TCP && is_bare_ack(l4);
            FrameClass::Flow(FiveTuple {
                src_ip: ip.src(),
                dst_ip: ip.dst(),
                src_port: u16::from_be_bytes([l4[0], l4[1]]),
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
                protocol,
            })
        }
        _ => return Err(DropReason::UnsupportedEthertype),
    };
    Ok(Classification {
        dst_mac: eth.dst(),
        src_mac: eth.src(),
        class,
        bare_tcp_ack,
    })
}

/// Whether the TCP segment `l4` (at least its fixed header, as `classify` checked) carries
/// only an acknowledgment.
fn is_bare_ack(l4: &[u8]) -> bool {
    let header_len = usize::from(l4[12] >> 4) * 4;
    let flags = l4[13];
    let others = tcp::TcpFlags::SYN | tcp::TcpFlags::FIN | tcp::TcpFlags::RST | tcp::TcpFlags::URG;
    header_len >= tcp::MIN_HEADER_LEN
        && l4.len() == header_len
        && flags & tcp::TcpFlags::ACK.0 != 0
        && flags & others.0 == 0
}

/// Link and network addressing for an outgoing IPv4 frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4FrameSpec {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC (next hop).
    pub dst_mac: MacAddr,
    /// Source address.
    pub src_ip: Ipv4Addr,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
    /// Time to live.
    pub ttl: u8,
    /// IPv4 identification field.
    pub ident: u16,
    /// Type-of-service byte.
    pub tos: u8,
}

/// Offset of the transport header in frames built here (Ethernet + option-less IPv4).
pub const L4_OFFSET: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
/// Offset of the UDP payload in frames built here.
pub const UDP_PAYLOAD_OFFSET: usize = L4_OFFSET + udp::HEADER_LEN;
/// Offset of the ICMP echo payload in frames built here.
pub const ICMP_PAYLOAD_OFFSET: usize = L4_OFFSET + icmp::HEADER_LEN;

impl Ipv4FrameSpec {
    /// Writes the Ethernet and IPv4 headers in front of an `l4_len`-byte transport message.
    fn emit_l2_l3(&self, buf: &mut [u8], protocol: u8, l4_len: usize) -> Result<(), BuildError> {
        EthernetHeader {
            dst: self.dst_mac,
            src: self.src_mac,
            ethertype: EtherType::IPV4,
        }
        .emit(buf)?;
        Ipv4Header {
            src: self.src_ip,
            dst: self.dst_ip,
            protocol,
            ttl: self.ttl,
            ident: self.ident,
            tos: self.tos,
            payload_len: l4_len,
        }
        .emit(&mut buf[ethernet::HEADER_LEN..])?;
        Ok(())
    }

    /// Completes a UDP frame whose payload is already at `buf[UDP_PAYLOAD_OFFSET..]`; returns
    /// the frame length. Writing the payload in place first avoids a copy.
    pub fn write_udp(
        &self,
        buf: &mut [u8],
        ports: UdpHeader,
        payload_len: usize,
    ) -> Result<usize, BuildError> {
        let payload = buf
            .get(UDP_PAYLOAD_OFFSET..UDP_PAYLOAD_OFFSET.saturating_add(payload_len))
            .map_or(Checksum::new(), |p| Checksum::new().add_bytes(p));
        self.write_udp_summed(buf, ports, payload_len, payload)
    }

    /// Builds a UDP frame around a copy of `payload`; returns the frame length.
    pub fn build_udp(
        &self,
        buf: &mut [u8],
        ports: UdpHeader,
        payload: &[u8],
    ) -> Result<usize, BuildError> {
        need(buf, UDP_PAYLOAD_OFFSET + payload.len())?;
        buf[UDP_PAYLOAD_OFFSET..UDP_PAYLOAD_OFFSET + payload.len()].copy_from_slice(payload);
        // Summed from the source, which the copy just brought into the cache: reading the copy
        // back would wait for its stores to reach a buffer another CPU last held.
        let sum = Checksum::new().add_bytes(payload);
        self.write_udp_summed(buf, ports, payload.len(), sum)
    }

    /// As [`Ipv4FrameSpec::write_udp`], given the payload's checksum sum.
    fn write_udp_summed(
        &self,
        buf: &mut [u8],
        ports: UdpHeader,
        payload_len: usize,
        payload: Checksum,
    ) -> Result<usize, BuildError> {
        let l4_len = ports
            .emit_summed(
                l4_part(buf, udp::HEADER_LEN.saturating_add(payload_len))?,
                payload_len,
                payload,
                self.src_ip,
                self.dst_ip,
            )
            .map_err(|e| offset_error(e, L4_OFFSET))?;
        self.emit_l2_l3(buf, PROTO_UDP, l4_len)?;
        Ok(L4_OFFSET + l4_len)
    }

    /// Completes a TCP frame whose payload is already at
    /// `buf[L4_OFFSET + header.header_len()..]`; returns the frame length.
    pub fn write_tcp(
        &self,
        buf: &mut [u8],
        header: &TcpHeader,
        payload_len: usize,
    ) -> Result<usize, BuildError> {
        let l4_len = header
            .emit(
                l4_part(buf, header.header_len().saturating_add(payload_len))?,
                payload_len,
                self.src_ip,
                self.dst_ip,
            )
            .map_err(|e| offset_error(e, L4_OFFSET))?;
        self.emit_l2_l3(buf, PROTO_TCP, l4_len)?;
        Ok(L4_OFFSET + l4_len)
    }

    /// Completes a TCP frame whose whole segment (header with checksum, and payload) is already
    /// at `buf[L4_OFFSET..L4_OFFSET + segment_len]`, as a sans-I/O TCP engine writes it: only the
    /// Ethernet and IPv4 headers are written. Returns the frame length.
    pub fn wrap_tcp_segment(
        &self,
        buf: &mut [u8],
        segment_len: usize,
    ) -> Result<usize, BuildError> {
        need(buf, L4_OFFSET.saturating_add(segment_len))?;
        self.emit_l2_l3(buf, PROTO_TCP, segment_len)?;
        Ok(L4_OFFSET + segment_len)
    }

    /// Builds a TCP frame around a copy of `payload`; returns the frame length.
    pub fn build_tcp(
        &self,
        buf: &mut [u8],
        header: &TcpHeader,
        payload: &[u8],
    ) -> Result<usize, BuildError> {
        let at = L4_OFFSET + header.header_len();
        need(buf, at + payload.len())?;
        buf[at..at + payload.len()].copy_from_slice(payload);
        self.write_tcp(buf, header, payload.len())
    }

    /// Completes an ICMP echo frame whose payload is already at `buf[ICMP_PAYLOAD_OFFSET..]`;
    /// returns the frame length.
    pub fn write_icmp_echo(
        &self,
        buf: &mut [u8],
        header: IcmpEchoHeader,
        payload_len: usize,
    ) -> Result<usize, BuildError> {
        let l4_len = header
            .emit(
                l4_part(buf, icmp::HEADER_LEN.saturating_add(payload_len))?,
                payload_len,
            )
            .map_err(|e| offset_error(e, L4_OFFSET))?;
        self.emit_l2_l3(buf, PROTO_ICMP, l4_len)?;
        Ok(L4_OFFSET + l4_len)
    }

    /// Builds an ICMP echo frame around a copy of `payload`; returns the frame length.
    pub fn build_icmp_echo(
        &self,
        buf: &mut [u8],
        header: IcmpEchoHeader,
        payload: &[u8],
    ) -> Result<usize, BuildError> {
        need(buf, ICMP_PAYLOAD_OFFSET + payload.len())?;
        buf[ICMP_PAYLOAD_OFFSET..ICMP_PAYLOAD_OFFSET + payload.len()].copy_from_slice(payload);
        self.write_icmp_echo(buf, header, payload.len())
    }

    /// The spec for answering a packet that arrived with `eth` and `ip`: addresses swapped.
    pub fn reply_to(eth: &EthernetFrame<'_>, ip: &Ipv4Packet<'_>, ttl: u8, ident: u16) -> Self {
        Ipv4FrameSpec {
            src_mac: eth.dst(),
            dst_mac: eth.src(),
            src_ip: ip.dst(),
            dst_ip: ip.src(),
            ttl,
            ident,
            tos: 0,
        }
    }
}

/// The transport part of a frame buffer.
fn l4_part(buf: &mut [u8], l4_len: usize) -> Result<&mut [u8], BuildError> {
    let available = buf.len();
    buf.get_mut(L4_OFFSET..).ok_or(BuildError::BufferTooSmall {
        needed: L4_OFFSET.saturating_add(l4_len),
        available,
    })
}

/// Reports buffer sizes of a transport builder in terms of the whole frame buffer.
fn offset_error(e: BuildError, offset: usize) -> BuildError {
    match e {
        BuildError::BufferTooSmall { needed, available } => BuildError::BufferTooSmall {
            needed: needed + offset,
            available: available + offset,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmp::EchoKind;
    use crate::tcp::TcpFlags;

    const SPEC: Ipv4FrameSpec = Ipv4FrameSpec {
        src_mac: MacAddr([0x02, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([0x02, 0, 0, 0, 0, 2]),
        src_ip: Ipv4Addr::new(10, 0, 0, 1),
        dst_ip: Ipv4Addr::new(10, 0, 0, 2),
        ttl: 64,
        ident: 9,
        tos: 0,
    };

    #[test]
    fn udp_frame_parse_and_classify() {
        let mut buf = [0u8; 128];
        let ports = UdpHeader {
            src_port: 1111,
            dst_port: 2222,
        };
        let n = SPEC
            .build_udp(&mut buf, ports, b"0123456789abcdefghijkl")
            .unwrap();
        assert_eq!(n, 64);
        let f = parse_frame(&buf[..n]).unwrap();
        assert_eq!(f.eth.dst(), SPEC.dst_mac);
        let Packet::Udp { ip, udp } = f.packet else {
            panic!("{:?}", f.packet)
        };
        assert_eq!(
            (ip.src(), ip.dst(), ip.ttl()),
            (SPEC.src_ip, SPEC.dst_ip, 64)
        );
        assert_eq!(udp.payload(), b"0123456789abcdefghijkl");

        let c = classify(&buf[..n]).unwrap();
        assert_eq!((c.dst_mac, c.src_mac), (SPEC.dst_mac, SPEC.src_mac));
        let flow = FiveTuple {
            src_ip: SPEC.src_ip,
            dst_ip: SPEC.dst_ip,
            src_port: 1111,
            dst_port: 2222,
            protocol: PROTO_UDP,
        };
        assert_eq!(c.class, FrameClass::Flow(flow));
        assert_eq!(flow.reversed().reversed(), flow);

        // Ethernet padding after the IP packet is tolerated by both paths.
        let f = parse_frame(&buf[..n + 10]).unwrap();
        assert!(matches!(f.packet, Packet::Udp { udp, .. } if udp.payload().len() == 22));
        assert!(classify(&buf[..n + 10]).is_ok());
    }

    #[test]
    fn a_segment_written_in_place_is_wrapped_into_the_same_frame() {
        let h = TcpHeader {
            src_port: 5000,
            dst_port: 80,
            seq: 7,
            ack: 9,
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 100,
            ..Default::default()
        };
        let mut built = [0u8; 128];
        let n = SPEC.build_tcp(&mut built, &h, b"payload").unwrap();
        // As an engine does: the segment first, at the L4 offset, then the headers around it.
        let mut wrapped = [0u8; 128];
        let at = L4_OFFSET + h.header_len();
        wrapped[at..at + 7].copy_from_slice(b"payload");
        let seg = h
            .emit(&mut wrapped[L4_OFFSET..], 7, SPEC.src_ip, SPEC.dst_ip)
            .unwrap();
        assert_eq!(SPEC.wrap_tcp_segment(&mut wrapped, seg).unwrap(), n);
        assert_eq!(wrapped[..n], built[..n]);
        assert!(parse_frame(&wrapped[..n]).is_ok());
        assert!(matches!(
            SPEC.wrap_tcp_segment(&mut wrapped[..40], seg),
            Err(BuildError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn only_segments_with_nothing_but_an_acknowledgment_are_bare_acks() {
        let is_bare_tcp_ack = |frame: &[u8]| classify(frame).is_ok_and(|c| c.bare_tcp_ack);
        let frame = |flags: TcpFlags, payload: &[u8], sack: bool| {
            let mut buf = [0u8; 128];
            let mut h = TcpHeader {
                src_port: 5000,
                dst_port: 80,
                seq: 1,
                ack: 2,
                flags,
                window: 100,
                ..Default::default()
            };
            h.options.timestamps = Some(crate::tcp::Timestamps { tsval: 1, tsecr: 2 });
            if sack {
                h.options.sack.push(10, 20);
            }
            let n = SPEC.build_tcp(&mut buf, &h, payload).unwrap();
            buf[..n].to_vec()
        };
        assert!(is_bare_tcp_ack(&frame(TcpFlags::ACK, b"", false)));
        assert!(is_bare_tcp_ack(&frame(TcpFlags::ACK, b"", true)));
        assert!(is_bare_tcp_ack(&frame(
            TcpFlags::ACK | TcpFlags::PSH,
            b"",
            false
        )));
        assert!(!is_bare_tcp_ack(&frame(TcpFlags::ACK, b"x", false)));
        for other in [TcpFlags::SYN, TcpFlags::FIN, TcpFlags::RST, TcpFlags::URG] {
            assert!(!is_bare_tcp_ack(&frame(TcpFlags::ACK | other, b"", false)));
        }
        assert!(!is_bare_tcp_ack(&frame(TcpFlags::default(), b"", false)));
        // Ethernet padding after the IP packet is not payload.
        let mut padded = frame(TcpFlags::ACK, b"", false);
        padded.extend_from_slice(&[0; 6]);
        assert!(is_bare_tcp_ack(&padded));
        // Not TCP, or cut short.
        let mut buf = [0u8; 128];
        let n = SPEC
            .build_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2,
                },
                b"",
            )
            .unwrap();
        assert!(!is_bare_tcp_ack(&buf[..n]));
        let ack = frame(TcpFlags::ACK, b"", false);
        for len in 0..ack.len() {
            assert!(!is_bare_tcp_ack(&ack[..len]), "{len} bytes");
        }
    }

    #[test]
    fn tcp_and_icmp_frames() {
        let mut buf = [0u8; 128];
        let h = TcpHeader {
            src_port: 5000,
            dst_port: 80,
            seq: 1,
            ack: 2,
            flags: TcpFlags::ACK,
            window: 100,
            ..Default::default()
        };
        let n = SPEC.build_tcp(&mut buf, &h, b"GET /").unwrap();
        let f = parse_frame(&buf[..n]).unwrap();
        let Packet::Tcp { tcp, .. } = f.packet else {
            panic!()
        };
        assert_eq!((tcp.seq(), tcp.ack(), tcp.payload()), (1, 2, &b"GET /"[..]));
        let FrameClass::Flow(t) = classify(&buf[..n]).unwrap().class else {
            panic!()
        };
        assert_eq!((t.src_port, t.dst_port, t.protocol), (5000, 80, PROTO_TCP));

        let n = SPEC
            .build_icmp_echo(
                &mut buf,
                IcmpEchoHeader {
                    kind: EchoKind::Request,
                    ident: 3,
                    seq: 4,
                },
                b"ping",
            )
            .unwrap();
        let f = parse_frame(&buf[..n]).unwrap();
        let Packet::Icmp { ip, icmp } = f.packet else {
            panic!()
        };
        assert_eq!(
            (icmp.ident(), icmp.seq(), icmp.payload()),
            (3, 4, &b"ping"[..])
        );
        assert_eq!(
            classify(&buf[..n]).unwrap().class,
            FrameClass::Icmp {
                src: SPEC.src_ip,
                dst: SPEC.dst_ip
            }
        );
        // Answer it.
        let reply = Ipv4FrameSpec::reply_to(&f.eth, &ip, 64, 0);
        let mut out = [0u8; 128];
        let rn = reply
            .build_icmp_echo(&mut out, icmp.reply_header(), icmp.payload())
            .unwrap();
        let r = parse_frame(&out[..rn]).unwrap();
        let Packet::Icmp { ip, icmp } = r.packet else {
            panic!()
        };
        assert_eq!(
            (ip.src(), ip.dst(), icmp.kind()),
            (SPEC.dst_ip, SPEC.src_ip, EchoKind::Reply)
        );
        assert_eq!(r.eth.dst(), SPEC.src_mac);
    }

    #[test]
    fn arp_frames() {
        let mut buf = [0u8; 64];
        let req = ArpPacket::request(SPEC.src_mac, SPEC.src_ip, SPEC.dst_ip);
        let n = req.emit_frame(&mut buf).unwrap();
        let Packet::Arp(a) = parse_frame(&buf[..n]).unwrap().packet else {
            panic!()
        };
        assert_eq!(a, req);
        let c = classify(&buf[..n]).unwrap();
        assert_eq!(c.dst_mac, MacAddr::BROADCAST);
        assert_eq!(c.class, FrameClass::Arp(req));
    }

    #[test]
    fn classify_skips_l4_checksums_but_parse_does_not() {
        let mut buf = [0u8; 128];
        let n = SPEC
            .build_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2,
                },
                b"data",
            )
            .unwrap();
        buf[n - 1] ^= 0xff;
        assert!(classify(&buf[..n]).is_ok());
        assert_eq!(
            parse_frame(&buf[..n]).unwrap_err(),
            DropReason::BadUdpChecksum
        );
    }

    #[test]
    fn dispatch_errors() {
        let mut buf = [0u8; 128];
        let n = SPEC
            .build_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2,
                },
                b"",
            )
            .unwrap();
        // IPv6 and 802.3 length-field frames.
        for et in [0x86ddu16, 0x0040] {
            let mut b = buf;
            b[12..14].copy_from_slice(&et.to_be_bytes());
            assert_eq!(
                parse_frame(&b[..n]).unwrap_err(),
                DropReason::UnsupportedEthertype
            );
            assert_eq!(
                classify(&b[..n]).unwrap_err(),
                DropReason::UnsupportedEthertype
            );
        }
        let mut b = buf;
        b[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        assert_eq!(classify(&b[..n]).unwrap_err(), DropReason::VlanTagged);

        // IGMP (protocol 2) is well-formed IPv4 but unsupported.
        let mut b = buf;
        b[14 + 9] = 2;
        let h = &mut b[14..34];
        h[10..12].fill(0);
        let c = crate::checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            parse_frame(&b[..n]).unwrap_err(),
            DropReason::UnsupportedProtocol
        );
        assert_eq!(
            classify(&b[..n]).unwrap_err(),
            DropReason::UnsupportedProtocol
        );

        // Truncation at every header boundary.
        for (len, want) in [
            (13, DropReason::Truncated),
            (14 + 19, DropReason::Truncated),
        ] {
            assert_eq!(parse_frame(&buf[..len]).unwrap_err(), want, "len {len}");
            assert_eq!(classify(&buf[..len]).unwrap_err(), want, "len {len}");
        }
        // The IP total length still claims the UDP header, so cutting it short is a length lie.
        assert_eq!(
            parse_frame(&buf[..n - 1]).unwrap_err(),
            DropReason::BadTotalLength
        );
        assert_eq!(
            classify(&buf[..n - 1]).unwrap_err(),
            DropReason::BadTotalLength
        );
    }

    #[test]
    fn classify_needs_fixed_transport_header() {
        // An IPv4 packet that claims TCP but carries only 8 bytes of it.
        let mut buf = [0u8; 64];
        let udp_n = SPEC
            .build_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2,
                },
                b"",
            )
            .unwrap();
        let mut ip = [0u8; 20];
        Ipv4Header {
            src: SPEC.src_ip,
            dst: SPEC.dst_ip,
            protocol: PROTO_TCP,
            ttl: 9,
            ident: 0,
            tos: 0,
            payload_len: 8,
        }
        .emit(&mut ip)
        .unwrap();
        buf[14..34].copy_from_slice(&ip);
        assert_eq!(classify(&buf[..udp_n]).unwrap_err(), DropReason::Truncated);
        assert_eq!(
            parse_frame(&buf[..udp_n]).unwrap_err(),
            DropReason::Truncated
        );
    }

    #[test]
    fn builders_report_frame_sizes() {
        let mut buf = [0u8; 50];
        assert_eq!(
            SPEC.build_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2
                },
                &[0; 9]
            ),
            Err(BuildError::BufferTooSmall {
                needed: 51,
                available: 50
            })
        );
        assert_eq!(
            SPEC.write_udp(
                &mut buf,
                UdpHeader {
                    src_port: 1,
                    dst_port: 2
                },
                9
            ),
            Err(BuildError::BufferTooSmall {
                needed: 51,
                available: 50
            })
        );
        assert_eq!(
            SPEC.write_udp(
                &mut buf[..10],
                UdpHeader {
                    src_port: 1,
                    dst_port: 2
                },
                0
            ),
            Err(BuildError::BufferTooSmall {
                needed: 42,
                available: 10
            })
        );
    }
}
