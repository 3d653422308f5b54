//! The settings `corral-run` passes to the shim through the environment, and the runtime
//! configuration they make.

use corral::{Config, IokernelSettings, PreemptionMode};

/// Set by `corral-run`: the shim then removes its variables and its own `LD_PRELOAD` entry from
/// the environment, so that programs the program starts run as plain Linux programs (unless
/// [`CHILDREN_ENV`] says otherwise; an exec that replaces the program keeps them, see `exec`).
pub const LAUNCHED_ENV: &str = "CORRAL_RUN";
pub const KTHREADS_ENV: &str = "CORRAL_RUN_KTHREADS";
pub const MAX_CORES_ENV: &str = "CORRAL_RUN_MAX_CORES";
pub const NAME_ENV: &str = "CORRAL_RUN_NAME";
pub const GUARANTEED_ENV: &str = "CORRAL_RUN_GUARANTEED";
/// `idle-class` or `signal`: how iokerneld takes a core back (see [`Settings::preemption`]).
pub const PREEMPTION_ENV: &str = "CORRAL_RUN_PREEMPTION";
/// Kthreads kept in reserve for kthreads blocked in system calls (standalone only).
pub const BLOCKING_RESERVE_ENV: &str = "CORRAL_RUN_BLOCKING_RESERVE";
/// The reserve without `--blocking-reserve`: enough for the threads a program commonly blocks
/// in the kernel at once (an event loop, a signal thread, a timer thread, a few readers).
pub const DEFAULT_BLOCKING_RESERVE: usize = 8;
/// `LD_PRELOAD` as it was before `corral-run` added the shim (unset if it was unset).
pub const PREVIOUS_PRELOAD_ENV: &str = "CORRAL_RUN_LD_PRELOAD";
/// `plain` (the default) or `corral`: whether the programs this one starts run under Corral.
pub const CHILDREN_ENV: &str = "CORRAL_RUN_CHILDREN";
/// Every variable `corral-run` sets for the shim but `LD_PRELOAD` and the iokerneld socket.
pub const LAUNCHER_VARS: &[&str] = &[
    LAUNCHED_ENV,
    KTHREADS_ENV,
    MAX_CORES_ENV,
    NAME_ENV,
    GUARANTEED_ENV,
    PREEMPTION_ENV,
    BLOCKING_RESERVE_ENV,
    PREVIOUS_PRELOAD_ENV,
    CHILDREN_ENV,
];
/// iokerneld's control socket: the runtime's own variable.
pub const IOKERNELD_ENV: &str = corral::IOKERNELD_SOCKET_ENV;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub kthreads: Option<usize>,
    pub max_cores: Option<usize>,
    pub iokerneld: Option<String>,
    pub name: Option<String>,
    pub guaranteed: Option<usize>,
    /// How iokerneld takes a core back; by default the idle class for a runtime with no
    /// guarantee (a batch job), the signal at once for one with a guarantee.
    pub preemption: Option<PreemptionMode>,
    /// Standalone only; [`DEFAULT_BLOCKING_RESERVE`] when not given.
    pub blocking_reserve: Option<usize>,
    /// `--children corral`: the programs this one starts run under Corral too.
    pub children_too: bool,
}

fn count(key: &str, value: Option<String>) -> Result<Option<usize>, String> {
    value
        .map(|v| {
            v.parse::<usize>()
                .map_err(|_| format!("{key}={v:?}: expected a whole number"))
        })
        .transpose()
}

impl Settings {
    /// Reads the settings from `var` (the environment, or a test's table).
    pub fn read(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let s = Settings {
            kthreads: count(KTHREADS_ENV, var(KTHREADS_ENV))?,
            max_cores: count(MAX_CORES_ENV, var(MAX_CORES_ENV))?,
            iokerneld: var(IOKERNELD_ENV).filter(|s| !s.is_empty()),
            name: var(NAME_ENV),
            guaranteed: count(GUARANTEED_ENV, var(GUARANTEED_ENV))?,
            blocking_reserve: count(BLOCKING_RESERVE_ENV, var(BLOCKING_RESERVE_ENV))?,
            children_too: match var(CHILDREN_ENV).as_deref() {
                None | Some("plain") => false,
                Some("corral") => true,
                Some(other) => {
                    return Err(format!(
                        "{CHILDREN_ENV}={other:?}: expected plain or corral"
                    ));
                }
            },
            preemption: match var(PREEMPTION_ENV).as_deref() {
                None => None,
                Some("idle-class") => Some(PreemptionMode::IdleClass),
                Some("signal") => Some(PreemptionMode::SignalAtOnce),
                Some(other) => {
                    return Err(format!(
                        "{PREEMPTION_ENV}={other:?}: expected idle-class or signal"
                    ));
                }
            },
        };
        s.check()?;
        Ok(s)
    }

    /// Checks what can be checked before starting the runtime (which checks the rest).
    pub fn check(&self) -> Result<(), String> {
        if let (Some(k), Some(m)) = (self.kthreads, self.max_cores)
            && k > m
        {
            return Err(format!("--kthreads {k} exceeds --max-cores {m}"));
        }
        if self.iokerneld.is_none() {
            if self.guaranteed.is_some() {
                return Err("--guaranteed needs --iokerneld".into());
            }
            if self.preemption.is_some() {
                return Err("--preemption needs --iokerneld".into());
            }
            if self.name.is_some() {
                return Err("--name needs --iokerneld".into());
            }
        } else if self.blocking_reserve.is_some() {
            return Err("--blocking-reserve is for standalone runs".into());
        }
        Ok(())
    }

    /// The runtime configuration: each uthread has its own TLS; under iokerneld, the runtime
    /// registers with this name and guarantee, as many kthreads as the cores it may get, and
    /// its preemption mode.
    pub fn config(&self, program: &str) -> Config {
        let mut config = Config::default()
            .uthread_tls(true)
            .stack_size(crate::thread::DEFAULT_STACK_SIZE);
        // Under iokerneld a runtime may hold as many cores as it has kthreads.
        if let Some(k) = self.kthreads.or(self.max_cores) {
            config = config.kthreads(k);
        }
        if self.iokerneld.is_none() {
            config =
                config.blocking_reserve(self.blocking_reserve.unwrap_or(DEFAULT_BLOCKING_RESERVE));
        }
        if let Some(socket) = &self.iokerneld {
            let name = self
                .name
                .clone()
                .unwrap_or_else(|| program.chars().take(32).collect());
            // An unmodified program reaches no preemption point while it computes, so waiting
            // out iokerneld's grace period for it to cede would only delay every hand-over.
            // Without a guarantee it is a batch job: in the idle class, a core is taken from it
            // by running the taker in its place, with no signal at all. With one, it must not
            // yield to whatever else Linux runs on its core, so it is signalled.
            let guaranteed = self.guaranteed.unwrap_or(0);
            let preemption = self.preemption.unwrap_or(if guaranteed == 0 {
                PreemptionMode::IdleClass
            } else {
                PreemptionMode::SignalAtOnce
            });
            config = config.iokernel(
                IokernelSettings::new(socket, name)
                    .guaranteed_cores(guaranteed)
                    .preemption_mode(preemption),
            );
        }
        config
    }
}
