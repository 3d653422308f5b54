//! Seeded, deterministic fault injection for the switch: loss, duplication, corruption, delay
//! and reordering, configured per direction (`rx`: NIC to runtime, `tx`: runtime to NIC,
//! `local`: runtime to runtime).
//!
//! No netem exists where Corral is tested, so every loss test runs through this. It is pure:
//! no I/O and no clock. The switch hands each frame of a direction to that direction's
//! [`Injector`] with the time it read, and the injector passes the frames that go on now to a
//! closure; frames it holds back (delay, reordering) live in storage of its own, a bounded
//! table allocated once, and leave through the same closure when [`Injector::release_due`] is
//! called at or after their time, or once enough later frames have overtaken them.
//!
//! The fate of a frame depends only on the seed, the direction and the frame's sequence number
//! in its direction (see [`decide`]), never on what happened to earlier frames, so a failing
//! test can be replayed from its seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use corral_abi::MAX_FRAME;
use serde::{Deserialize, Serialize};

/// Length of an Ethernet header without a VLAN tag.
const ETHERNET_HEADER: usize = 14;
/// Ethertype of IPv4.
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
/// Shortest IPv4 header.
const IPV4_HEADER_MIN: usize = 20;

/// Where a frame travels through the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the NIC to a runtime.
    Rx,
    /// From a runtime to the NIC.
    Tx,
    /// From a runtime to a runtime, through the local switch.
    Local,
}

impl Direction {
    pub const ALL: [Direction; 3] = [Direction::Rx, Direction::Tx, Direction::Local];

    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
            Direction::Local => "local",
        }
    }

    /// Mixed into the seed, so that directions given the same seed still draw independently.
    const fn salt(self) -> u64 {
        match self {
            Direction::Rx => 0x7278_0000_0000_0001,
            Direction::Tx => 0x7478_0000_0000_0002,
            Direction::Local => 0x6c6f_6361_6c00_0003,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which frames a direction's faults apply to; the others pass untouched and uncounted, and
/// take no sequence number, so that unrelated traffic (ARP, Linux's IPv6 chatter on the TAP
/// device) neither suffers the faults nor shifts the fates of the frames under test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FrameFilter {
    /// Every frame.
    #[default]
    All,
    /// IPv4 frames (not ARP).
    Ipv4,
    /// IPv4 frames carrying TCP.
    Tcp,
    /// IPv4 frames carrying UDP.
    Udp,
}

impl FrameFilter {
    pub const ALL: [FrameFilter; 4] = [
        FrameFilter::All,
        FrameFilter::Ipv4,
        FrameFilter::Tcp,
        FrameFilter::Udp,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            FrameFilter::All => "all",
            FrameFilter::Ipv4 => "ipv4",
            FrameFilter::Tcp => "tcp",
            FrameFilter::Udp => "udp",
        }
    }

    pub fn parse(text: &str) -> Option<FrameFilter> {
        Self::ALL.into_iter().find(|f| f.as_str() == text)
    }

    /// Whether `frame` is one of these (from its Ethernet and IPv4 headers, unchecked: a
    /// malformed frame is judged by the bytes where the fields would be).
    #[inline]
    pub fn matches(self, frame: &[u8]) -> bool {
        let ipv4 =
            frame.len() >= ETHERNET_HEADER + IPV4_HEADER_MIN && frame[12..14] == ETHERTYPE_IPV4;
        let protocol = || frame[ETHERNET_HEADER + 9];
        match self {
            FrameFilter::All => true,
            FrameFilter::Ipv4 => ipv4,
            FrameFilter::Tcp => ipv4 && protocol() == 6,
            FrameFilter::Udp => ipv4 && protocol() == 17,
        }
    }
}

/// Defaults of the optional settings of a [`FaultSpec`].
pub const DEFAULT_REORDER_GAP: u32 = 3;
pub const DEFAULT_REORDER_US: u64 = 1000;
pub const DEFAULT_HOLD: usize = 1024;
/// Bounds the settings are checked against.
pub const MAX_DELAY_US: u64 = 1_000_000;
pub const MAX_REORDER_US: u64 = 1_000_000;
pub const MAX_REORDER_GAP: u32 = 1000;
pub const MAX_HOLD: usize = 65_536;

/// The faults of one direction. Probabilities are in `[0, 1]` and drawn independently for each
/// frame; the values are checked when the configuration is read (`config.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    pub seed: u64,
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is delivered twice, back to back.
    pub dup: f64,
    /// Probability that one byte of an IPv4 frame past the Ethernet header (within the IPv4
    /// total length) is XORed with a random non-zero mask, so that the IPv4 header checksum or
    /// the transport checksum must catch it. Frames that are not IPv4 (ARP, which carries no
    /// checksum) are never corrupted.
    pub corrupt: f64,
    /// Probability that a frame is held for a time drawn uniformly from
    /// `delay_min_us..=delay_max_us`.
    pub delay: f64,
    pub delay_min_us: u64,
    pub delay_max_us: u64,
    /// Probability that a frame is held back until `reorder_gap` later frames have passed it,
    /// or `reorder_us` have elapsed, whichever comes first.
    pub reorder: f64,
    pub reorder_gap: u32,
    pub reorder_us: u64,
    /// Frames held at most (delay and reordering together); one more is dropped and counted as
    /// an overflow.
    pub hold: usize,
    /// The frames the faults apply to.
    pub only: FrameFilter,
}

// The probabilities are checked finite when read, so equality is reflexive.
impl Eq for FaultSpec {}

impl Default for FaultSpec {
    /// No faults.
    fn default() -> Self {
        FaultSpec {
            seed: 0,
            loss: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            delay: 0.0,
            delay_min_us: 0,
            delay_max_us: 0,
            reorder: 0.0,
            reorder_gap: DEFAULT_REORDER_GAP,
            reorder_us: DEFAULT_REORDER_US,
            hold: DEFAULT_HOLD,
            only: FrameFilter::All,
        }
    }
}

impl FaultSpec {
    /// Whether any fault can happen.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.corrupt > 0.0 || self.holds()
    }

    /// Whether frames can be held (delayed or reordered).
    pub fn holds(&self) -> bool {
        self.delay > 0.0 || self.reorder > 0.0
    }
}

impl fmt::Display for FaultSpec {
    /// The flag syntax (without the direction), every setting spelt out (the delay's only
    /// when frames are delayed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},corrupt={},",
            self.loss, self.dup, self.corrupt
        )?;
        if self.delay > 0.0 {
            write!(f, "delay={},", self.delay)?;
            if self.delay_min_us == self.delay_max_us {
                write!(f, "delay_us={},", self.delay_min_us)?;
            } else {
                write!(f, "delay_us={}-{},", self.delay_min_us, self.delay_max_us)?;
            }
        }
        write!(
            f,
            "reorder={},reorder_gap={},reorder_us={},hold={},only={},seed={}",
            self.reorder,
            self.reorder_gap,
            self.reorder_us,
            self.hold,
            self.only.as_str(),
            self.seed
        )
    }
}

/// One byte of a frame to flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// Offset in the frame.
    pub at: usize,
    /// Never zero.
    pub mask: u8,
}

/// Why and how long a frame is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// For this many nanoseconds.
    Delay { ns: u64 },
    /// Until this many later frames passed it, or for at most `max_ns`.
    Reorder { frames: u32, max_ns: u64 },
}

/// What happens to one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Dropped; nothing below applies.
    pub drop: bool,
    pub corrupt: Option<Corruption>,
    /// Delivered twice (both copies alike, corruption included).
    pub duplicate: bool,
    pub hold: Option<Hold>,
}

/// SplitMix64's finaliser: a bijection that spreads every input bit over the output.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of `frame` a corruption may hit: the IPv4 packet past the Ethernet header, up to
/// its total length (padding after it is covered by no checksum). Empty for other frames.
fn corruptible(frame: &[u8]) -> std::ops::Range<usize> {
    if frame.len() < ETHERNET_HEADER + IPV4_HEADER_MIN || frame[12..14] != ETHERTYPE_IPV4 {
        return 0..0;
    }
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let end = (ETHERNET_HEADER + total.max(IPV4_HEADER_MIN)).min(frame.len());
    ETHERNET_HEADER..end
}

/// The fate of frame number `seq` (counting from 0) of `direction` under `spec`. The same
/// inputs always give the same decision; `frame` matters only for where a corruption lands.
pub fn decide(spec: &FaultSpec, direction: Direction, seq: u64, frame: &[u8]) -> Decision {
    let mut rng = fastrand::Rng::with_seed(mix(mix(spec.seed ^ direction.salt()) ^ seq));
    // Every draw is made whatever the earlier ones gave, so that each setting draws from the
    // same positions of the frame's stream whatever the others are set to.
    let lost = rng.f64() < spec.loss;
    let corrupted = rng.f64() < spec.corrupt;
    let corrupt_pick = rng.u64(..);
    let mask = rng.u8(1..=255);
    let duplicate = rng.f64() < spec.dup;
    let reordered = rng.f64() < spec.reorder;
    let delayed = rng.f64() < spec.delay;
    let delay_us = rng.u64(spec.delay_min_us..=spec.delay_max_us.max(spec.delay_min_us));
    if lost {
        return Decision {
            drop: true,
            ..Decision::default()
        };
    }
    let range = corruptible(frame);
    let corrupt = (corrupted && !range.is_empty()).then(|| Corruption {
        at: range.start + (corrupt_pick % range.len() as u64) as usize,
        mask,
    });
    let hold = if reordered {
        Some(Hold::Reorder {
            frames: spec.reorder_gap,
            max_ns: spec.reorder_us * 1000,
        })
    } else if delayed {
        Some(Hold::Delay {
            ns: delay_us * 1000,
        })
    } else {
        None
    };
    Decision {
        drop: false,
        corrupt,
        duplicate,
        hold,
    }
}

/// What an injector did, in frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounters {
    /// Frames handed in.
    pub frames: u64,
    /// Frames passed on (duplicates and held frames included, once released).
    pub emitted: u64,
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    pub corrupted: u64,
    pub delayed: u64,
    pub reordered: u64,
    /// Frames to hold that found the hold table full, and were dropped.
    pub hold_overflow: u64,
}

/// A held frame's place in one of the release orders: (due, hold number, table slot).
type Due = Reverse<(u64, u64, u32)>;

/// Frames held back, in a table of fixed size, with their release orders. Each frame has a
/// time it is due at and, when reordered, a count of passed frames it is due at; whichever
/// comes first releases it, and the other entry is left behind, stale, to be skipped (it no
/// longer matches the slot's hold number).
struct Held {
    /// `capacity` frames of [`MAX_FRAME`] bytes.
    bytes: Box<[u8]>,
    lens: Box<[u16]>,
    /// The hold number of the frame in each slot; 0 when the slot is free.
    holds: Box<[u64]>,
    copies: Box<[u8]>,
    free: Vec<u32>,
    by_time: BinaryHeap<Due>,
    by_count: BinaryHeap<Due>,
    next_hold: u64,
}

impl Held {
    fn new(capacity: usize) -> Self {
        Held {
            bytes: vec![0; capacity * MAX_FRAME].into_boxed_slice(),
            lens: vec![0; capacity].into_boxed_slice(),
            holds: vec![0; capacity].into_boxed_slice(),
            copies: vec![0; capacity].into_boxed_slice(),
            free: (0..capacity as u32).rev().collect(),
            // Live entries are at most `capacity` per order; stale ones are purged when the
            // room runs out, so neither ever reallocates.
            by_time: BinaryHeap::with_capacity(2 * capacity),
            by_count: BinaryHeap::with_capacity(2 * capacity),
            next_hold: 1,
        }
    }

    fn len(&self) -> usize {
        self.holds.len() - self.free.len()
    }

    fn is_live(holds: &[u64], entry: &Due) -> bool {
        let Reverse((_, hold, slot)) = *entry;
        holds[slot as usize] == hold
    }

    fn push(heap: &mut BinaryHeap<Due>, holds: &[u64], entry: Due) {
        if heap.len() == heap.capacity() {
            heap.retain(|e| Self::is_live(holds, e));
        }
        heap.push(entry);
    }

    /// Stores `frame` (at most [`MAX_FRAME`] bytes), corrupted as `corrupt` says, to leave as
    /// `copies` frames when due. `false` when the table is full.
    fn insert(
        &mut self,
        frame: &[u8],
        corrupt: Option<Corruption>,
        copies: u8,
        due_ns: u64,
        due_count: Option<u64>,
    ) -> bool {
        let Some(slot) = self.free.pop() else {
            return false;
        };
        let at = slot as usize;
        let dst = &mut self.bytes[at * MAX_FRAME..at * MAX_FRAME + frame.len()];
        dst.copy_from_slice(frame);
        if let Some(c) = corrupt {
            dst[c.at] ^= c.mask;
        }
        self.lens[at] = frame.len() as u16;
        self.copies[at] = copies;
        let hold = self.next_hold;
        self.next_hold += 1;
        self.holds[at] = hold;
        Self::push(
            &mut self.by_time,
            &self.holds,
            Reverse((due_ns, hold, slot)),
        );
        if let Some(count) = due_count {
            Self::push(
                &mut self.by_count,
                &self.holds,
                Reverse((count, hold, slot)),
            );
        }
        true
    }

    /// Releases, in due order, every frame of `order` due at or before `now`; returns how many
    /// frames (copies included) left.
    fn release(&mut self, by_count: bool, now: u64, emit: &mut impl FnMut(&[u8])) -> u64 {
        let mut emitted = 0;
        loop {
            let heap = if by_count {
                &mut self.by_count
            } else {
                &mut self.by_time
            };
            let Some(&Reverse((due, hold, slot))) = heap.peek() else {
                break;
            };
            if due > now {
                break;
            }
            heap.pop();
            let at = slot as usize;
            if self.holds[at] != hold {
                continue;
            }
            self.holds[at] = 0;
            self.free.push(slot);
            let frame = &self.bytes[at * MAX_FRAME..at * MAX_FRAME + usize::from(self.lens[at])];
            for _ in 0..self.copies[at] {
                emit(frame);
            }
            emitted += u64::from(self.copies[at]);
        }
        emitted
    }

    /// The earliest time a held frame is due at (stale entries may make it early).
    fn next_due(&self) -> Option<u64> {
        self.by_time.peek().map(|Reverse((due, _, _))| *due)
    }
}

/// The faults of one direction, applied frame by frame.
pub struct Injector {
    direction: Direction,
    spec: FaultSpec,
    /// Frames handed in so far: the next frame's sequence number.
    seq: u64,
    /// Frames passed on at once (not released from the hold): how far reordered frames have
    /// been overtaken.
    passed: u64,
    /// `None` when the spec never holds a frame.
    held: Option<Held>,
    /// Where a corrupted frame that goes on at once is built.
    scratch: Box<[u8; MAX_FRAME]>,
    counters: FaultCounters,
}

impl Injector {
    /// An injector for `direction`; the hold table is allocated here, once.
    pub fn new(direction: Direction, spec: FaultSpec) -> Self {
        let held = spec.holds().then(|| Held::new(spec.hold));
        Injector {
            direction,
            spec,
            seq: 0,
            passed: 0,
            held,
            scratch: Box::new([0; MAX_FRAME]),
            counters: FaultCounters::default(),
        }
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.held.as_ref().map_or(0, Held::len)
    }

    /// Whether this injector can hold frames, so that [`Injector::release_due`] must be called.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// The earliest time at which [`Injector::release_due`] may have something to release.
    pub fn next_due(&self) -> Option<u64> {
        self.held.as_ref().and_then(Held::next_due)
    }

    /// Applies the next decision to `frame`, seen at `now` (nanoseconds on any monotonic
    /// clock): `emit` is called for each frame that goes on now, which may be none, the frame,
    /// its duplicate, and held frames that it was the last to overtake. Frames longer than
    /// [`MAX_FRAME`] (which the switch drops anyway) and frames the spec's filter leaves out go
    /// on untouched and uncounted.
    pub fn inject(&mut self, frame: &[u8], now: u64, emit: &mut impl FnMut(&[u8])) {
        if frame.len() > MAX_FRAME || !self.spec.only.matches(frame) {
            emit(frame);
            return;
        }
        let d = decide(&self.spec, self.direction, self.seq, frame);
        self.seq += 1;
        let c = &mut self.counters;
        c.frames += 1;
        if d.drop {
            c.dropped += 1;
            return;
        }
        let copies = 1 + u8::from(d.duplicate);
        if let Some(hold) = d.hold {
            // A hold is only ever decided when the spec holds, so the table exists.
            let Some(held) = self.held.as_mut() else {
                unreachable!("a hold decided without a hold table");
            };
            let (due_ns, due_count) = match hold {
                Hold::Delay { ns } => (now.saturating_add(ns), None),
                Hold::Reorder { frames, max_ns } => (
                    now.saturating_add(max_ns),
                    Some(self.passed + u64::from(frames)),
                ),
            };
            if !held.insert(frame, d.corrupt, copies, due_ns, due_count) {
                c.hold_overflow += 1;
                return;
            }
            match hold {
                Hold::Delay { .. } => c.delayed += 1,
                Hold::Reorder { .. } => c.reordered += 1,
            }
        } else {
            let out: &[u8] = match d.corrupt {
                None => frame,
                Some(corrupt) => {
                    let copy = &mut self.scratch[..frame.len()];
                    copy.copy_from_slice(frame);
                    copy[corrupt.at] ^= corrupt.mask;
                    copy
                }
            };
            for _ in 0..copies {
                emit(out);
            }
            c.emitted += u64::from(copies);
            self.passed += u64::from(copies);
            if let Some(held) = self.held.as_mut() {
                c.emitted += held.release(true, self.passed, emit);
            }
        }
        c.corrupted += u64::from(d.corrupt.is_some());
        c.duplicated += u64::from(d.duplicate);
    }

    /// Passes on, through `emit`, every held frame whose time has come at `now`.
    pub fn release_due(&mut self, now: u64, emit: &mut impl FnMut(&[u8])) {
        if let Some(held) = self.held.as_mut() {
            self.counters.emitted += held.release(false, now, emit);
        }
    }

    /// Passes on every held frame at once, in the order they were due.
    pub fn release_all(&mut self, emit: &mut impl FnMut(&[u8])) {
        self.release_due(u64::MAX, emit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame carrying an IPv4 packet of `payload` (at least 24) bytes past its
    /// 20-byte header, whose payload starts with `id` three times, so that the id survives any
    /// one corrupted byte.
    fn ipv4_frame(id: u64, payload: usize) -> Vec<u8> {
        assert!(payload >= 24);
        let total = IPV4_HEADER_MIN + payload;
        let mut f = vec![0u8; ETHERNET_HEADER + total];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        let at = ETHERNET_HEADER + IPV4_HEADER_MIN;
        for copy in 0..3 {
            f[at + 8 * copy..at + 8 * copy + 8].copy_from_slice(&id.to_le_bytes());
        }
        f
    }

    /// The id [`ipv4_frame`] wrote, by majority of its three copies.
    fn frame_id(f: &[u8]) -> u64 {
        let at = ETHERNET_HEADER + IPV4_HEADER_MIN;
        let copy = |i: usize| u64::from_le_bytes(f[at + 8 * i..at + 8 * i + 8].try_into().unwrap());
        if copy(0) == copy(1) || copy(0) == copy(2) {
            copy(0)
        } else {
            copy(1)
        }
    }

    fn spec() -> FaultSpec {
        FaultSpec {
            seed: 42,
            ..FaultSpec::default()
        }
    }

    /// Runs `frames` frames through an injector, one every `step` ns, releasing due frames
    /// before each, then everything; returns the frames emitted, in order, and the injector.
    fn run(spec: FaultSpec, frames: u64, step: u64) -> (Vec<Vec<u8>>, Injector) {
        let mut inj = Injector::new(Direction::Rx, spec);
        let mut out = Vec::new();
        let mut emit = |f: &[u8]| out.push(f.to_vec());
        for i in 0..frames {
            let now = i * step;
            inj.release_due(now, &mut emit);
            inj.inject(&ipv4_frame(i, 64), now, &mut emit);
        }
        inj.release_all(&mut emit);
        (out, inj)
    }

    fn rate(count: u64, of: u64) -> f64 {
        count as f64 / of as f64
    }

    #[test]
    fn no_faults_pass_every_frame_untouched_and_in_order() {
        let (out, inj) = run(spec(), 1000, 1);
        assert_eq!(out.len(), 1000);
        for (i, f) in out.iter().enumerate() {
            assert_eq!(f, &ipv4_frame(i as u64, 64));
        }
        assert!(!inj.holds());
        assert!(!spec().is_active());
    }

    #[test]
    fn the_same_seed_gives_the_same_decisions_and_another_seed_does_not() {
        let s = FaultSpec {
            loss: 0.2,
            dup: 0.2,
            corrupt: 0.2,
            reorder: 0.2,
            delay: 0.2,
            delay_min_us: 1,
            delay_max_us: 50,
            ..spec()
        };
        let (a, _) = run(s.clone(), 2000, 3000);
        let (b, _) = run(s.clone(), 2000, 3000);
        assert_eq!(a, b);
        let (c, _) = run(FaultSpec { seed: 43, ..s }, 2000, 3000);
        assert_ne!(a, c);
    }

    #[test]
    fn directions_draw_independently_from_one_seed() {
        let s = FaultSpec {
            loss: 0.5,
            ..spec()
        };
        let frame = ipv4_frame(0, 64);
        let fates = |dir| {
            (0..256)
                .map(|seq| decide(&s, dir, seq, &frame).drop)
                .collect::<Vec<_>>()
        };
        assert_ne!(fates(Direction::Rx), fates(Direction::Tx));
        assert_ne!(fates(Direction::Tx), fates(Direction::Local));
    }

    #[test]
    fn rates_converge_to_the_probabilities() {
        const N: u64 = 200_000;
        let s = FaultSpec {
            loss: 0.05,
            dup: 0.1,
            corrupt: 0.2,
            reorder: 0.03,
            delay: 0.07,
            delay_min_us: 10,
            delay_max_us: 10,
            ..spec()
        };
        let frame = ipv4_frame(0, 100);
        let mut counts = [0u64; 5];
        for seq in 0..N {
            let d = decide(&s, Direction::Local, seq, &frame);
            counts[0] += u64::from(d.drop);
            if d.drop {
                continue;
            }
            counts[1] += u64::from(d.duplicate);
            counts[2] += u64::from(d.corrupt.is_some());
            counts[3] += u64::from(matches!(d.hold, Some(Hold::Reorder { .. })));
            counts[4] += u64::from(matches!(d.hold, Some(Hold::Delay { .. })));
        }
        let kept = N - counts[0];
        // Five standard deviations of a binomial at N = 200,000 are under 0.5%.
        let close = |got: f64, want: f64| (got - want).abs() < 0.005;
        assert!(close(rate(counts[0], N), 0.05), "loss {counts:?}");
        assert!(close(rate(counts[1], kept), 0.1), "dup {counts:?}");
        assert!(close(rate(counts[2], kept), 0.2), "corrupt {counts:?}");
        assert!(close(rate(counts[3], kept), 0.03), "reorder {counts:?}");
        // Delay applies to frames not reordered.
        assert!(
            close(rate(counts[4], kept - counts[3]), 0.07),
            "delay {counts:?}"
        );
    }

    #[test]
    fn corruption_flips_one_byte_of_the_ipv4_packet_and_never_arp() {
        let s = FaultSpec {
            corrupt: 1.0,
            ..spec()
        };
        let frame = ipv4_frame(7, 30);
        // Padding past the total length is left alone.
        let mut padded = frame.clone();
        padded.extend([0u8; 10]);
        let (mut first, mut last) = (usize::MAX, 0);
        for seq in 0..5000 {
            let d = decide(&s, Direction::Tx, seq, &padded);
            let c = d.corrupt.expect("corrupt = 1 corrupts every IPv4 frame");
            assert_ne!(c.mask, 0);
            assert!((ETHERNET_HEADER..frame.len()).contains(&c.at), "{c:?}");
            first = first.min(c.at);
            last = last.max(c.at);
        }
        assert_eq!((first, last), (ETHERNET_HEADER, frame.len() - 1));
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(decide(&s, Direction::Tx, 0, &arp).corrupt, None);

        let mut inj = Injector::new(Direction::Tx, s);
        let mut out = Vec::new();
        inj.inject(&frame, 0, &mut |f: &[u8]| out.push(f.to_vec()));
        let differing: Vec<usize> = (0..frame.len())
            .filter(|&i| out[0][i] != frame[i])
            .collect();
        assert_eq!(differing.len(), 1, "{differing:?}");
        inj.inject(&arp, 0, &mut |f: &[u8]| out.push(f.to_vec()));
        assert_eq!(out[1], arp);
        assert_eq!(inj.counters().corrupted, 1);
    }

    #[test]
    fn a_filter_leaves_other_frames_alone_and_unnumbered() {
        let s = FaultSpec {
            loss: 0.5,
            only: FrameFilter::Udp,
            ..spec()
        };
        let mut udp = ipv4_frame(0, 64);
        udp[ETHERNET_HEADER + 9] = 17;
        let mut tcp = udp.clone();
        tcp[ETHERNET_HEADER + 9] = 6;
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(FrameFilter::Udp.matches(&udp) && !FrameFilter::Udp.matches(&tcp));
        assert!(FrameFilter::Tcp.matches(&tcp) && !FrameFilter::Tcp.matches(&arp));
        assert!(FrameFilter::Ipv4.matches(&tcp) && !FrameFilter::Ipv4.matches(&arp));
        assert!(FrameFilter::All.matches(&arp));
        // The UDP frames' fates are the same with or without TCP and ARP frames between them.
        let fates = |others: bool| {
            let mut inj = Injector::new(Direction::Rx, s.clone());
            let mut fates = Vec::new();
            for _ in 0..200 {
                if others {
                    for f in [&tcp, &arp] {
                        let mut passed = 0;
                        inj.inject(f, 0, &mut |_: &[u8]| passed += 1);
                        assert_eq!(passed, 1);
                    }
                }
                let mut passed = 0;
                inj.inject(&udp, 0, &mut |_: &[u8]| passed += 1);
                fates.push(passed);
            }
            assert_eq!(inj.counters().frames, 200);
            fates
        };
        assert_eq!(fates(false), fates(true));
    }

    #[test]
    fn duplicates_follow_their_original() {
        let s = FaultSpec { dup: 1.0, ..spec() };
        let (out, inj) = run(s, 100, 1);
        assert_eq!(out.len(), 200);
        for (i, pair) in out.chunks(2).enumerate() {
            assert_eq!(pair[0], ipv4_frame(i as u64, 64));
            assert_eq!(pair[0], pair[1]);
        }
        assert_eq!(inj.counters().duplicated, 100);
    }

    #[test]
    fn a_delayed_frame_leaves_exactly_when_due() {
        let s = FaultSpec {
            delay: 1.0,
            delay_min_us: 100,
            delay_max_us: 100,
            ..spec()
        };
        let mut inj = Injector::new(Direction::Rx, s);
        let mut out = Vec::new();
        inj.inject(&ipv4_frame(1, 64), 1_000, &mut |f: &[u8]| {
            out.push(f.to_vec())
        });
        assert!(out.is_empty());
        assert_eq!(inj.held(), 1);
        assert_eq!(inj.next_due(), Some(101_000));
        inj.release_due(100_999, &mut |f: &[u8]| out.push(f.to_vec()));
        assert!(out.is_empty());
        inj.release_due(101_000, &mut |f: &[u8]| out.push(f.to_vec()));
        assert_eq!(out, vec![ipv4_frame(1, 64)]);
        assert_eq!(inj.held(), 0);
        assert_eq!(inj.counters().delayed, 1);
    }

    #[test]
    fn a_fixed_delay_keeps_the_order() {
        let s = FaultSpec {
            delay: 1.0,
            delay_min_us: 5,
            delay_max_us: 5,
            ..spec()
        };
        let (out, _) = run(s, 500, 1000);
        let ids: Vec<u64> = out.iter().map(|f| frame_id(f)).collect();
        assert_eq!(ids, (0..500).collect::<Vec<_>>());
    }

    #[test]
    fn a_reordered_frame_is_overtaken_by_the_gap() {
        // Find a seed whose frame 0 alone is reordered.
        let base = FaultSpec {
            reorder: 0.2,
            reorder_gap: 3,
            reorder_us: 1_000_000,
            ..spec()
        };
        let frame = ipv4_frame(0, 64);
        let seed = (0..10_000)
            .find(|&seed| {
                let s = FaultSpec {
                    seed,
                    ..base.clone()
                };
                (0..8)
                    .all(|seq| decide(&s, Direction::Rx, seq, &frame).hold.is_some() == (seq == 0))
            })
            .expect("some seed reorders only frame 0");
        let (out, inj) = run(FaultSpec { seed, ..base }, 8, 1);
        let ids: Vec<u64> = out.iter().map(|f| frame_id(f)).collect();
        assert_eq!(ids, vec![1, 2, 3, 0, 4, 5, 6, 7]);
        assert_eq!(inj.counters().reordered, 1);
    }

    #[test]
    fn a_reordered_frame_left_alone_leaves_after_its_time_limit() {
        let s = FaultSpec {
            reorder: 1.0,
            reorder_gap: 3,
            reorder_us: 200,
            ..spec()
        };
        let mut inj = Injector::new(Direction::Local, s);
        let mut out = Vec::new();
        inj.inject(&ipv4_frame(9, 64), 0, &mut |f: &[u8]| out.push(f.to_vec()));
        inj.release_due(199_999, &mut |f: &[u8]| out.push(f.to_vec()));
        assert!(out.is_empty());
        inj.release_due(200_000, &mut |f: &[u8]| out.push(f.to_vec()));
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_full_hold_table_drops_and_counts_and_never_grows() {
        let s = FaultSpec {
            delay: 1.0,
            delay_min_us: 1000,
            delay_max_us: 1000,
            hold: 4,
            ..spec()
        };
        let mut inj = Injector::new(Direction::Rx, s);
        let mut out = 0;
        for i in 0..10 {
            inj.inject(&ipv4_frame(i, 64), i, &mut |_: &[u8]| out += 1);
        }
        assert_eq!(inj.held(), 4);
        let c = inj.counters();
        assert_eq!((c.delayed, c.hold_overflow), (4, 6));
        inj.release_all(&mut |_: &[u8]| out += 1);
        assert_eq!(out, 4);
        // Refilled many times over, stale entries never make the release orders reallocate.
        let held = inj.held.as_ref().unwrap();
        let caps = (held.by_time.capacity(), held.by_count.capacity());
        for i in 0..10_000 {
            inj.inject(&ipv4_frame(i, 64), i * 10_000_000, &mut |_: &[u8]| {});
            inj.release_due(i * 10_000_000 + 5_000_000, &mut |_: &[u8]| {});
        }
        let held = inj.held.as_ref().unwrap();
        assert_eq!((held.by_time.capacity(), held.by_count.capacity()), caps);
    }

    #[test]
    fn stale_entries_of_reordered_frames_are_purged_not_accumulated() {
        // Every frame reordered with a long time limit: each leaves by count, leaving a stale
        // time entry behind.
        let s = FaultSpec {
            reorder: 0.5,
            reorder_gap: 1,
            reorder_us: 1_000_000,
            hold: 8,
            ..spec()
        };
        let mut inj = Injector::new(Direction::Rx, s);
        for i in 0..100_000 {
            inj.inject(&ipv4_frame(i, 64), i, &mut |_: &[u8]| {});
        }
        let held = inj.held.as_ref().unwrap();
        assert!(held.by_time.len() <= 16 && held.by_time.capacity() <= 64);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn any_spec() -> impl Strategy<Value = FaultSpec> {
            (
                any::<u64>(),
                (0.0..=1.0f64, 0.0..=1.0f64, 0.0..=1.0f64),
                (0.0..=1.0f64, 0u64..300, 0u64..300),
                (0.0..=1.0f64, 1u32..6, 1u64..500),
                1usize..16,
            )
                .prop_map(
                    |(seed, (loss, dup, corrupt), (delay, a, b), (reorder, gap, rus), hold)| {
                        FaultSpec {
                            seed,
                            loss,
                            dup,
                            corrupt,
                            delay,
                            delay_min_us: a.min(b),
                            delay_max_us: a.max(b),
                            reorder,
                            reorder_gap: gap,
                            reorder_us: rus,
                            hold,
                            only: FrameFilter::All,
                        }
                    },
                )
        }

        /// A run: frames of these payload lengths, each this many ns after the last, with
        /// releases at those times. Returns what left, in order, and the injector.
        fn play(spec: &FaultSpec, frames: &[(usize, u64)]) -> (Vec<Vec<u8>>, Injector) {
            let mut inj = Injector::new(Direction::Tx, spec.clone());
            let mut out = Vec::new();
            let mut now = 0;
            for (i, &(len, gap)) in frames.iter().enumerate() {
                now += gap;
                inj.release_due(now, &mut |f: &[u8]| out.push(f.to_vec()));
                inj.inject(&ipv4_frame(i as u64, len), now, &mut |f: &[u8]| {
                    out.push(f.to_vec())
                });
            }
            assert!(inj.held() <= spec.hold);
            inj.release_all(&mut |f: &[u8]| out.push(f.to_vec()));
            (out, inj)
        }

        proptest! {
            #[test]
            fn same_seed_and_input_same_output(
                spec in any_spec(),
                frames in prop::collection::vec((24usize..200, 0u64..400_000), 0..300),
            ) {
                let (a, ia) = play(&spec, &frames);
                let (b, ib) = play(&spec, &frames);
                prop_assert_eq!(a, b);
                prop_assert_eq!(ia.counters(), ib.counters());
            }

            #[test]
            fn every_frame_is_accounted_for_and_all_are_released(
                spec in any_spec(),
                frames in prop::collection::vec((24usize..200, 0u64..400_000), 0..300),
            ) {
                let (out, inj) = play(&spec, &frames);
                let c = inj.counters();
                prop_assert_eq!(inj.held(), 0);
                prop_assert_eq!(c.frames, frames.len() as u64);
                prop_assert_eq!(c.emitted, out.len() as u64);
                prop_assert_eq!(c.frames + c.duplicated, c.emitted + c.dropped + c.hold_overflow);
                // Each frame that left is one handed in, intact but for at most one byte.
                let mut seen = vec![0u32; frames.len()];
                let mut corrupted = 0u64;
                for f in &out {
                    let i = frame_id(f) as usize;
                    prop_assert!(i < frames.len(), "a frame nobody sent");
                    let original = ipv4_frame(i as u64, frames[i].0);
                    prop_assert_eq!(original.len(), f.len());
                    let differ = original.iter().zip(f).filter(|(x, y)| x != y).count();
                    prop_assert!(differ <= 1, "{} bytes of frame {} changed", differ, i);
                    seen[i] += 1;
                    corrupted += u64::from(differ == 1);
                }
                prop_assert!(seen.iter().all(|&n| n <= 2));
                prop_assert!(corrupted <= 2 * c.corrupted);
                prop_assert!(c.delayed + c.reordered + c.hold_overflow <= c.frames - c.dropped);
            }
        }
    }
}
