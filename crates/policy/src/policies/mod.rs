//! The registry of policies the daemon can be started with, by name.
//!
//! A policy is one module here that exports `ENTRY: PolicyEntry`; naming the module in the
//! `registry!` list below declares it and makes it selectable.

use crate::{Policy, Topology};

macro_rules! registry {
    ($($policy:ident),+ $(,)?) => {
        $(pub mod $policy;)+

        /// Every policy the daemon can be started with.
        pub const KNOWN: &[PolicyEntry] = &[$($policy::ENTRY),+];
    };
}

registry! {
    shenango,
    static_cores,
    arachne,
}

/// How the daemon's settings that any policy may use map onto a policy; everything else about a
/// policy is its own configuration, at its defaults when built by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicySettings {
    /// How long (in the caller's time unit) a preempted kthread may keep its core before
    /// [`Decision::PreemptionOverdue`](crate::Decision::PreemptionOverdue); `None` never
    /// reports.
    pub preemption_timeout: Option<u64>,
    /// How long (in the caller's time unit) a runtime keeps a granted core before a runtime
    /// of equal standing (at or above its guarantee) may take it; 0: at once. Policies that
    /// never preempt ignore it.
    pub share_quantum: u64,
}

/// A policy that can be selected by name.
#[derive(Clone, Copy, Debug)]
pub struct PolicyEntry {
    /// What the configuration calls it (`policy = "..."`).
    pub name: &'static str,
    /// One line on what it does, for error messages and `--help`.
    pub summary: &'static str,
    /// A new instance over `topology`, all cores idle.
    pub build: fn(Topology, &PolicySettings) -> Box<dyn Policy>,
}

/// A policy name that is not in [`KNOWN`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPolicy {
    pub name: String,
}

impl core::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "unknown policy {:?}; known policies:", self.name)?;
        for (index, entry) in KNOWN.iter().enumerate() {
            let separator = if index == 0 { " " } else { ", " };
            write!(f, "{separator}{:?} ({})", entry.name, entry.summary)?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownPolicy {}

/// The policy registered as `name`, over `topology`.
pub fn build(
    name: &str,
    topology: Topology,
    settings: &PolicySettings,
) -> Result<Box<dyn Policy>, UnknownPolicy> {
    let entry = KNOWN
        .iter()
        .find(|entry| entry.name == name)
        .ok_or_else(|| UnknownPolicy { name: name.into() })?;
    Ok((entry.build)(topology, settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_each_builds_what_it_names() {
        for (index, entry) in KNOWN.iter().enumerate() {
            assert!(KNOWN[..index].iter().all(|other| other.name != entry.name));
            let topology = Topology::without_hyperthreads(4).unwrap();
            let settings = PolicySettings {
                preemption_timeout: Some(1000),
                share_quantum: 1000,
            };
            let policy = build(entry.name, topology, &settings).unwrap();
            assert_eq!(policy.name(), entry.name);
            assert_eq!(policy.idle_core_count(), 4);
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let topology = Topology::without_hyperthreads(1).unwrap();
        let settings = PolicySettings {
            preemption_timeout: None,
            share_quantum: 0,
        };
        let error = build("fifo", topology, &settings).unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("unknown policy \"fifo\""), "{message}");
        for entry in KNOWN {
            assert!(message.contains(&format!("{:?}", entry.name)), "{message}");
        }
    }
}
