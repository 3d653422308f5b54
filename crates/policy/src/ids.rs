//! Identifiers the allocator accepts and hands out.

/// A managed core, numbered densely from 0 within the allocator's [`Topology`](crate::Topology).
///
/// These are not CPU numbers: the daemon keeps the map from managed cores to the CPUs it was
/// given, so that the allocator's tables stay dense.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreId(pub u16);

impl CoreId {
    /// The position of this core in tables indexed by core.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A kthread of one runtime: its position in the runtime's kthread table (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KthreadIndex(pub u16);

impl KthreadIndex {
    /// The position of this kthread in its runtime's kthread table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A registered runtime.
///
/// The slot is reused after the runtime unregisters; the generation is not, so an id kept past
/// unregistration (a late event from a dying connection, say) is rejected instead of landing on
/// the slot's next tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuntimeId {
    slot: u32,
    generation: u32,
}

impl RuntimeId {
    /// Rebuilds an id from its parts, for callers that store ids outside the allocator.
    pub const fn from_parts(slot: u32, generation: u32) -> Self {
        Self { slot, generation }
    }

    /// The table slot this runtime occupies while registered.
    #[inline]
    pub const fn slot(self) -> u32 {
        self.slot
    }

    /// Distinguishes successive tenants of one slot.
    #[inline]
    pub const fn generation(self) -> u32 {
        self.generation
    }

    #[inline]
    pub(crate) const fn slot_index(self) -> usize {
        self.slot as usize
    }
}

impl core::fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "runtime {}.{}", self.slot, self.generation)
    }
}
