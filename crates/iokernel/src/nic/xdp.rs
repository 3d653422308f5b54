//! The `xdp` backend: a real Linux interface, shared with the host. An XDP program on the
//! interface redirects the frames of the runtimes' IPv4 addresses (and ARP about them) to one
//! AF_XDP socket per receive queue, and passes everything else to Linux; iokerneld polls the
//! sockets' rings and sends through them (`corral-xdp` does the kernel side).
//!
//! Unlike TAP, a frame costs no system call to receive: the rings are shared memory, and the
//! kernel is woken only when it asks (`need_wakeup`). Sending in copy mode needs one `sendto`
//! per flush, so sends are queued during a loop iteration and flushed once at its end
//! ([`Nic::flush`]).
//!
//! The address map and the interface's unicast filter follow registrations ([`Nic::claim`],
//! [`Nic::release`]): a runtime's address is taken from Linux only while the runtime is
//! registered. The XDP link, the sockets and the filter entries are all the kernel's to undo
//! when iokerneld's process ends, however it ends.

use std::io;
use std::net::Ipv4Addr;

use corral_xdp::{AttachMode, Port, PortConfig, SocketConfig, UnicastFilter, Verdict};
use log::warn;

use super::{BURST, FrameBatch, Nic, NicCounters};
use crate::config::XdpAttach;

/// Frames each socket lends the kernel to receive into (its fill and RX rings): the NIC's
/// receive ring of this backend, which must hold what arrives while the loop is off its CPU.
/// At 0.5 Mpps, 8192 frames last 16 ms, past the few milliseconds a fair-class loop can lose
/// at once (the TAP backend's queue is 4096 for the same reason, at a lower rate).
pub const RX_FRAMES: u32 = 8192;

/// Frames each socket keeps for sending, beside those lent for receiving.
const TX_FRAMES: u32 = 2048;

/// An interface steered through AF_XDP.
pub struct Xdp {
    port: Port,
    filter: UnicastFilter,
    /// The queue polled first by the next receive, so that a busy queue cannot starve others.
    next_queue: usize,
    /// Whether a socket has frames it was given to send and that may not have gone yet.
    sending: Vec<bool>,
}

impl Xdp {
    /// Attaches to `interface` with sockets on `queues` receive queues (`None`: all).
    pub fn open(interface: &str, queues: Option<u32>, attach: XdpAttach) -> io::Result<Xdp> {
        let config = PortConfig {
            attach: match attach {
                XdpAttach::Auto => AttachMode::Auto,
                XdpAttach::Native => AttachMode::Native,
                XdpAttach::Generic => AttachMode::Generic,
            },
            queues,
            socket: SocketConfig {
                frame_count: RX_FRAMES + TX_FRAMES,
                rx_frames: RX_FRAMES,
                fill_size: 2 * RX_FRAMES,
                rx_size: RX_FRAMES,
                completion_size: TX_FRAMES,
                tx_size: TX_FRAMES,
                ..SocketConfig::default()
            },
            ..PortConfig::default()
        };
        let context = |e: corral_xdp::Error| {
            let e = io::Error::from(e);
            io::Error::new(e.kind(), format!("nic = xdp on {interface}: {e}"))
        };
        let port = Port::open(interface, &config).map_err(context)?;
        let filter = UnicastFilter::new(port.interface()).map_err(context)?;
        let sending = vec![false; port.sockets().len()];
        Ok(Xdp {
            port,
            filter,
            next_queue: 0,
            sending,
        })
    }

    /// The socket a frame leaves by: the same for every frame of a flow, so that a flow is
    /// never reordered across transmit queues.
    fn queue_for(&self, frame: &[u8]) -> usize {
        let n = self.port.sockets().len();
        if n == 1 {
            return 0;
        }
        // Ethernet type IPv4: hash the addresses and, if present, the ports.
        if frame.len() >= 38 && frame[12] == 0x08 && frame[13] == 0x00 {
            let mut h: u32 = 0x811c_9dc5;
            for &b in &frame[26..38] {
                h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
            }
            return h as usize % n;
        }
        0
    }
}

impl Nic for Xdp {
    fn name(&self) -> &'static str {
        "xdp"
    }

    fn describe(&self) -> String {
        self.port.describe()
    }

    fn mode(&self) -> Option<String> {
        Some(self.port.mode().to_string())
    }

    fn recv_burst(&mut self, out: &mut FrameBatch) -> usize {
        let sockets = self.port.sockets_mut();
        let n = sockets.len();
        let mut got = 0;
        for i in 0..n {
            let room = BURST - out.len();
            if room == 0 {
                break;
            }
            let socket = &mut sockets[(self.next_queue + i) % n];
            got += socket.recv_burst(room, |frame| {
                if let Some(buf) = out.next_buffer() {
                    let len = frame.len().min(buf.len());
                    buf[..len].copy_from_slice(&frame[..len]);
                    out.commit(frame.len());
                }
                Verdict::Release
            });
        }
        self.next_queue = (self.next_queue + 1) % n;
        got
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let q = self.queue_for(frame);
        if self.port.sockets_mut()[q].enqueue(frame) {
            self.sending[q] = true;
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "no free UMEM frame or no room on the TX ring",
            ))
        }
    }

    fn flush(&mut self) {
        for (socket, sending) in self.port.sockets_mut().iter_mut().zip(&mut self.sending) {
            if *sending {
                // Takes back completed frames and kicks the kernel if frames wait (in copy mode
                // a kick sends a bounded batch; the rest go at the next flush).
                socket.reap();
                *sending = socket.tx_in_flight() > 0;
            }
        }
    }

    fn claim(&mut self, mac: [u8; 6], ipv4: Ipv4Addr) -> Result<(), String> {
        self.filter.add(mac).map_err(|e| e.to_string())?;
        if let Err(e) = self.port.register(ipv4) {
            if let Err(undo) = self.filter.remove(mac) {
                warn!("xdp: {undo}");
            }
            return Err(format!("cannot steer {ipv4} to iokerneld: {e}"));
        }
        Ok(())
    }

    fn release(&mut self, mac: [u8; 6], ipv4: Ipv4Addr) {
        if let Err(e) = self.port.unregister(ipv4) {
            warn!("xdp: cannot give {ipv4} back to Linux: {e}");
        }
        if let Err(e) = self.filter.remove(mac) {
            warn!("xdp: {e}");
        }
    }

    fn queue_rx_frames(&self) -> Vec<u64> {
        self.port
            .sockets()
            .iter()
            .map(|s| s.counters().rx_frames)
            .collect()
    }

    fn counters(&self) -> NicCounters {
        let k = self.port.counters();
        NicCounters {
            rx_frames: k.rx_frames,
            rx_bytes: k.rx_bytes,
            tx_frames: k.tx_frames,
            tx_bytes: k.tx_bytes,
            rx_errors: k.rx_invalid,
            tx_errors: k.tx_dropped + k.kick_errors,
            rx_syscalls: k.rx_wakeups + k.waits,
            tx_syscalls: k.tx_kicks,
            rx_device_drops: self
                .port
                .sockets()
                .iter()
                .filter_map(|s| s.kernel_stats().ok())
                .map(|k| k.rx_dropped + k.rx_ring_full)
                .sum(),
        }
    }
}
