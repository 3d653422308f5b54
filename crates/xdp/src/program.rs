//! The steering program, as instructions: pure, so it is checked here without a kernel.
//!
//! For every frame the interface receives, it reads the IPv4 address the frame is for, looks it
//! up in the address map and, when it is there, redirects the frame to the AF_XDP socket of the
//! frame's receive queue (the XSKMAP entry at `rx_queue_index`). The address a frame is for is
//! an IPv4 packet's destination, or an Ethernet/IPv4 ARP packet's target protocol address
//! (requests for a registered address, and replies to it). Everything else, including frames
//! too short to hold what is read and registered frames on a queue without a socket, gets
//! `XDP_PASS`: the host's own traffic goes on to Linux untouched.
//!
//! ```text
//!         r6 = r1                        ; ctx, kept across the calls
//!         r2 = ctx->data ; r3 = ctx->data_end
//!         if r2 + 14 > r3 goto pass      ; an Ethernet header
//!         r5 = ethertype (as loaded: bytes 12..14 little-endian)
//!         if r5 == 0x0008 goto ipv4      ; 08 00
//!         if r5 != 0x0608 goto pass      ; 08 06
//!         if r2 + 42 > r3 goto pass      ; Ethernet + 28-byte ARP
//!         htype 1, ptype 0x0800, hlen 6, plen 4, or goto pass
//!         r5, r7 = target protocol address (bytes 38..40, 40..42)
//!         goto lookup
//! ipv4:   if r2 + 34 > r3 goto pass      ; Ethernet + 20-byte IPv4 header
//!         if version != 4 goto pass
//!         r5, r7 = destination address (bytes 30..32, 32..34)
//! lookup: key on the stack at r10 - 4 (two 16-bit stores: the address in wire order)
//!         if !map_lookup_elem(addresses, key) goto pass
//!         return redirect_map(sockets, ctx->rx_queue_index, XDP_PASS)
//! pass:   return XDP_PASS
//! ```
//!
//! Every packet access is at most 2 bytes wide at an even offset, so it is aligned wherever the
//! Ethernet header is (even on machines that want IP headers 4-aligned), and each is preceded
//! by a comparison of `data + end` with `data_end` that covers it, which is what the verifier
//! asks for. The last argument of `bpf_redirect_map` (Linux 5.3 and later) is the action when
//! the queue has no socket.

use crate::insn::{Alu, Asm, Cond, Insn, R0, R1, R2, R3, R4, R5, R6, R7, R10, Size};

/// `XDP_ABORTED`
pub const XDP_ABORTED: u32 = 0;
/// `XDP_DROP`
pub const XDP_DROP: u32 = 1;
/// `XDP_PASS`: on to Linux.
pub const XDP_PASS: u32 = 2;
/// `XDP_TX`
pub const XDP_TX: u32 = 3;
/// `XDP_REDIRECT`: to where the last redirect helper said.
pub const XDP_REDIRECT: u32 = 4;

/// `BPF_FUNC_map_lookup_elem`
pub const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_FUNC_redirect_map`
pub const HELPER_REDIRECT_MAP: i32 = 51;

/// Offsets in `struct xdp_md`, the program's context.
pub mod ctx {
    /// `data`: where the frame starts.
    pub const DATA: i16 = 0;
    /// `data_end`: one past its last byte.
    pub const DATA_END: i16 = 4;
    /// `rx_queue_index`: the receive queue it came from.
    pub const RX_QUEUE_INDEX: i16 = 16;
}

/// Ethernet header length.
const ETH_LEN: i32 = corral_wire::ethernet::HEADER_LEN as i32;
/// Offset of the EtherType.
const ETHERTYPE: i16 = 12;
/// EtherType IPv4 (08 00) as a little-endian 16-bit load reads it.
const ETHERTYPE_IPV4_LE: i32 = 0x0008;
/// EtherType ARP (08 06), likewise.
const ETHERTYPE_ARP_LE: i32 = 0x0608;
/// Offsets in an IPv4 packet after the Ethernet header.
const IPV4_VERSION_IHL: i16 = 14;
const IPV4_DST: i16 = 14 + 16;
const IPV4_MIN_END: i32 = ETH_LEN + corral_wire::ipv4::MIN_HEADER_LEN as i32;
/// Offsets in an Ethernet/IPv4 ARP packet after the Ethernet header.
const ARP_HTYPE: i16 = 14;
const ARP_PTYPE: i16 = 16;
const ARP_HLEN_PLEN: i16 = 18;
const ARP_TPA: i16 = 14 + 24;
const ARP_END: i32 = ETH_LEN + 28;
/// Hardware type 1 (00 01), protocol type IPv4 (08 00), lengths 6 and 4 (06 04), as 16-bit
/// little-endian loads read them.
const ARP_HTYPE_ETHER_LE: i32 = 0x0100;
const ARP_HLEN_PLEN_LE: i32 = 0x0406;
/// The key's place on the stack.
const KEY: i16 = -4;

/// The steering program for the address map open as `addr_map` (keys: IPv4 addresses, 4 bytes
/// in wire order) and the XSKMAP open as `xsk_map` (keys: receive queue numbers).
pub fn steering(addr_map: i32, xsk_map: i32) -> Vec<Insn> {
    let mut a = Asm::new();
    let pass = a.label();
    let ipv4 = a.label();
    let lookup = a.label();

    a.push(&[
        Insn::mov_reg(R6, R1),
        Insn::load(Size::W, R2, R6, ctx::DATA),
        Insn::load(Size::W, R3, R6, ctx::DATA_END),
    ]);
    // Each bounds check: r4 = data + end; if r4 > data_end goto pass.
    let bounds = |a: &mut Asm, end: i32| {
        a.push(&[Insn::mov_reg(R4, R2), Insn::alu_imm(Alu::Add, R4, end)]);
        a.jump_reg(Cond::Gt, R4, R3, pass);
    };
    bounds(&mut a, ETH_LEN);
    a.push(&[Insn::load(Size::H, R5, R2, ETHERTYPE)]);
    a.jump_imm(Cond::Eq, R5, ETHERTYPE_IPV4_LE, ipv4);
    a.jump_imm(Cond::Ne, R5, ETHERTYPE_ARP_LE, pass);

    // ARP.
    bounds(&mut a, ARP_END);
    for (off, want) in [
        (ARP_HTYPE, ARP_HTYPE_ETHER_LE),
        (ARP_PTYPE, ETHERTYPE_IPV4_LE),
        (ARP_HLEN_PLEN, ARP_HLEN_PLEN_LE),
    ] {
        a.push(&[Insn::load(Size::H, R5, R2, off)]);
        a.jump_imm(Cond::Ne, R5, want, pass);
    }
    a.push(&[
        Insn::load(Size::H, R5, R2, ARP_TPA),
        Insn::load(Size::H, R7, R2, ARP_TPA + 2),
    ]);
    a.ja(lookup);

    // IPv4.
    a.place(ipv4);
    bounds(&mut a, IPV4_MIN_END);
    a.push(&[
        Insn::load(Size::B, R5, R2, IPV4_VERSION_IHL),
        Insn::alu_imm(Alu::And, R5, 0xf0),
    ]);
    a.jump_imm(Cond::Ne, R5, 0x40, pass);
    a.push(&[
        Insn::load(Size::H, R5, R2, IPV4_DST),
        Insn::load(Size::H, R7, R2, IPV4_DST + 2),
    ]);

    // r5 and r7 hold the address's two halves, as they sit in the frame.
    a.place(lookup);
    a.push(&[
        Insn::store_reg(Size::H, R10, KEY, R5),
        Insn::store_reg(Size::H, R10, KEY + 2, R7),
    ]);
    a.push(&Insn::ld_map_fd(R1, addr_map));
    a.push(&[
        Insn::mov_reg(R2, R10),
        Insn::alu_imm(Alu::Add, R2, i32::from(KEY)),
        Insn::call(HELPER_MAP_LOOKUP_ELEM),
    ]);
    a.jump_imm(Cond::Eq, R0, 0, pass);
    a.push(&Insn::ld_map_fd(R1, xsk_map));
    a.push(&[
        Insn::load(Size::W, R2, R6, ctx::RX_QUEUE_INDEX),
        Insn::mov_imm(R3, XDP_PASS as i32),
        Insn::call(HELPER_REDIRECT_MAP),
        Insn::exit(),
    ]);

    a.place(pass);
    a.push(&[Insn::mov_imm(R0, XDP_PASS as i32), Insn::exit()]);
    a.finish()
        .expect("the steering program's labels are all placed once")
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::insn::Op;

    const ADDR_MAP: i32 = 11;
    const XSK_MAP: i32 = 12;

    /// What a register holds, as the verifier tracks it (loosely): a plain number, or a pointer
    /// into the context, the frame, the stack, or a map.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Val {
        Uninit,
        Scalar(u64),
        Ctx,
        Pkt(i64),
        PktEnd,
        Stack(i64),
        Map(i32),
        MapValue,
    }

    /// The world a run sees: registered addresses and the queues with a socket.
    struct World {
        addresses: HashSet<[u8; 4]>,
        sockets: HashSet<u32>,
    }

    /// Runs the program on `frame` received on `queue`; panics where the verifier would have
    /// refused what the run does (an out-of-bounds or untyped access).
    fn run(prog: &[Insn], world: &World, frame: &[u8], queue: u32) -> u32 {
        let mut r = [Val::Uninit; 11];
        r[1] = Val::Ctx;
        r[10] = Val::Stack(0);
        let mut stack = [0u8; 512];
        let mut stack_init = [false; 512];
        let mut pc = 0usize;
        let mut steps = 0;
        let scalar = |v: Val| match v {
            Val::Scalar(x) => x,
            other => panic!("{other:?} used as a number"),
        };
        loop {
            steps += 1;
            assert!(steps < 10_000, "runaway program");
            let insn = prog[pc];
            let (dst, src) = (insn.dst as usize, insn.src as usize);
            pc += 1;
            match insn.op() {
                Op::AluImm(Alu::Mov) => r[dst] = Val::Scalar(insn.imm as i64 as u64),
                Op::AluReg(Alu::Mov) => r[dst] = r[src],
                Op::AluImm(Alu::Add) => {
                    r[dst] = match r[dst] {
                        Val::Pkt(o) => Val::Pkt(o + i64::from(insn.imm)),
                        Val::Stack(o) => Val::Stack(o + i64::from(insn.imm)),
                        Val::Scalar(x) => Val::Scalar(x.wrapping_add(insn.imm as i64 as u64)),
                        other => panic!("arithmetic on {other:?}"),
                    }
                }
                Op::AluImm(op) => {
                    let x = scalar(r[dst]);
                    let k = insn.imm as i64 as u64;
                    r[dst] = Val::Scalar(match op {
                        Alu::And => x & k,
                        Alu::Or => x | k,
                        Alu::Lsh => x << k,
                        Alu::Rsh => x >> k,
                        Alu::Sub => x.wrapping_sub(k),
                        Alu::Add | Alu::Mov => unreachable!(),
                    });
                }
                Op::Load(size) => {
                    let n = size.bytes();
                    r[dst] = match r[src] {
                        Val::Ctx => match insn.off {
                            ctx::DATA => Val::Pkt(0),
                            ctx::DATA_END => Val::PktEnd,
                            ctx::RX_QUEUE_INDEX => Val::Scalar(u64::from(queue)),
                            off => panic!("context field at {off}"),
                        },
                        Val::Pkt(o) => {
                            let at = o + i64::from(insn.off);
                            assert!(
                                at >= 0 && at as usize + n <= frame.len(),
                                "frame read at {at}, {n} bytes, of {}",
                                frame.len()
                            );
                            let mut b = [0u8; 8];
                            b[..n].copy_from_slice(&frame[at as usize..at as usize + n]);
                            Val::Scalar(u64::from_le_bytes(b))
                        }
                        other => panic!("load through {other:?}"),
                    };
                }
                Op::StoreReg(size) => {
                    let Val::Stack(o) = r[dst] else {
                        panic!("store through {:?}", r[dst]);
                    };
                    let at = (512 + o + i64::from(insn.off)) as usize;
                    let n = size.bytes();
                    stack[at..at + n].copy_from_slice(&scalar(r[src]).to_le_bytes()[..n]);
                    stack_init[at..at + n].fill(true);
                }
                Op::LdImm64 => {
                    assert_eq!(insn.src, crate::insn::PSEUDO_MAP_FD);
                    r[dst] = Val::Map(insn.imm);
                    pc += 1;
                }
                Op::Ja => pc = (pc as i64 + i64::from(insn.off)) as usize,
                Op::JumpImm(cond) | Op::JumpReg(cond) => {
                    let b = match insn.op() {
                        Op::JumpImm(_) => Val::Scalar(insn.imm as i64 as u64),
                        _ => r[src],
                    };
                    let taken = match (r[dst], b) {
                        (Val::Scalar(x), Val::Scalar(y)) => cond.holds(x, y),
                        (Val::Pkt(o), Val::PktEnd) => cond.holds(o as u64, frame.len() as u64),
                        (Val::MapValue, Val::Scalar(0)) => cond.holds(1, 0),
                        (x, y) => panic!("comparing {x:?} with {y:?}"),
                    };
                    if taken {
                        pc = (pc as i64 + i64::from(insn.off)) as usize;
                    }
                }
                Op::Call => {
                    r[0] = match insn.imm {
                        HELPER_MAP_LOOKUP_ELEM => {
                            assert_eq!(r[1], Val::Map(ADDR_MAP), "lookup in the address map");
                            let Val::Stack(o) = r[2] else {
                                panic!("key pointer {:?}", r[2]);
                            };
                            let at = (512 + o) as usize;
                            assert!(stack_init[at..at + 4].iter().all(|&i| i), "key set");
                            let key: [u8; 4] = stack[at..at + 4].try_into().unwrap();
                            if world.addresses.contains(&key) {
                                Val::MapValue
                            } else {
                                Val::Scalar(0)
                            }
                        }
                        HELPER_REDIRECT_MAP => {
                            assert_eq!(r[1], Val::Map(XSK_MAP), "redirect to the XSKMAP");
                            let q = scalar(r[2]) as u32;
                            if world.sockets.contains(&q) {
                                Val::Scalar(u64::from(XDP_REDIRECT))
                            } else {
                                Val::Scalar(scalar(r[3]) & 3)
                            }
                        }
                        other => panic!("helper {other}"),
                    };
                    for reg in &mut r[1..=5] {
                        *reg = Val::Uninit;
                    }
                }
                Op::Exit => return scalar(r[0]) as u32,
                other => panic!("unexpected instruction {other:?} at {}", pc - 1),
            }
        }
    }

    const REGISTERED: [u8; 4] = [10, 1, 2, 3];
    const OTHER: [u8; 4] = [10, 1, 2, 4];

    fn world() -> World {
        World {
            addresses: [REGISTERED].into_iter().collect(),
            sockets: [0, 1].into_iter().collect(),
        }
    }

    fn ipv4(dst: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 1, 2, 9]);
        f[30..34].copy_from_slice(&dst);
        f
    }

    fn arp(target: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f[28..32].copy_from_slice(&[10, 1, 2, 9]);
        f[38..42].copy_from_slice(&target);
        f
    }

    fn steer(frame: &[u8], queue: u32) -> u32 {
        run(&steering(ADDR_MAP, XSK_MAP), &world(), frame, queue)
    }

    #[test]
    fn registered_ipv4_is_redirected() {
        assert_eq!(steer(&ipv4(REGISTERED), 0), XDP_REDIRECT);
        assert_eq!(steer(&ipv4(REGISTERED), 1), XDP_REDIRECT);
    }

    #[test]
    fn registered_address_on_a_queue_without_socket_passes() {
        assert_eq!(steer(&ipv4(REGISTERED), 2), XDP_PASS);
    }

    #[test]
    fn other_ipv4_passes() {
        assert_eq!(steer(&ipv4(OTHER), 0), XDP_PASS);
    }

    #[test]
    fn arp_for_a_registered_address_is_redirected() {
        assert_eq!(steer(&arp(REGISTERED), 0), XDP_REDIRECT);
        assert_eq!(steer(&arp(OTHER), 0), XDP_PASS);
    }

    #[test]
    fn arp_other_than_ethernet_ipv4_passes() {
        for (at, byte) in [(15, 6), (16, 0x86), (18, 8), (19, 16)] {
            let mut f = arp(REGISTERED);
            f[at] = byte;
            assert_eq!(steer(&f, 0), XDP_PASS, "byte {at} = {byte}");
        }
    }

    #[test]
    fn not_version_4_passes() {
        let mut f = ipv4(REGISTERED);
        f[14] = 0x65;
        assert_eq!(steer(&f, 0), XDP_PASS);
    }

    #[test]
    fn other_ethertypes_pass() {
        for ty in [[0x86, 0xdd], [0x81, 0x00], [0x88, 0xcc], [0x00, 0x08]] {
            let mut f = ipv4(REGISTERED);
            f[12..14].copy_from_slice(&ty);
            assert_eq!(steer(&f, 0), XDP_PASS, "{ty:?}");
        }
    }

    /// Every truncation of a registered frame passes without reading past its end.
    #[test]
    fn short_frames_pass_without_reading_past_the_end() {
        for full in [ipv4(REGISTERED), arp(REGISTERED)] {
            let need = if full[13] == 0x00 { 34 } else { 42 };
            for len in 0..need {
                assert_eq!(steer(&full[..len], 0), XDP_PASS, "length {len}");
            }
            assert_eq!(steer(&full[..need], 0), XDP_REDIRECT);
        }
    }

    #[test]
    fn a_few_dozen_instructions_ending_in_exit() {
        let prog = steering(ADDR_MAP, XSK_MAP);
        assert!(prog.len() < 64, "{} instructions", prog.len());
        assert_eq!(prog.last().unwrap().op(), Op::Exit);
        // Every jump lands inside the program, and never in the second slot of a map load.
        let second_slots: Vec<usize> = prog
            .iter()
            .enumerate()
            .filter(|(_, i)| i.op() == Op::LdImm64)
            .map(|(at, _)| at + 1)
            .collect();
        for (at, insn) in prog.iter().enumerate() {
            if matches!(insn.op(), Op::Ja | Op::JumpImm(_) | Op::JumpReg(_)) {
                let target = at as i64 + 1 + i64::from(insn.off);
                assert!((0..prog.len() as i64).contains(&target), "jump at {at}");
                assert!(!second_slots.contains(&(target as usize)), "jump at {at}");
            }
        }
        // Both maps are referenced by their descriptors.
        let fds: Vec<i32> = prog
            .iter()
            .filter(|i| i.op() == Op::LdImm64)
            .map(|i| i.imm)
            .collect();
        assert_eq!(fds, [ADDR_MAP, XSK_MAP]);
    }
}
