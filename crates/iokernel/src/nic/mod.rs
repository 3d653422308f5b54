//! NIC backends: where frames addressed to no local runtime go, and where frames from other
//! machines come from.
//!
//! A backend is polled from the dataplane loop, so nothing here may block. The trait is
//! deliberately small (receive a burst, send one frame, report counters) so that a backend can
//! equally be a device (`tap`) or a traffic source and sink living inside iokerneld (`gen`,
//! which plays a request schedule onto the receive path and takes responses from `send`).

mod generator;
mod tap;

use std::io;

use serde::{Deserialize, Serialize};

pub use generator::{
    ARP_REFRESH_NS, CLIENT_PORT_BASE, CLIENT_PORTS, FinishedRun, GEN_MAC, Gen, GenCounters,
    START_DELAY_NS, client_port,
};
pub use tap::Tap;

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
    /// plus one per poll that found nothing.
    pub rx_syscalls: u64,
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

    /// Sends one frame without waiting. An error means the frame was not sent.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// Counters so far.
    fn counters(&self) -> NicCounters;

    /// Least time between receive polls while nothing arrives, in nanoseconds. A backend whose
    /// empty poll costs a system call asks to be polled less often when idle, so that the
    /// loop's rings are not starved by failed reads.
    fn idle_poll_interval_ns(&self) -> u64 {
        0
    }

    /// The traffic generator, if this backend is `gen`: the daemon starts and collects its
    /// runs through it.
    fn as_gen(&mut self) -> Option<&mut Gen> {
        None
    }
}

/// Opens the configured backend; `None` for `nic = none`.
pub fn open(config: &NicConfig) -> io::Result<Option<Box<dyn Nic>>> {
    match config {
        NicConfig::None => Ok(None),
        NicConfig::Tap {
            name,
            host_ip,
            prefix,
        } => Ok(Some(Box::new(Tap::open(name, *host_ip, *prefix)?))),
        NicConfig::Gen { host_ip, prefix } => Ok(Some(Box::new(Gen::new(*host_ip, *prefix)))),
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
