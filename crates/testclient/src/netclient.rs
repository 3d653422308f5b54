//! Packet modes of the ABI test client: a kthread that holds receive buffers, echoes, pings,
//! spoofs or sends bad descriptors, and a two-endpoint packet-rate benchmark of iokerneld's
//! switch. Everything goes through the shared-memory rings exactly as a runtime's would.
//!
//! Buffers are 2 KiB slices of the packet area: the first [`RX_BUFFERS`] are posted for
//! receiving, the rest are for sending.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use corral_abi::control::{NetIdentity, Registration, Reply, Request};
use corral_abi::{Command, Consumer, Producer, Region, RingKind, Slot, flags};
use corral_wire::udp::UdpHeader;
use corral_wire::{ArpOp, ArpPacket, FrameClass, Ipv4FrameSpec, MacAddr, classify};

use crate::client::{self, RegionFile};
use corral_iokernel::sys;

/// Bytes per buffer: corral-abi's packet buffer size, as a runtime uses.
pub const BUFFER_SIZE: u64 = corral_abi::FRAME_CAPACITY as u64;
/// Buffers posted for receiving per kthread.
pub const RX_BUFFERS: u64 = 128;
/// Buffers for sending per kthread.
pub const TX_BUFFERS: u64 = 64;
/// Packet area of a client region with networking.
pub const PACKET_AREA: u64 = (RX_BUFFERS + TX_BUFFERS) * BUFFER_SIZE;

/// UDP port pings are sent from and to.
pub const PING_PORT: u16 = 7;

/// What a packet-mode kthread does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMode {
    /// Send every frame back to where it came from (addresses and ports swapped), answer ARP
    /// requests for its address.
    Echo,
    /// Send `count` UDP frames to the peer and check that each comes back intact.
    Ping,
    /// Send `count` frames to the peer with another source MAC, another source IPv4 address,
    /// or a lying ARP sender, in turn.
    Spoof,
    /// Send `count` `TxPacket`s naming bytes outside the packet area.
    OobTx,
    /// Post a receive buffer outside the packet area.
    OobPost,
}

/// Packet-mode settings.
#[derive(Clone, Copy, Debug)]
pub struct NetOptions {
    pub mode: NetMode,
    pub peer: Option<NetIdentity>,
    pub count: u64,
    pub payload_len: usize,
}

/// A kthread's view of its rings and buffers.
struct Endpoint<'a> {
    region: Region<'a>,
    ingress: Consumer<'a>,
    commands: Producer<'a>,
    packets: Producer<'a>,
    area: *mut u8,
    identity: NetIdentity,
    /// Receive buffers to post when the command ring has room.
    to_post: Vec<u64>,
    free_tx: Vec<u64>,
}

impl Endpoint<'_> {
    /// The `len` bytes at `offset` in the packet area, for a buffer this kthread owns now.
    fn buffer(&mut self, offset: u64, len: usize) -> &mut [u8] {
        let end = offset + len as u64;
        assert!(
            end <= self.region.packet_area().size,
            "buffer outside the area"
        );
        // SAFETY: the range lies inside the packet area (checked above) of a mapping that lives
        // as long as the region; the buffer is this kthread's alone at this point (not posted,
        // or returned by iokerneld with RxPacket/TxCompletion, whose ring ordering makes its
        // writes visible), and the slice dies before the buffer is handed over again.
        unsafe { std::slice::from_raw_parts_mut(self.area.add(offset as usize), len) }
    }

    fn post_pending(&mut self) {
        while let Some(&offset) = self.to_post.last() {
            let slot = Slot::packet(Command::RxBufferPost, offset, BUFFER_SIZE as u32);
            if self.commands.try_push(slot).is_err() {
                break;
            }
            self.to_post.pop();
        }
    }

    fn send(&mut self, offset: u64, len: usize) -> bool {
        self.packets
            .try_push(Slot::packet(Command::TxPacket, offset, len as u32))
            .is_ok()
    }
}

/// Counters of a packet-mode kthread, printed as its last line.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    received: u64,
    sent: u64,
    completed: u64,
    dropped: u64,
    intact: u64,
}

/// Turns a received frame into its echo in place; returns the length to send, or `None` to
/// drop it.
fn echo(buf: &mut [u8], len: usize, me: NetIdentity) -> Option<usize> {
    let class = classify(&buf[..len]).ok()?;
    let frame = buf;
    match class.class {
        FrameClass::Arp(arp) => {
            if arp.op != ArpOp::Request || arp.target_ip.octets() != me.ipv4 {
                return None;
            }
            arp.reply(MacAddr(me.mac)).emit_frame(frame).ok()
        }
        FrameClass::Flow(_) | FrameClass::Icmp { .. } => {
            let (src, dst) = (class.src_mac.0, class.dst_mac.0);
            frame[0..6].copy_from_slice(&src);
            frame[6..12].copy_from_slice(&dst);
            // Swapping addresses and ports leaves every checksum as it was: each sums the same
            // words in another order.
            let (a, b) = frame[26..34].split_at_mut(4);
            a.swap_with_slice(b);
            if let FrameClass::Flow(_) = class.class {
                let l4 = 14 + usize::from(frame[14] & 0x0f) * 4;
                let (a, b) = frame[l4..l4 + 4].split_at_mut(2);
                a.swap_with_slice(b);
            }
            Some(len)
        }
    }
}

fn ping_payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

fn udp_frame(buf: &mut [u8], from: NetIdentity, to: NetIdentity, payload: &[u8]) -> usize {
    let spec = Ipv4FrameSpec {
        src_mac: MacAddr(from.mac),
        dst_mac: MacAddr(to.mac),
        src_ip: Ipv4Addr::from(from.ipv4),
        dst_ip: Ipv4Addr::from(to.ipv4),
        ttl: 64,
        ident: 0,
        tos: 0,
    };
    let ports = UdpHeader {
        src_port: PING_PORT,
        dst_port: PING_PORT,
    };
    spec.build_udp(buf, ports, payload)
        .expect("a ping fits a buffer")
}

/// The body of a packet-mode kthread (client kthread 0). `wait` blocks until the next wake-up
/// and returns `false` once the client stops; `emit` prints a line.
pub(crate) fn kthread_main(
    region: Region<'_>,
    identity: NetIdentity,
    options: NetOptions,
    wait: &dyn Fn() -> bool,
    stopping: &dyn Fn() -> bool,
    emit: &dyn Fn(String),
) {
    let Some(view) = region.kthread(0) else {
        return;
    };
    let area = region
        .raw()
        .as_ptr()
        .wrapping_add(region.packet_area().offset as usize);
    let mut ep = Endpoint {
        ingress: view.ingress_consumer(),
        commands: view.egress_command_producer(),
        packets: view.egress_packet_producer(),
        region: region.clone(),
        area,
        identity,
        to_post: (0..RX_BUFFERS).map(|i| i * BUFFER_SIZE).collect(),
        free_tx: (RX_BUFFERS..RX_BUFFERS + TX_BUFFERS)
            .map(|i| i * BUFFER_SIZE)
            .collect(),
    };
    if options.mode == NetMode::OobPost {
        let beyond = region.packet_area().size;
        let _ = ep.commands.try_push(Slot::packet(
            Command::RxBufferPost,
            beyond,
            BUFFER_SIZE as u32,
        ));
        emit("posted out-of-bounds buffer".into());
    } else {
        ep.post_pending();
    }
    let mut tally = Tally::default();
    let mut next_seq = 0u64;
    let mut done_reported = false;
    // Pings and spoofs are sent as soon as the kthread first runs; a core is asked for by
    // handing work to the shared queue, as a runtime does for work from outside its kthreads.
    if matches!(
        options.mode,
        NetMode::Ping | NetMode::Spoof | NetMode::OobTx
    ) {
        view.positions().shared_tail.fetch_add(1, Ordering::AcqRel);
    }
    let k0 = view.positions();
    while wait() {
        let tail = k0.shared_tail.load(Ordering::Acquire);
        k0.shared_head.store(tail, Ordering::Release);
        let mut preempted = false;
        let mut idle_since = Instant::now();
        loop {
            if stopping() {
                return;
            }
            ep.post_pending();
            let mut progress = false;
            while let Some(slot) = ep.ingress.try_pop() {
                progress = true;
                match slot.command_on(RingKind::Ingress) {
                    Ok(Command::RxPacket) => {
                        tally.received += 1;
                        let (offset, len) = (slot.payload(), slot.length() as usize);
                        match options.mode {
                            NetMode::Echo => {
                                let me = ep.identity;
                                let buf = ep.buffer(offset, BUFFER_SIZE as usize);
                                match echo(buf, len, me) {
                                    Some(n) if ep.send(offset, n) => tally.sent += 1,
                                    _ => ep.to_post.push(offset),
                                }
                            }
                            NetMode::Ping => {
                                let me = ep.identity;
                                let frame = ep.buffer(offset, len).to_vec();
                                let peer = options.peer.expect("ping needs a peer");
                                if let Some(seq) = check_pong(&frame, me, peer, options.payload_len)
                                {
                                    tally.intact += 1;
                                    emit(format!("pong {seq}"));
                                }
                                ep.to_post.push(offset);
                            }
                            _ => ep.to_post.push(offset),
                        }
                    }
                    Ok(Command::TxCompletion) => {
                        tally.completed += 1;
                        if slot.flags() & flags::DROPPED != 0 {
                            tally.dropped += 1;
                        }
                        let offset = slot.payload();
                        if offset < RX_BUFFERS * BUFFER_SIZE {
                            ep.to_post.push(offset);
                        } else if offset < PACKET_AREA {
                            ep.free_tx.push(offset);
                        }
                    }
                    Ok(Command::Preempt) => preempted = true,
                    _ => {}
                }
            }
            ep.post_pending();
            if next_seq < options.count && options.mode != NetMode::Echo {
                progress |= send_next(&mut ep, options, next_seq, &mut tally);
                if tally.sent > next_seq {
                    next_seq = tally.sent;
                }
            }
            let finished = options.mode != NetMode::Echo
                && options.mode != NetMode::OobPost
                && next_seq >= options.count
                && tally.completed >= options.count
                && (options.mode != NetMode::Ping || tally.received >= options.count);
            if finished && !done_reported {
                done_reported = true;
                emit(format!(
                    "done sent {} completed {} dropped {} received {} intact {}",
                    tally.sent, tally.completed, tally.dropped, tally.received, tally.intact
                ));
            }
            if progress {
                idle_since = Instant::now();
            }
            if preempted {
                let _ = ep.commands.try_push(Slot::new(Command::Yielded, 0, 0, 0));
                emit("yielded 0".into());
                break;
            }
            // Spin a little for more work before giving the core back, as a runtime does.
            if idle_since.elapsed() > Duration::from_micros(200) {
                let _ = ep.commands.try_push(Slot::value(Command::Park, 0));
                break;
            }
            core::hint::spin_loop();
        }
    }
}

/// Sends the next frame of a sending mode, if a buffer is free; returns whether it did.
fn send_next(ep: &mut Endpoint<'_>, options: NetOptions, seq: u64, tally: &mut Tally) -> bool {
    let Some(offset) = ep.free_tx.pop() else {
        return false;
    };
    let me = ep.identity;
    let peer = options.peer.unwrap_or(NetIdentity {
        mac: [0x02, 0, 0, 0, 0, 0x99],
        ipv4: [10, 99, 0, 99],
    });
    let (send_offset, len) = match options.mode {
        NetMode::Ping => {
            let payload = ping_payload(seq, options.payload_len.max(8));
            let mut payload = payload;
            payload[..8].copy_from_slice(&seq.to_be_bytes());
            let buf = ep.buffer(offset, BUFFER_SIZE as usize);
            (offset, udp_frame(buf, me, peer, &payload))
        }
        NetMode::Spoof => {
            let buf = ep.buffer(offset, BUFFER_SIZE as usize);
            let len = match seq % 3 {
                0 => {
                    let mut other = me;
                    other.mac[5] ^= 0x55;
                    udp_frame(buf, other, peer, b"spoofed source MAC")
                }
                1 => {
                    let mut other = me;
                    other.ipv4[3] ^= 0x55;
                    udp_frame(buf, other, peer, b"spoofed source IPv4")
                }
                _ => {
                    // An ARP announcement claiming the peer's address for this MAC: the
                    // classic way to steal another host's traffic.
                    let mut arp = ArpPacket::request(
                        MacAddr(me.mac),
                        Ipv4Addr::from(peer.ipv4),
                        Ipv4Addr::from(peer.ipv4),
                    );
                    arp.op = ArpOp::Reply;
                    arp.target_mac = MacAddr(peer.mac);
                    arp.emit_frame(buf).expect("an ARP frame fits a buffer")
                }
            };
            (offset, len)
        }
        NetMode::OobTx => {
            ep.free_tx.push(offset);
            // Past the end of the area, then a length running past it.
            let size = ep.region.packet_area().size;
            if seq.is_multiple_of(2) {
                (size + 64, 60)
            } else {
                (size - 100, 200)
            }
        }
        NetMode::Echo | NetMode::OobPost => {
            ep.free_tx.push(offset);
            return false;
        }
    };
    if ep.send(send_offset, len) {
        tally.sent += 1;
        true
    } else {
        if send_offset == offset {
            ep.free_tx.push(offset);
        }
        false
    }
}

/// The sequence number of a ping that came back with its addresses swapped and its payload
/// as sent.
fn check_pong(frame: &[u8], me: NetIdentity, peer: NetIdentity, payload_len: usize) -> Option<u64> {
    let class = classify(frame).ok()?;
    let FrameClass::Flow(flow) = class.class else {
        return None;
    };
    if class.dst_mac.0 != me.mac
        || class.src_mac.0 != peer.mac
        || flow.src_ip.octets() != peer.ipv4
        || flow.dst_ip.octets() != me.ipv4
    {
        return None;
    }
    let payload = frame.get(corral_wire::frame::UDP_PAYLOAD_OFFSET..)?;
    let seq = u64::from_be_bytes(payload.get(..8)?.try_into().ok()?);
    let mut expected = ping_payload(seq, payload_len.max(8));
    expected[..8].copy_from_slice(&seq.to_be_bytes());
    (payload.get(..expected.len())? == expected.as_slice()).then_some(seq)
}

/// Result of [`bench_pair`].
#[derive(Clone, Copy, Debug)]
pub struct BenchReport {
    pub seconds: f64,
    /// Frames B received.
    pub received: u64,
    /// Frames A sent that iokerneld completed without the DROPPED flag.
    pub sent: u64,
    /// Frames A sent that iokerneld dropped (no buffer or room at B).
    pub dropped: u64,
}

impl BenchReport {
    pub fn received_pps(&self) -> f64 {
        self.received as f64 / self.seconds
    }
}

/// One endpoint registered by the benchmark: its region and its connection.
struct BenchEndpoint {
    region_file: RegionFile,
    _conn: OwnedFd,
}

fn register_endpoint(
    socket: &std::path::Path,
    name: &str,
    tid: i32,
    net: NetIdentity,
    spinning: bool,
    area: u64,
) -> Result<BenchEndpoint, String> {
    let builder = corral_abi::RegionBuilder::new(1)
        .ingress_slots(1024)
        .egress_packet_slots(1024)
        .egress_command_slots(1024)
        .packet_area_size(area);
    let region_file = RegionFile::with_builder(builder, true).map_err(|e| e.to_string())?;
    let registration = Registration {
        name: name.into(),
        guaranteed_cores: u16::from(spinning),
        max_cores: 1,
        spinning_kthreads: u16::from(spinning),
        run_queue_capacity: 256,
        preemption: corral_abi::control::PreemptionMode::Cooperative,
        tids: vec![tid],
        net: Some(net),
    };
    let (conn, reply) = client::request(
        socket,
        &Request::Register(registration).encode(),
        &[region_file.memfd.as_fd()],
    )
    .map_err(|e| e.to_string())?;
    match reply {
        Reply::Registered { .. } => Ok(BenchEndpoint {
            region_file,
            _conn: conn,
        }),
        other => Err(format!("{name}: registration refused: {other:?}")),
    }
}

/// Measures iokerneld's local switching rate: endpoint A (which holds the one guaranteed,
/// spinning core) floods B with `frame_len`-byte UDP frames for `duration`, as fast as its
/// rings allow; B reposts every buffer it receives. Both endpoints' rings are driven by the
/// calling thread, which is A's kthread, so that the client side needs one core; B's kthread
/// is a thread that only sleeps (B never holds a core, so iokerneld delivers to its kthread 0
/// ring). Run iokerneld with `--nic none`.
pub fn bench_pair(
    socket: &std::path::Path,
    duration: Duration,
    frame_len: usize,
) -> Result<BenchReport, String> {
    let a_id = NetIdentity {
        mac: [0x02, 0xbe, 0x4c, 0, 0, 0x0a],
        ipv4: [10, 98, 0, 10],
    };
    let b_id = NetIdentity {
        mac: [0x02, 0xbe, 0x4c, 0, 0, 0x0b],
        ipv4: [10, 98, 0, 11],
    };
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || {
        let _ = tid_tx.send(sys::gettid());
        let _ = stop_rx.recv();
    });
    let b_tid = tid_rx.recv().map_err(|e| e.to_string())?;
    let buffers = 1024u64;
    let b = register_endpoint(socket, "bench-b", b_tid, b_id, false, buffers * BUFFER_SIZE)?;
    let a = register_endpoint(
        socket,
        "bench-a",
        sys::gettid(),
        a_id,
        true,
        buffers * BUFFER_SIZE,
    )?;
    let result = drive(&a, &b, a_id, b_id, buffers, duration, frame_len);
    drop(stop_tx);
    let _ = sleeper.join();
    result
}

fn drive(
    a: &BenchEndpoint,
    b: &BenchEndpoint,
    a_id: NetIdentity,
    b_id: NetIdentity,
    buffers: u64,
    duration: Duration,
    frame_len: usize,
) -> Result<BenchReport, String> {
    let ra = a
        .region_file
        .mapping
        .raw()
        .attach()
        .map_err(|e| e.to_string())?;
    let rb = b
        .region_file
        .mapping
        .raw()
        .attach()
        .map_err(|e| e.to_string())?;
    let (ka, kb) = (ra.kthread(0).unwrap(), rb.kthread(0).unwrap());
    let mut a_in = ka.ingress_consumer();
    let mut a_tx = ka.egress_packet_producer();
    let mut b_in = kb.ingress_consumer();
    let mut b_cmd = kb.egress_command_producer();
    // Wait for A's grant, which also pins this thread to the managed core.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(slot) = a_in.try_pop()
            && slot.command_on(RingKind::Ingress) == Ok(Command::Grant)
        {
            break;
        }
        if Instant::now() > deadline {
            return Err("endpoint A was not granted its core within 5 s".into());
        }
        std::thread::yield_now();
    }
    // Every A buffer carries the same frame, written once.
    let payload_len = frame_len.saturating_sub(corral_wire::frame::UDP_PAYLOAD_OFFSET);
    let mut template = vec![0u8; BUFFER_SIZE as usize];
    let len = udp_frame(&mut template, a_id, b_id, &vec![0x5a; payload_len]);
    let a_area = ra
        .raw()
        .as_ptr()
        .wrapping_add(ra.packet_area().offset as usize);
    for i in 0..buffers {
        // SAFETY: buffer i lies inside A's packet area and nobody else uses it yet.
        unsafe {
            std::ptr::copy_nonoverlapping(
                template.as_ptr(),
                a_area.add((i * BUFFER_SIZE) as usize),
                len,
            )
        };
    }
    let mut free: Vec<u64> = (0..buffers).map(|i| i * BUFFER_SIZE).collect();
    let mut to_post: Vec<u64> = (0..buffers).map(|i| i * BUFFER_SIZE).collect();
    let mut report = BenchReport {
        seconds: 0.0,
        received: 0,
        sent: 0,
        dropped: 0,
    };
    let mut batch = [Slot::default(); 64];
    let start = Instant::now();
    let mut iterations = 0u64;
    loop {
        iterations += 1;
        if iterations.is_multiple_of(1024) && start.elapsed() >= duration {
            break;
        }
        // B: repost what arrived.
        let n = b_in.pop_batch(&mut batch);
        for slot in &batch[..n] {
            if slot.command() == Ok(Command::RxPacket) {
                report.received += 1;
                to_post.push(slot.payload());
            }
        }
        while let Some(&offset) = to_post.last() {
            let slot = Slot::packet(Command::RxBufferPost, offset, BUFFER_SIZE as u32);
            if b_cmd.try_push(slot).is_err() {
                break;
            }
            to_post.pop();
        }
        // A: take completions back, send again.
        let n = a_in.pop_batch(&mut batch);
        for slot in &batch[..n] {
            if slot.command() == Ok(Command::TxCompletion) {
                if slot.flags() & flags::DROPPED != 0 {
                    report.dropped += 1;
                } else {
                    report.sent += 1;
                }
                free.push(slot.payload());
            }
        }
        // Newest free buffer first, so that those pushed are the last ones in `free`.
        let n = free.len().min(batch.len());
        for (i, offset) in free.iter().rev().take(n).enumerate() {
            batch[i] = Slot::packet(Command::TxPacket, *offset, len as u32);
        }
        let pushed = a_tx.push_batch(&batch[..n]);
        free.truncate(free.len() - pushed);
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}
