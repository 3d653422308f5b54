//! Which managed cores share a physical core.

use crate::ids::CoreId;

/// Most cores one allocator manages.
pub const MAX_CORES: usize = 1024;

/// The managed cores and their hyperthread siblings.
///
/// Built by the caller (from sysfs in the daemon); the allocator only needs to know, for each
/// core, which other managed core shares its L1/L2 caches, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    siblings: Vec<Option<CoreId>>,
}

/// Why a [`Topology`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// There must be at least one managed core.
    NoCores,
    /// More than [`MAX_CORES`] cores.
    TooManyCores { cores: usize },
    /// A sibling that is not one of the managed cores.
    SiblingOutOfRange { core: CoreId, sibling: CoreId },
    /// A core named as its own sibling.
    OwnSibling { core: CoreId },
    /// `core` names `sibling`, but `sibling` does not name `core` back.
    NotMutual { core: CoreId, sibling: CoreId },
}

impl core::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::NoCores => write!(f, "topology has no cores"),
            Self::TooManyCores { cores } => {
                write!(
                    f,
                    "topology has {cores} cores, more than the {MAX_CORES} supported"
                )
            }
            Self::SiblingOutOfRange { core, sibling } => write!(
                f,
                "core {} names sibling {}, which is not a managed core",
                core.0, sibling.0
            ),
            Self::OwnSibling { core } => write!(f, "core {} names itself as sibling", core.0),
            Self::NotMutual { core, sibling } => write!(
                f,
                "core {} names sibling {}, which does not name it back",
                core.0, sibling.0
            ),
        }
    }
}

impl std::error::Error for TopologyError {}

impl Topology {
    /// `cores` cores, none sharing a physical core.
    pub fn without_hyperthreads(cores: usize) -> Result<Self, TopologyError> {
        Self::from_siblings(vec![None; cores])
    }

    /// `cores` cores where 2i and 2i+1 share a physical core. With an odd count the last core
    /// has no sibling (its pair is not managed).
    pub fn hyperthread_pairs(cores: usize) -> Result<Self, TopologyError> {
        let siblings = (0..cores)
            .map(|core| {
                let pair = core ^ 1;
                // `pair < cores` also keeps the id within u16, as cores <= MAX_CORES is checked below.
                (pair < cores).then_some(CoreId(pair as u16))
            })
            .collect();
        Self::from_siblings(siblings)
    }

    /// Any layout: `siblings[i]` is the sibling of core `i`. Siblings must name each other.
    pub fn from_siblings(siblings: Vec<Option<CoreId>>) -> Result<Self, TopologyError> {
        if siblings.is_empty() {
            return Err(TopologyError::NoCores);
        }
        if siblings.len() > MAX_CORES {
            return Err(TopologyError::TooManyCores {
                cores: siblings.len(),
            });
        }
        for (index, sibling) in siblings.iter().enumerate() {
            let core = CoreId(index as u16);
            let Some(sibling) = *sibling else { continue };
            if sibling == core {
                return Err(TopologyError::OwnSibling { core });
            }
            match siblings.get(sibling.index()) {
                None => return Err(TopologyError::SiblingOutOfRange { core, sibling }),
                Some(back) if *back != Some(core) => {
                    return Err(TopologyError::NotMutual { core, sibling });
                }
                Some(_) => {}
            }
        }
        Ok(Self { siblings })
    }

    /// Number of managed cores.
    pub fn core_count(&self) -> usize {
        self.siblings.len()
    }

    /// The core sharing `core`'s physical core, if it is managed too. `None` also for a core
    /// that is not managed.
    pub fn sibling(&self, core: CoreId) -> Option<CoreId> {
        self.siblings.get(core.index()).copied().flatten()
    }

    /// All managed cores, in order.
    pub fn cores(&self) -> impl Iterator<Item = CoreId> + '_ {
        (0..self.siblings.len()).map(|index| CoreId(index as u16))
    }
}
