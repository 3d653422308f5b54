//! The TCP layer on frames in memory, against a peer that is another engine: demultiplexing,
//! listeners and cookies, RSTs for strays, the table bound, and the per-connection lock's
//! pending queue.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use corral_tcp::{Connection, Endpoints, State, TcpConfig, TcpDrop};
use corral_wire::frame::L4_OFFSET;
use corral_wire::{Ipv4FrameSpec, MacAddr, Packet, TcpFlags, TcpHeader, TcpOptionSet, parse_frame};

use super::TcpSettings;
use super::conn::Held;
use crate::net::config::NetConfig;
use crate::net::stack::{FRAME_CAPACITY, Link, MAX_FRAME, NetStack, StackDrop};

const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 7);
const PEER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 7]);
const T0: u64 = 1_000_000_000;

#[derive(Clone, Default)]
struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Link for Capture {
    fn transmit(
        &self,
        _may_block: bool,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<(), StackDrop> {
        let mut buf = vec![0u8; FRAME_CAPACITY];
        let n = build(&mut buf);
        if n > 0 {
            buf.truncate(n);
            self.frames.lock().unwrap().push(buf);
        }
        Ok(())
    }

    fn arm_timer(&self, _deadline: u64) {}
}

impl Capture {
    fn take(&self) -> Vec<Vec<u8>> {
        core::mem::take(&mut *self.frames.lock().unwrap())
    }
}

fn stack_with(tcp: TcpSettings) -> (NetStack, Capture) {
    let cap = Capture::default();
    let config = NetConfig::new(OUR_IP, 24)
        .static_arp(PEER_IP, PEER_MAC)
        .tcp(tcp);
    (NetStack::new(config, Box::new(cap.clone())), cap)
}

fn stack_without_time_wait() -> (NetStack, Capture) {
    stack_with(TcpSettings {
        tcp: TcpConfig {
            time_wait: 0,
            ..TcpConfig::default()
        },
        ..TcpSettings::default()
    })
}

/// The far end: an engine of its own, whose segments reach the stack as frames.
struct Peer {
    conn: Connection,
}

impl Peer {
    fn connect(port: u16, to_port: u16, now: u64) -> Peer {
        let ends = Endpoints {
            local: SocketAddrV4::new(PEER_IP, port),
            remote: SocketAddrV4::new(OUR_IP, to_port),
        };
        Peer {
            conn: Connection::connect(&TcpConfig::default(), ends, 1000, now),
        }
    }

    /// Frames of everything the peer wants to send.
    fn frames(&mut self, s: &NetStack, now: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let mut buf = vec![0u8; FRAME_CAPACITY];
            let Some(n) = self.conn.poll_transmit(now, &mut buf[L4_OFFSET..MAX_FRAME]) else {
                return out;
            };
            let len = spec(s).wrap_tcp_segment(&mut buf, n).unwrap();
            buf.truncate(len);
            out.push(buf);
        }
    }

    fn send(&mut self, s: &NetStack, now: u64) -> usize {
        let frames = self.frames(s, now);
        for f in &frames {
            assert_eq!(s.receive(f, now), None, "the stack took the segment");
        }
        frames.len()
    }

    /// Feeds the stack's frames to the peer; returns their TCP flags.
    fn absorb(&mut self, frames: &[Vec<u8>], now: u64) -> Vec<TcpFlags> {
        frames
            .iter()
            .map(|f| {
                let parsed = parse_frame(f).expect("the stack sends valid frames");
                assert_eq!(parsed.eth.dst(), PEER_MAC);
                let Packet::Tcp { tcp, .. } = parsed.packet else {
                    panic!("not TCP");
                };
                self.conn.on_segment(now, &tcp);
                tcp.flags()
            })
            .collect()
    }
}

fn spec(s: &NetStack) -> Ipv4FrameSpec {
    Ipv4FrameSpec {
        src_mac: PEER_MAC,
        dst_mac: s.mac(),
        src_ip: PEER_IP,
        dst_ip: OUR_IP,
        ttl: 64,
        ident: 1,
        tos: 0,
    }
}

/// A raw segment from the peer.
fn raw(s: &NetStack, src_port: u16, dst_port: u16, flags: TcpFlags, seq: u32) -> Vec<u8> {
    let h = TcpHeader {
        src_port,
        dst_port,
        seq,
        ack: 0,
        flags,
        window: 1000,
        urgent: 0,
        options: TcpOptionSet::default(),
    };
    let mut buf = vec![0u8; FRAME_CAPACITY];
    let n = spec(s).build_tcp(&mut buf, &h, &[]).unwrap();
    buf.truncate(n);
    buf
}

fn flags_of(frame: &[u8]) -> TcpFlags {
    match parse_frame(frame).unwrap().packet {
        Packet::Tcp { tcp, .. } => tcp.flags(),
        _ => panic!("not TCP"),
    }
}

/// Runs the handshake with a listener on `port`; returns the peer.
fn handshake(s: &NetStack, cap: &Capture, from: u16, port: u16) -> Peer {
    let mut peer = Peer::connect(from, port, T0);
    assert_eq!(peer.send(s, T0), 1);
    let flags = peer.absorb(&cap.take(), T0);
    assert_eq!(flags, [TcpFlags::SYN | TcpFlags::ACK]);
    assert_eq!(peer.conn.state(), State::Established);
    peer.send(s, T0);
    peer
}

#[test]
fn a_listener_completes_handshakes_and_queues_connections() {
    let (s, cap) = stack_with(TcpSettings::default());
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut peer = handshake(&s, &cap, 40000, 80);
    let conn = l.state.lock().queue.pop_front().expect("queued for accept");
    assert_eq!(conn.ends().remote, SocketAddrV4::new(PEER_IP, 40000));
    // Data from the peer reaches the connection.
    peer.conn.send(T0, b"hello").unwrap();
    peer.send(&s, T0);
    let mut held = Held::enter(&s, &conn);
    let mut buf = [0u8; 16];
    let n = held.conn().recv(T0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello");
    drop(held);
    let stats = s.stats().tcp;
    assert_eq!(stats.counters.passive_opens, 1);
    assert_eq!(stats.connections, 1);
    assert_eq!(stats.live[0].state, State::Established);
    assert_eq!(stats.live[0].stats.bytes_in, 5);
}

#[test]
fn strays_get_a_reset_and_are_counted() {
    let (s, cap) = stack_with(TcpSettings::default());
    // A SYN for a closed port: RST|ACK.
    s.receive(&raw(&s, 1234, 81, TcpFlags::SYN, 5), T0);
    let out = cap.take();
    assert_eq!(out.len(), 1);
    assert_eq!(flags_of(&out[0]), TcpFlags::RST | TcpFlags::ACK);
    // An ACK for nothing: a bare RST.
    s.receive(&raw(&s, 1234, 81, TcpFlags::ACK, 5), T0);
    assert_eq!(flags_of(&cap.take()[0]), TcpFlags::RST);
    // A RST for nothing: silence.
    s.receive(&raw(&s, 1234, 81, TcpFlags::RST, 5), T0);
    assert!(cap.take().is_empty());
    // A corrupted segment: counted by the parser and as a TCP drop, never answered.
    let mut bad = raw(&s, 1234, 81, TcpFlags::SYN, 5);
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    assert_eq!(s.receive(&bad, T0), Some("bad_tcp_checksum"));
    assert!(cap.take().is_empty());
    let tcp = s.stats().tcp;
    assert_eq!(tcp.drop_count("no_connection"), 3);
    assert_eq!(tcp.drop_count("bad_checksum"), 1);
    assert_eq!(tcp.counters.resets_sent, 2);
    assert_eq!(s.stats().drop_count("no_tcp"), 0);
}

#[test]
fn the_table_bound_refuses_new_connections() {
    let settings = TcpSettings {
        max_connections: 2,
        ..TcpSettings::default()
    };
    let (s, cap) = stack_with(settings);
    let _l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    handshake(&s, &cap, 40000, 80);
    handshake(&s, &cap, 40001, 80);
    let mut third = Peer::connect(40002, 80, T0);
    third.send(&s, T0);
    assert!(cap.take().is_empty(), "no SYN-ACK from a full table");
    let tcp = s.stats().tcp;
    assert_eq!(tcp.drop_count("table_full"), 1);
    assert_eq!(tcp.connections, 2);
    assert_eq!(tcp.counters.table_peak, 2);
}

#[test]
fn syn_cookies_admit_connections_past_the_backlog() {
    let settings = TcpSettings {
        syn_backlog: 0,
        ..TcpSettings::default()
    };
    let (s, cap) = stack_with(settings);
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut peer = Peer::connect(40000, 80, T0);
    peer.send(&s, T0);
    assert_eq!(s.stats().tcp.connections, 0, "a cookie keeps no state");
    let flags = peer.absorb(&cap.take(), T0);
    assert_eq!(flags, [TcpFlags::SYN | TcpFlags::ACK]);
    // Data rides on the completing ACK.
    peer.conn.send(T0, b"first").unwrap();
    peer.send(&s, T0);
    let conn = l.state.lock().queue.pop_front().expect("queued for accept");
    let mut held = Held::enter(&s, &conn);
    let mut buf = [0u8; 16];
    let n = held.conn().recv(T0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"first");
    drop(held);
    let tcp = s.stats().tcp;
    assert_eq!(tcp.counters.syn_cookies_sent, 1);
    assert_eq!(tcp.counters.syn_cookies_accepted, 1);
}

#[test]
fn segments_for_an_owned_connection_wait_and_keep_their_order() {
    let (s, cap) = stack_with(TcpSettings::default());
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut peer = handshake(&s, &cap, 40000, 80);
    let conn = l.state.lock().queue.pop_front().unwrap();
    cap.take();
    peer.conn.set_nodelay(true);
    // Another kthread owns the connection (here: this thread, as an application call would).
    let held = Held::enter(&s, &conn);
    let mut frames = Vec::new();
    for chunk in [&b"one "[..], b"two ", b"three"] {
        peer.conn.send(T0, chunk).unwrap();
        frames.extend(peer.frames(&s, T0));
    }
    assert_eq!(frames.len(), 3);
    for f in &frames {
        // The receive path does not wait: the segment is queued for the owner.
        assert_eq!(s.receive(f, T0), None);
    }
    assert!(cap.take().is_empty(), "nothing processed while owned");
    // Giving ownership up processes them, oldest first.
    held.release();
    let mut held = Held::enter(&s, &conn);
    let mut buf = [0u8; 32];
    let n = held.conn().recv(T0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"one two three");
    assert_eq!(held.conn().stats().ooo_segments, 0, "arrived in order");
    drop(held);
    assert_eq!(s.stats().tcp.pending_overflow, 0);
}

#[test]
fn a_receive_batch_gets_its_acks_at_its_end() {
    // Without timestamps: a release stamps what it sends with the runtime's clock, which this
    // test's peer, on a clock of its own, would take for an old segment (PAWS).
    let (s, cap) = stack_with(TcpSettings {
        tcp: TcpConfig {
            timestamps: false,
            ..TcpConfig::default()
        },
        ..TcpSettings::default()
    });
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut peer = handshake(&s, &cap, 40000, 80);
    let conn = l.state.lock().queue.pop_front().unwrap();
    cap.take();
    let data = vec![0x42u8; 10 * 1460];
    peer.conn.send(T0, &data).unwrap();
    let frames = peer.frames(&s, T0);
    assert_eq!(frames.len(), 10, "the peer's initial window");
    let (first, second) = frames.split_at(6);
    for f in first {
        assert_eq!(s.receive_in_batch(f, T0), None);
    }
    assert!(cap.take().is_empty(), "no ACK before the batch ends");
    s.end_receive_batch(T0);
    let acks = cap.take();
    assert_eq!(
        peer.absorb(&acks, T0),
        [TcpFlags::ACK],
        "one ACK for the batch"
    );
    assert_eq!(peer.conn.bytes_in_flight(), 4 * 1460);
    // A batch whose end finds the connection owned elsewhere (an application call): the
    // owner's release sends the ACK.
    for f in second {
        assert_eq!(s.receive_in_batch(f, T0), None);
    }
    let held = Held::enter(&s, &conn);
    s.end_receive_batch(T0);
    assert!(cap.take().is_empty(), "the owner has the connection");
    held.release();
    assert_eq!(peer.absorb(&cap.take(), T0), [TcpFlags::ACK]);
    assert_eq!(peer.conn.bytes_in_flight(), 0);
    // The same when the owner is a reader about to block: it may not give ownership up with
    // the ACK still owed.
    peer.conn.send(T0, &data[..2 * 1460]).unwrap();
    for f in peer.frames(&s, T0) {
        assert_eq!(s.receive_in_batch(&f, T0), None);
    }
    let held = Held::enter(&s, &conn);
    s.end_receive_batch(T0);
    assert!(cap.take().is_empty(), "the reader has the connection");
    let held = held
        .leave_enqueued(|| panic!("enqueued with an ACK owed"))
        .expect_err("the reader releases instead");
    held.release();
    assert_eq!(peer.absorb(&cap.take(), T0), [TcpFlags::ACK]);
    assert_eq!(peer.conn.bytes_in_flight(), 0);
    // Outside a batch, every second segment is acknowledged at once, as before.
    peer.conn.send(T0, &data[..4 * 1460]).unwrap();
    let frames = peer.frames(&s, T0);
    assert!(frames.len() >= 4);
    for f in &frames {
        assert_eq!(s.receive(f, T0), None);
    }
    assert_eq!(cap.take().len(), frames.len() / 2);
}

#[test]
fn a_closed_connection_leaves_the_table() {
    let (s, cap) = stack_without_time_wait();
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut peer = handshake(&s, &cap, 40000, 80);
    let conn = l.state.lock().queue.pop_front().unwrap();
    // The peer closes; then we do (as dropping the stream does).
    peer.conn.close(T0);
    peer.send(&s, T0);
    peer.absorb(&cap.take(), T0);
    let mut held = Held::enter(&s, &conn);
    held.conn().close(T0);
    held.after(corral_tcp::Events::NONE, T0);
    drop(held);
    peer.absorb(&cap.take(), T0);
    peer.send(&s, T0);
    let tcp = s.stats().tcp;
    assert_eq!(tcp.connections, 0, "{:?}", tcp.live);
    assert_eq!(tcp.counters.conns.bytes_in, 0);
    assert!(
        tcp.counters.conns.segments_in >= 3,
        "closed connections' stats are kept"
    );
    assert_eq!(tcp.drop_count(TcpDrop::TableFull.as_str()), 0);
}

#[test]
fn the_report_for_iokerneld_keeps_the_totals_of_the_full_statistics() {
    let (s, cap) = stack_without_time_wait();
    let agree = |when: &str| {
        let reported = s.totals().tcp.counters;
        assert_eq!(reported, s.stats().tcp.counters, "{when}");
        reported
    };
    assert_eq!(agree("before anything"), corral_tcp::TcpCounters::default());
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let mut first = handshake(&s, &cap, 40000, 80);
    let mut second = handshake(&s, &cap, 40001, 80);
    let (a, _b) = {
        let mut q = l.state.lock();
        (q.queue.pop_front().unwrap(), q.queue.pop_front().unwrap())
    };
    agree("after two handshakes");
    // Only the first connection moves; the second's stats stay as reported.
    first.conn.send(T0, b"0123456789").unwrap();
    first.send(&s, T0);
    assert_eq!(agree("after data on one").conns.bytes_in, 10);
    // A stray, counted by the layer rather than a connection, and a segment the second
    // connection drops.
    s.receive(&raw(&s, 1234, 81, TcpFlags::ACK, 5), T0);
    second.conn.send(T0, b"abc").unwrap();
    second.send(&s, T0);
    agree("after a stray and data on the other");
    // The first connection closes and leaves the table: its stats stay in the totals.
    first.conn.close(T0);
    first.send(&s, T0);
    first.absorb(&cap.take(), T0);
    let mut held = Held::enter(&s, &a);
    held.conn().close(T0);
    held.after(corral_tcp::Events::NONE, T0);
    drop(held);
    first.absorb(&cap.take(), T0);
    first.send(&s, T0);
    assert_eq!(s.stats().tcp.connections, 1);
    let closed = agree("after one closed");
    assert_eq!(closed.conns.bytes_in, 13);
    assert_eq!(agree("again, nothing changed"), closed);
    // And a listener's own counters once it is gone.
    s.tcp.unlisten(&s, &l);
    agree("after the listener closed");
}

/// What an idle connection costs: `cargo test --profile ci -p corral --lib -- --ignored
/// --nocapture idle_connection_memory`.
#[test]
#[ignore = "measurement"]
fn idle_connection_memory() {
    let (s, cap) = stack_with(TcpSettings::default());
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    let _peer = handshake(&s, &cap, 40000, 80);
    let conn = l.state.lock().queue.pop_front().unwrap();
    let engine_heap = Held::enter(&s, &conn).conn().memory();
    let cell = core::mem::size_of::<super::conn::ConnCell>();
    // An Arc's two counts, and the table entry (key + Arc pointer) with hashbrown's control byte.
    let arc = 2 * core::mem::size_of::<usize>();
    let entry = core::mem::size_of::<(Endpoints, Arc<super::conn::ConnCell>)>() + 1;
    println!(
        "idle established connection: ConnCell {cell} B (engine Connection {} B inline) + Arc \
         {arc} B + table entry {entry} B + engine heap {engine_heap} B = {} B",
        core::mem::size_of::<Connection>(),
        cell + arc + entry + engine_heap
    );
}

#[test]
fn bare_acks_may_wait_only_while_no_connection_or_listener_needs_one() {
    let (s, cap) = stack_without_time_wait();
    assert!(s.tcp.acks_can_wait(T0), "nothing open");
    let l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    // A SYN answered: the handshake's last ACK must not wait.
    let mut peer = Peer::connect(40000, 80, T0);
    peer.send(&s, T0);
    assert!(!s.tcp.acks_can_wait(T0), "SYN-RECEIVED");
    peer.absorb(&cap.take(), T0);
    peer.send(&s, T0);
    assert!(s.tcp.acks_can_wait(T0), "established and idle");
    let conn = l.state.lock().queue.pop_front().unwrap();
    // Two segments in flight: duplicate ACKs would drive fast retransmit.
    let mut held = Held::enter(&s, &conn);
    held.conn().set_nodelay(true);
    held.conn().send(T0, &[7u8; 3000]).unwrap();
    held.after(corral_tcp::Events::NONE, T0);
    drop(held);
    assert!(!s.tcp.acks_can_wait(T0), "data in flight");
    peer.absorb(&cap.take(), T0);
    peer.send(&s, T0);
    assert!(s.tcp.acks_can_wait(T0), "all acknowledged");
    // Closing: our FIN waits for its ACK, then the connection leaves the table.
    let mut held = Held::enter(&s, &conn);
    held.conn().close(T0);
    held.after(corral_tcp::Events::NONE, T0);
    drop(held);
    assert!(!s.tcp.acks_can_wait(T0), "FIN-WAIT-1");
    peer.absorb(&cap.take(), T0);
    peer.conn.close(T0);
    peer.send(&s, T0);
    assert_eq!(s.stats().tcp.connections, 0);
    assert!(s.tcp.acks_can_wait(T0), "closed and gone");
    // A SYN cookie out: a bare ACK may complete a handshake.
    let settings = TcpSettings {
        syn_backlog: 0,
        ..TcpSettings::default()
    };
    let (s, _cap) = stack_with(settings);
    let _l = s.tcp.listen(Ipv4Addr::UNSPECIFIED, OUR_IP, 80, 8).unwrap();
    Peer::connect(40001, 80, T0).send(&s, T0);
    assert_eq!(s.stats().tcp.counters.syn_cookies_sent, 1);
    assert!(!s.tcp.acks_can_wait(T0 + 1_000_000_000), "a cookie is out");
}
