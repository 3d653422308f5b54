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

/// How the daemon's settings that any policy may use map onto a policy, and the policy's own
/// options; whatever the options leave out is at the policy's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySettings {
    /// How long (in the caller's time unit) a preempted kthread may keep its core before
    /// [`Decision::PreemptionOverdue`](crate::Decision::PreemptionOverdue); `None` never
    /// reports.
    pub preemption_timeout: Option<u64>,
    /// How long (in the caller's time unit) a runtime keeps a granted core before a runtime
    /// of equal standing (at or above its guarantee) may take it; 0: at once. Policies that
    /// never preempt ignore it.
    pub share_quantum: u64,
    /// The policy's own options as `(key, value)` text, as given (iokerneld's and corral-sim's
    /// `--policy-option KEY=VALUE`); [`PolicyEntry::options`] lists the keys each takes, and
    /// any other is refused.
    pub options: Vec<(String, String)>,
}

impl PolicySettings {
    /// The value given for `key`, the last one if given more than once.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value given for `key` parsed as a `T` that must satisfy `valid` (which `expected`
    /// describes); `None` if not given.
    pub fn parsed<T: core::str::FromStr>(
        &self,
        key: &str,
        expected: &str,
        valid: impl Fn(&T) -> bool,
    ) -> Result<Option<T>, OptionError> {
        let Some(text) = self.option(key) else {
            return Ok(None);
        };
        match text.trim().parse::<T>() {
            Ok(value) if valid(&value) => Ok(Some(value)),
            _ => Err(OptionError {
                key: key.into(),
                value: text.into(),
                expected: expected.into(),
            }),
        }
    }
}

/// `KEY=VALUE` as a policy option, spaces around each trimmed; `None` without an `=` or a key.
pub fn parse_option(text: &str) -> Option<(String, String)> {
    let (key, value) = text.split_once('=')?;
    let key = key.trim();
    (!key.is_empty()).then(|| (key.to_owned(), value.trim().to_owned()))
}

/// A policy option whose value the policy cannot use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub key: String,
    pub value: String,
    pub expected: String,
}

/// A policy that can be selected by name.
#[derive(Clone, Copy, Debug)]
pub struct PolicyEntry {
    /// What the configuration calls it (`policy = "..."`).
    pub name: &'static str,
    /// One line on what it does, for error messages and `--help`.
    pub summary: &'static str,
    /// The options it takes (`--policy-option KEY=VALUE`): each key and what it sets.
    pub options: &'static [(&'static str, &'static str)],
    /// A new instance over `topology`, all cores idle; an option value it cannot use is
    /// refused (keys not in [`PolicyEntry::options`] never reach it).
    pub build: BuildPolicy,
}

/// How a [`PolicyEntry`] builds its policy.
pub type BuildPolicy = fn(Topology, &PolicySettings) -> Result<Box<dyn Policy>, OptionError>;

/// Why a policy could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyError {
    Unknown(UnknownPolicy),
    /// An option the policy does not take.
    UnknownOption {
        policy: &'static str,
        key: String,
    },
    /// An option value the policy cannot use.
    BadOption {
        policy: &'static str,
        error: OptionError,
    },
}

impl core::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PolicyError::Unknown(unknown) => unknown.fmt(f),
            PolicyError::UnknownOption { policy, key } => {
                write!(f, "policy {policy:?} has no option {key:?}; ")?;
                describe_options(f, policy)
            }
            PolicyError::BadOption { policy, error } => write!(
                f,
                "policy {policy:?} option {} = {:?}: expected {}",
                error.key, error.value, error.expected
            ),
        }
    }
}

/// "its options: KEY (what it sets), ..." or "it takes none", for `policy`.
fn describe_options(f: &mut core::fmt::Formatter<'_>, policy: &str) -> core::fmt::Result {
    let options = KNOWN
        .iter()
        .find(|entry| entry.name == policy)
        .map_or(&[][..], |entry| entry.options);
    if options.is_empty() {
        return f.write_str("it takes none");
    }
    f.write_str("its options:")?;
    for (index, (key, what)) in options.iter().enumerate() {
        let separator = if index == 0 { " " } else { ", " };
        write!(f, "{separator}{key} ({what})")?;
    }
    Ok(())
}

impl std::error::Error for PolicyError {}

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

/// The policy registered as `name`, over `topology`, with `settings`' options.
pub fn build(
    name: &str,
    topology: Topology,
    settings: &PolicySettings,
) -> Result<Box<dyn Policy>, PolicyError> {
    let entry = KNOWN
        .iter()
        .find(|entry| entry.name == name)
        .ok_or_else(|| PolicyError::Unknown(UnknownPolicy { name: name.into() }))?;
    if let Some((key, _)) = settings
        .options
        .iter()
        .find(|(key, _)| !entry.options.iter().any(|(known, _)| known == key))
    {
        return Err(PolicyError::UnknownOption {
            policy: entry.name,
            key: key.clone(),
        });
    }
    (entry.build)(topology, settings).map_err(|error| PolicyError::BadOption {
        policy: entry.name,
        error,
    })
}

/// Whether [`build`] would accept `name` and `settings` (over any topology), without keeping
/// what it builds: for checking a configuration before it is used.
pub fn check(name: &str, settings: &PolicySettings) -> Result<(), PolicyError> {
    let topology = Topology::without_hyperthreads(1).expect("one core is a topology");
    build(name, topology, settings).map(drop)
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
                options: Vec::new(),
            };
            let policy = build(entry.name, topology, &settings).unwrap();
            assert_eq!(policy.name(), entry.name);
            assert_eq!(policy.idle_core_count(), 4);
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let topology = Topology::without_hyperthreads(1).unwrap();
        let settings = PolicySettings::default();
        let error = build("fifo", topology, &settings).unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("unknown policy \"fifo\""), "{message}");
        for entry in KNOWN {
            assert!(message.contains(&format!("{:?}", entry.name)), "{message}");
        }
    }

    fn with(options: &[(&str, &str)]) -> PolicySettings {
        PolicySettings {
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PolicySettings::default()
        }
    }

    #[test]
    fn each_documented_option_is_taken_and_others_are_refused_with_the_list() {
        for (name, key, good, bad) in [
            ("arachne", "scale_up_load_factor", "2.5", "-1"),
            ("arachne", "scale_down_hysteresis", "0.2", "nan"),
            ("arachne", "interval_us", "5000", "0"),
            ("shenango", "burst_sharing", "any-bursting", "sometimes"),
            ("static", "cores_per_runtime", "2", "0"),
        ] {
            assert!(
                check(name, &with(&[(key, good)])).is_ok(),
                "{name} {key}={good}"
            );
            let error = check(name, &with(&[(key, bad)])).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, PolicyError::BadOption { .. })
                    && message.contains(key)
                    && message.contains(bad),
                "{name} {key}={bad}: {message}"
            );
        }
        let error = check("arachne", &with(&[("burst_sharing", "balanced")])).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("has no option \"burst_sharing\"")
                && message.contains("scale_up_load_factor ("),
            "{message}"
        );
        // The last value given for a key is the one taken.
        let twice = with(&[("interval_us", "0"), ("interval_us", "1000")]);
        assert_eq!(twice.option("interval_us"), Some("1000"));
        assert!(check("arachne", &twice).is_ok());
    }

    #[test]
    fn options_change_what_is_built() {
        let topology = Topology::without_hyperthreads(2).unwrap();
        let policy = build(
            "arachne",
            topology,
            &with(&[("interval_us", "5000"), ("scale_up_load_factor", "1.25")]),
        )
        .unwrap();
        let described = format!("{policy:?}");
        assert!(described.contains("interval: 5000000"), "{described}");
        assert!(
            described.contains("scale_up_load_factor: 1.25"),
            "{described}"
        );
    }
}
