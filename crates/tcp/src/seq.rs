//! Sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293 §3.4).
//!
//! Comparisons are only meaningful between numbers less than 2^31 apart, which every window
//! this engine accepts guarantees.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in a connection's sequence space.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// Signed distance from `other` to `self`.
    #[inline]
    pub const fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self < other` in sequence space.
    #[inline]
    pub const fn lt(self, other: Seq) -> bool {
        self.diff(other) < 0
    }

    /// `self <= other` in sequence space.
    #[inline]
    pub const fn le(self, other: Seq) -> bool {
        self.diff(other) <= 0
    }

    /// `self > other` in sequence space.
    #[inline]
    pub const fn gt(self, other: Seq) -> bool {
        self.diff(other) > 0
    }

    /// `self >= other` in sequence space.
    #[inline]
    pub const fn ge(self, other: Seq) -> bool {
        self.diff(other) >= 0
    }

    /// Whether `self` lies in the half-open range `[start, end)`.
    #[inline]
    pub const fn in_range(self, start: Seq, end: Seq) -> bool {
        self.ge(start) && self.lt(end)
    }

    /// The later of two sequence numbers.
    #[inline]
    pub const fn max(self, other: Seq) -> Seq {
        if self.ge(other) { self } else { other }
    }

    /// The earlier of two sequence numbers.
    #[inline]
    pub const fn min(self, other: Seq) -> Seq {
        if self.le(other) { self } else { other }
    }
}

impl Add<u32> for Seq {
    type Output = Seq;
    #[inline]
    fn add(self, rhs: u32) -> Seq {
        Seq(self.0.wrapping_add(rhs))
    }
}

impl AddAssign<u32> for Seq {
    #[inline]
    fn add_assign(&mut self, rhs: u32) {
        self.0 = self.0.wrapping_add(rhs);
    }
}

/// The number of octets from `rhs` up to `self`; callers only subtract an earlier point from a
/// later one.
impl Sub for Seq {
    type Output = u32;
    #[inline]
    fn sub(self, rhs: Seq) -> u32 {
        self.0.wrapping_sub(rhs.0)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_around() {
        let a = Seq(u32::MAX - 1);
        let b = a + 4;
        assert_eq!(b, Seq(2));
        assert!(a.lt(b));
        assert!(b.gt(a));
        assert_eq!(b - a, 4);
        assert!(Seq(u32::MAX).in_range(a, b));
        assert!(!b.in_range(a, b));
    }

    proptest! {
        #[test]
        fn order_is_consistent_within_half_the_space(x: u32, d in 1u32..(1 << 31)) {
            let a = Seq(x);
            let b = a + d;
            prop_assert!(a.lt(b) && b.gt(a) && a.le(b) && !a.ge(b));
            prop_assert_eq!(b - a, d);
            prop_assert_eq!(a.max(b), b);
            prop_assert_eq!(a.min(b), a);
        }
    }
}
