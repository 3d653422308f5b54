//! A runtime's receive backlog: frames for it that found no posted receive buffer or no room on
//! the ingress ring of the kthread they were steered to, held here in arrival order until the
//! runtime posts buffers again.
//!
//! Why iokerneld holds them rather than drop them: a burst of small frames (many clients asking
//! at once) can arrive faster than a runtime that is waiting for a core, or sharing one, hands
//! its buffers back, and each dropped TCP segment costs its sender a retransmission timeout
//! (200 ms or more on Linux). Linux's own sockets absorb such a burst in their receive buffers;
//! this is where Corral absorbs it. Frames are held in fixed slots of one allocation made at
//! registration, so holding and handing over allocate nothing; the pages of slots never used
//! are never touched, so an idle backlog costs address space only.
//!
//! While anything is held, every new frame for the runtime joins the back of the queue, so a
//! flow's frames still arrive in order.

/// Bytes of one slot: any frame iokerneld switches fits in one.
pub const BACKLOG_SLOT_BYTES: usize = 2048;
const _: () = assert!(super::MAX_FRAME <= BACKLOG_SLOT_BYTES);

/// A bounded first-in first-out queue of frames.
pub struct Backlog {
    /// `capacity` slots of [`BACKLOG_SLOT_BYTES`] each; empty when the capacity is 0.
    slots: Box<[u8]>,
    /// Length of the frame in each slot.
    lengths: Box<[u16]>,
    capacity: usize,
    head: usize,
    len: usize,
    /// The most frames held at once since registration.
    high_water: usize,
}

impl Backlog {
    /// A backlog of `capacity` frames (0: holds nothing).
    pub fn new(capacity: usize) -> Self {
        Self {
            // Zeroed memory this large comes straight from the kernel, untouched until written.
            slots: vec![0; capacity * BACKLOG_SLOT_BYTES].into_boxed_slice(),
            lengths: vec![0; capacity].into_boxed_slice(),
            capacity,
            head: 0,
            len: 0,
            high_water: 0,
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Holds a copy of `frame` at the back; `false` (and nothing held) if the backlog is full
    /// or the frame longer than a slot.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if self.len == self.capacity || frame.len() > BACKLOG_SLOT_BYTES {
            return false;
        }
        let at = (self.head + self.len) % self.capacity;
        let start = at * BACKLOG_SLOT_BYTES;
        self.slots[start..start + frame.len()].copy_from_slice(frame);
        self.lengths[at] = frame.len() as u16;
        self.len += 1;
        self.high_water = self.high_water.max(self.len);
        true
    }

    /// The frame at the front, if any.
    #[inline]
    pub fn front(&self) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        let start = self.head * BACKLOG_SLOT_BYTES;
        Some(&self.slots[start..start + usize::from(self.lengths[self.head])])
    }

    /// Forgets the frame at the front.
    pub fn pop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = (self.head + 1) % self.capacity;
        self.len -= 1;
    }
}

impl Default for Backlog {
    fn default() -> Self {
        Self::new(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn holds_in_order_up_to_its_capacity() {
        let mut b = Backlog::new(3);
        assert!(b.push(b"one"));
        assert!(b.push(b"two"));
        assert!(b.push(b"three"));
        assert!(!b.push(b"four"), "full");
        assert_eq!(b.front(), Some(&b"one"[..]));
        b.pop_front();
        assert!(b.push(b"four"), "room again, past the wrap");
        let mut out = Vec::new();
        while let Some(f) = b.front() {
            out.push(f.to_vec());
            b.pop_front();
        }
        assert_eq!(out, [&b"two"[..], b"three", b"four"]);
        assert_eq!(b.high_water(), 3);
        assert!(b.is_empty());
    }

    #[test]
    fn a_zero_capacity_backlog_holds_nothing() {
        let mut b = Backlog::new(0);
        assert!(!b.push(b"x"));
        assert!(b.front().is_none());
        b.pop_front();
        assert!(b.is_empty());
    }

    #[test]
    fn refuses_a_frame_longer_than_a_slot() {
        let mut b = Backlog::new(2);
        assert!(!b.push(&[0; BACKLOG_SLOT_BYTES + 1]));
        assert!(b.push(&[7; BACKLOG_SLOT_BYTES]));
        assert_eq!(b.front().map(<[u8]>::len), Some(BACKLOG_SLOT_BYTES));
    }

    proptest! {
        /// Against a plain queue: the same frames come out, in order, and nothing past the
        /// capacity is ever held.
        #[test]
        fn behaves_like_a_bounded_queue(
            capacity in 0usize..6,
            ops in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
                    Just(None),
                ],
                0..200,
            ),
        ) {
            let mut b = Backlog::new(capacity);
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for op in ops {
                match op {
                    Some(frame) => {
                        let fits = model.len() < capacity;
                        prop_assert_eq!(b.push(&frame), fits);
                        if fits {
                            model.push_back(frame);
                        }
                    }
                    None => {
                        prop_assert_eq!(b.front().map(<[u8]>::to_vec), model.front().cloned());
                        b.pop_front();
                        model.pop_front();
                    }
                }
                prop_assert_eq!(b.len(), model.len());
                prop_assert!(b.high_water() <= capacity);
            }
        }
    }
}
