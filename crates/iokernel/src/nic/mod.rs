//! NIC backends: where frames addressed to no local runtime go, and where frames from other
//! machines come from.
//!
//! A backend is polled from the dataplane loop, so nothing here may block. The trait is
//! deliberately small (receive a burst, send one frame, report counters) so that a backend can
//! equally be a device (`tap`, here) or a traffic source and sink linked into iokerneld from
//! another crate (`corral-gen`, which plays a request schedule onto the receive path and takes
//! responses from `send`). Such a backend may also serve jobs asked for on the control socket
//! (`Request::Gen`): the daemon hands it the request through [`Nic::start_job`] and sends back
//! what [`Nic::poll_job`] eventually returns, and tells it nothing else about itself than
//! [`DaemonView`] shows.

mod tap;
mod xdp;

use std::io;
use std::net::Ipv4Addr;

use corral_abi::control::Reply;
use serde::{Deserialize, Serialize};

pub use tap::Tap;
pub use xdp::Xdp;

use crate::config::NicConfig;

/// Room for one received frame: corral-abi's packet buffer size. Frames longer than
/// [`MAX_FRAME`](corral_abi::MAX_FRAME) are still read, so that the switch can count them as
/// too big rather than the device truncating them silently.
pub use corral_abi::FRAME_CAPACITY;

/// Frames read per [`Nic::recv_burst`] at most.
pub const BURST: usize = 32;

/// Preallocated room for a burst of received frames; the loop reuses one batch forever.
pub struct FrameBatch {
    buf: Box<[u8]>,
    lens: [usize; BURST],
    count: usize,
}

impl Default for FrameBatch {
    fn default() -> Self {
        Self {
            buf: vec![0; FRAME_CAPACITY * BURST].into_boxed_slice(),
            lens: [0; BURST],
            count: 0,
        }
    }
}

impl FrameBatch {
    /// Forgets every frame.
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no frame is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more frames fit.
    pub fn is_full(&self) -> bool {
        self.count == BURST
    }

    /// The buffer the next frame is to be written into; [`FrameBatch::commit`] keeps it.
    /// `None` when the batch is full.
    pub fn next_buffer(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.count * FRAME_CAPACITY;
        Some(&mut self.buf[start..start + FRAME_CAPACITY])
    }

    /// Keeps the first `len` bytes of the buffer [`FrameBatch::next_buffer`] returned.
    pub fn commit(&mut self, len: usize) {
        debug_assert!(!self.is_full());
        self.lens[self.count] = len.min(FRAME_CAPACITY);
        self.count += 1;
    }

    /// Frame `index`.
    pub fn frame(&self, index: usize) -> &[u8] {
        let start = index * FRAME_CAPACITY;
        &self.buf[start..start + self.lens[index]]
    }
}

/// What a backend has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Receive calls that failed other than for lack of frames.
    pub rx_errors: u64,
    /// Frames the backend refused to send.
    pub tx_errors: u64,
    /// System calls made to receive (for backends that need them): with TAP, one per frame
    /// plus one per poll that found nothing; with XDP, only the wakeups the kernel asks for.
    pub rx_syscalls: u64,
    /// System calls made to send: with TAP, one per frame; with XDP, one per flush that had
    /// frames waiting, when the kernel asks for it.
    #[serde(default)]
    pub tx_syscalls: u64,
    /// Frames for iokerneld that the kernel dropped before it could read them: with TAP, the
    /// device's queue overflowing (its host side's `tx_dropped`); with XDP, the sockets' RX
    /// rings full or no receive buffer lent (`XDP_STATISTICS`).
    #[serde(default)]
    pub rx_device_drops: u64,
}

/// A NIC backend.
pub trait Nic {
    /// Short name, as in the `nic` setting.
    fn name(&self) -> &'static str;

    /// One line for the log and statistics: device, addresses.
    fn describe(&self) -> String;

    /// Appends up to the batch's free room of received frames to `out`, without waiting;
    /// returns how many were added.
    fn recv_burst(&mut self, out: &mut FrameBatch) -> usize;

    /// [`Nic::recv_burst`] for a loop that has just read `CLOCK_MONOTONIC` (`now`, in ns): a
    /// backend that needs the time (`gen`, to know which requests are due) uses it rather than
    /// read the clock again on every poll.
    fn recv_burst_at(&mut self, out: &mut FrameBatch, now: u64) -> usize {
        let _ = now;
        self.recv_burst(out)
    }

    /// Sends one frame without waiting. An error means the frame was not sent. A backend may
    /// hold it until the next [`Nic::flush`].
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// Puts on the wire what [`Nic::send`] held. The loop calls it once per iteration, after
    /// its egress bursts.
    fn flush(&mut self) {}

    /// Frames to `mac` and `ipv4` belong to a runtime from now on. A backend that shares its
    /// device with the host takes them from the host here. `Err` refuses the runtime's
    /// registration, with the reason.
    fn claim(&mut self, mac: [u8; 6], ipv4: Ipv4Addr) -> Result<(), String> {
        let _ = (mac, ipv4);
        Ok(())
    }

    /// Undoes [`Nic::claim`]: the runtime has gone.
    fn release(&mut self, mac: [u8; 6], ipv4: Ipv4Addr) {
        let _ = (mac, ipv4);
    }

    /// Frames received on each of the device's receive queues, for a backend that reads
    /// several (XDP); empty otherwise.
    fn queue_rx_frames(&self) -> Vec<u64> {
        Vec::new()
    }

    /// What the backend obtained from the kernel, if that varies (XDP: native zero-copy,
    /// native copy or generic).
    fn mode(&self) -> Option<String> {
        None
    }

    /// Counters so far. Called for statistics, not from the loop: it may make system calls.
    fn counters(&self) -> NicCounters;

    /// Least time between receive polls while nothing arrives, in nanoseconds. A backend whose
    /// empty poll costs a system call asks to be polled less often when idle, so that the
    /// loop's rings are not starved by failed reads.
    fn idle_poll_interval_ns(&self) -> u64 {
        0
    }

    /// Starts a job that the process `pid` asked for on the control socket (`Request::Gen`'s
    /// JSON). `Err` is the refusal sent back. The daemon asks at most one job at a time of a
    /// backend whose job is in progress only to have it refuse.
    fn start_job(&mut self, json: &str, pid: i32, daemon: &dyn DaemonView) -> Result<(), String> {
        let _ = (json, pid, daemon);
        Err(refuse_jobs(self.name()))
    }

    /// Moves the job in progress along without waiting (a time budget at a time, called every
    /// control poll); once it has ended, the reply to send to whoever asked for it.
    fn poll_job(&mut self, now: u64, daemon: &dyn DaemonView) -> Option<Reply> {
        let _ = (now, daemon);
        None
    }

    /// Drops the job in progress, because `why`: whoever asked for it has gone.
    fn abandon_job(&mut self, why: &str) {
        let _ = why;
    }
}

/// The refusal of a job by a backend named `name` that runs none.
pub fn refuse_jobs(name: &str) -> String {
    format!(
        "this iokerneld's NIC backend is {name}, not gen: start iokerneld with --nic gen to play \
         runs"
    )
}

/// What a backend may learn of the daemon while it serves a job.
pub trait DaemonView {
    /// The MAC address of the registered runtime (not being evicted) that owns `ip`.
    fn mac_of(&self, ip: Ipv4Addr) -> Option<[u8; 6]>;

    /// The daemon's activity counters now.
    fn activity(&self) -> Activity;
}

/// The daemon's running totals that a job may report differences of.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Activity {
    /// When they were read (`CLOCK_MONOTONIC` ns).
    pub at_ns: u64,
    /// The allocation interval setting, in microseconds.
    pub interval_us: u64,
    pub wakes: u64,
    pub preemptions: u64,
    /// Reallocations summed over the managed cores.
    pub reallocations: u64,
    pub parks: u64,
    pub loop_stalls: u64,
    pub loop_stall_ns: u64,
}

/// Opens the configured backend; `None` for `nic = none`. `nic = gen` lives outside this
/// crate: the binary that links it opens it.
pub fn open(config: &NicConfig) -> io::Result<Option<Box<dyn Nic>>> {
    match config {
        NicConfig::None => Ok(None),
        NicConfig::Tap {
            name,
            host_ip,
            prefix,
        } => Ok(Some(Box::new(Tap::open(name, *host_ip, *prefix)?))),
        NicConfig::Xdp {
            interface,
            queues,
            attach,
        } => Ok(Some(Box::new(Xdp::open(interface, *queues, *attach)?))),
        NicConfig::Gen { .. } => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nic = gen: the traffic generator is not linked into this program",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_holds_a_burst_of_frames() {
        let mut batch = FrameBatch::default();
        assert!(batch.is_empty());
        for i in 0..BURST {
            let buf = batch.next_buffer().unwrap();
            buf[0] = i as u8;
            batch.commit(1 + i);
        }
        assert!(batch.is_full());
        assert!(batch.next_buffer().is_none());
        for i in 0..BURST {
            assert_eq!(batch.frame(i).len(), 1 + i);
            assert_eq!(batch.frame(i)[0], i as u8);
        }
        batch.clear();
        assert_eq!(batch.len(), 0);
    }
}
