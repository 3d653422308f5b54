//! iokerneld's settings: a TOML file (`--config FILE`) overridden by command-line flags, checked
//! against the machine before anything starts.
//!
//! Every refusal names the setting and the value it was given, so that a typo in a config file
//! can be fixed from the message alone.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;

use crate::cpus::{Sysfs, format_cpu_list, parse_cpu_list};
use crate::daemon::faults::{
    Direction, FaultSpec, FrameFilter, MAX_DELAY_US, MAX_HOLD, MAX_REORDER_GAP, MAX_REORDER_US,
};

/// Default control socket.
pub const DEFAULT_SOCKET: &str = "/run/corral/iokerneld.sock";
pub const DEFAULT_INTERVAL_US: u64 = 5;
// Longer than a CFS time slice (a few ms): on cores Linux also schedules other tasks on, a
// kthread can wait that long behind one of them with the signal pending, through no fault of
// its own. Cores isolated from Linux (isolcpus) can use far less.
pub const DEFAULT_PREEMPTION_TIMEOUT_US: u64 = 10_000;
pub const DEFAULT_CONTROL_POLL_US: u64 = 50;
pub const DEFAULT_POLICY: &str = "shenango";
pub const DEFAULT_HANDOVER: Handover = Handover::Local;
pub const DEFAULT_CEDE_GRACE_US: u64 = 0;
/// The share quantum by default: 1 ms
/// ([`corral_policy::policies::shenango::DEFAULT_SHARE_QUANTUM`] says why).
pub const DEFAULT_SHARE_QUANTUM_US: u64 = 1000;
pub const DEFAULT_HELPER_SPIN_MAX_US: u64 = 1000;
/// How long a bare TCP ACK may wait on the ring of a runtime that said it can, by default.
pub const DEFAULT_ACK_WAIT_US: u64 = 2000;
/// Frames iokerneld holds for one runtime whose receive buffers or ingress ring are full, by
/// default: a burst of this many small requests (incast) is absorbed without a drop.
pub const DEFAULT_RX_BACKLOG_FRAMES: u64 = 4096;
/// The most frames a runtime's backlog may be configured to hold (each takes up to
/// [`crate::daemon::BACKLOG_SLOT_BYTES`] of iokerneld's memory while held).
pub const MAX_RX_BACKLOG_FRAMES: u64 = 1 << 16;
/// The longest grace period, share quantum or ACK wait accepted: one second.
pub const MAX_SETTING_DELAY_US: u64 = 1_000_000;
pub const DEFAULT_LOG_LEVEL: &str = "info";
pub const DEFAULT_TAP_NAME: &str = "corral0";

/// Most AF_XDP sockets (receive queues) `nic = "xdp"` opens: each costs a UMEM of 8 MiB.
pub const MAX_XDP_QUEUES: u32 = 256;
pub const DEFAULT_HOST_IP: &str = "10.99.0.1/24";

/// The settings, as flags. Each has a TOML key of the same name with `_` for `-`.
#[derive(Debug, Default, Args)]
pub struct SettingArgs {
    /// TOML file with any of the settings below; flags override it.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// `core`: the CPU iokerneld pins itself to and busy-polls on [default: 0].
    #[arg(long, value_name = "CPU")]
    pub core: Option<usize>,

    /// `managed_cores`: CPUs iokerneld hands out to runtimes, as a list such as "1-3,5" (in
    /// TOML also an array such as [1, 2, 3]) [default: every online CPU but `core`].
    #[arg(long, value_name = "LIST")]
    pub managed_cores: Option<String>,

    /// `socket`: path of the control socket that runtimes register on; its directory is
    /// created if missing [default: /run/corral/iokerneld.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// `interval_us`: microseconds between allocation passes (congestion checks) [default: 5].
    #[arg(long, value_name = "MICROSECONDS")]
    pub interval_us: Option<u64>,

    /// `preemption_timeout_us`: microseconds a preempted kthread may keep its core before it
    /// is demoted off the managed cores [default: 10000].
    #[arg(long, value_name = "MICROSECONDS")]
    pub preemption_timeout_us: Option<u64>,

    /// `policy`: the core allocation policy, by name; `shenango` grants a congested runtime one
    /// more core per pass [default: shenango].
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// `policy_options`: one of the policy's own options, `KEY=VALUE`; repeat for more (in
    /// TOML a table, `policy_options = { interval_us = 5000 }`). Given here, they replace the
    /// file's. `arachne`: `scale_up_load_factor`, `scale_down_hysteresis`, `interval_us`;
    /// `shenango`: `burst_sharing` (`balanced` or `any-bursting`); `static`:
    /// `cores_per_runtime` [default: none, the policy's defaults].
    #[arg(long = "policy-option", value_name = "KEY=VALUE")]
    pub policy_options: Vec<String>,

    /// `handover`: how a granted kthread is woken: `local` (a helper thread of iokerneld's on
    /// each managed core, which runs only when the core is idle, wakes it on its own CPU) or
    /// `remote` (iokerneld wakes it from its own CPU, a cross-CPU wake-up) [default: local].
    #[arg(long, value_name = "MODE")]
    pub handover: Option<String>,

    /// `cede_grace_us`: microseconds a kthread asked to give its core back may take to reach
    /// its scheduler and park by itself before it is sent the preemption signal; 0 signals at
    /// once [default: 0].
    #[arg(long, value_name = "MICROSECONDS")]
    pub cede_grace_us: Option<u64>,

    /// `share_quantum_us`: microseconds a runtime keeps a granted core before a runtime at or
    /// above its guaranteed cores (one with none included) may preempt it; a runtime below its
    /// guarantee preempts at once, so latency-critical runtimes need a guarantee. 0 lets
    /// runtimes of equal standing take cores from each other at every pass [default: 1000].
    #[arg(long, value_name = "MICROSECONDS")]
    pub share_quantum_us: Option<u64>,

    /// `ack_wait_us`: how long a TCP segment that carries only an acknowledgment may wait on
    /// the ring of a runtime with no core, when the runtime said, as it parked, that none of
    /// its connections needs one promptly; it is read when the runtime next runs for another
    /// reason, or a core is granted for it after this long. 0 wakes the runtime for every
    /// segment [default: 2000].
    #[arg(long, value_name = "MICROSECONDS")]
    pub ack_wait_us: Option<u64>,

    /// `rx_backlog_frames`: frames iokerneld holds, in arrival order, for a runtime whose
    /// posted receive buffers or ingress ring cannot take them yet (a burst arriving while it
    /// waits for a core); they are handed over as it posts buffers again. One more is dropped
    /// and counted (`rx_backlog_full`). 0 drops at once [default: 4096, at most 65536].
    #[arg(long, value_name = "FRAMES")]
    pub rx_backlog_frames: Option<u64>,

    /// `helper_spin_max_us`: longest a helper spins on its idle core waiting for a grant
    /// before it sleeps (it spins about twice the recent idle gaps, within 5 us and this)
    /// [default: 1000].
    #[arg(long, value_name = "MICROSECONDS")]
    pub helper_spin_max_us: Option<u64>,

    /// `control_poll_us`: microseconds between polls of the control socket for registrations,
    /// statistics requests and hang-ups [default: 50].
    #[arg(long, value_name = "MICROSECONDS")]
    pub control_poll_us: Option<u64>,

    /// `log_level`: one of off, error, warn, info, debug, trace [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// `log_file`: append the log to this file instead of standard error.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    /// `nic`: where frames for other machines go: `tap` (a TAP device whose host side is an
    /// ordinary Linux interface), `xdp` (a real interface, `interface`, through AF_XDP: frames
    /// for the runtimes' addresses are taken, everything else is left to Linux), `gen` (a
    /// built-in open-loop traffic generator at `host_ip` that stands in for a fleet of clients;
    /// `iokerneld gen` plays a run) or `none` (runtimes reach only each other) [default: tap].
    #[arg(long, value_name = "BACKEND")]
    pub nic: Option<String>,

    /// `tap_name`: name of the TAP device iokerneld creates (or attaches to) [default: corral0].
    #[arg(long, value_name = "NAME")]
    pub tap_name: Option<String>,

    /// `host_ip`: address and prefix given to the host side of the TAP device (or, with `nic =
    /// "gen"`, the generator's own address), such as "10.99.0.1/24" [default: 10.99.0.1/24].
    #[arg(long, value_name = "CIDR")]
    pub host_ip: Option<String>,

    /// `interface`: with `nic = "xdp"`, the Linux interface whose runtimes' frames iokerneld
    /// takes (required then; it must exist and have no XDP program attached).
    #[arg(long, value_name = "NAME")]
    pub interface: Option<String>,

    /// `xdp_queues`: with `nic = "xdp"`, AF_XDP sockets on receive queues 0..N [default: every
    /// receive queue of the interface].
    #[arg(long, value_name = "N")]
    pub xdp_queues: Option<u32>,

    /// `xdp_attach`: with `nic = "xdp"`, where the XDP program runs: `auto` (in the driver if it
    /// can, else generic), `native` (in the driver, or refuse to start) or `generic` (after the
    /// driver, on socket buffers; any interface, slower) [default: auto].
    #[arg(long, value_name = "MODE")]
    pub xdp_attach: Option<String>,

    /// `faults`: seeded fault injection in the switch, for tests: `--faults
    /// DIRECTION:KEY=VALUE,...`, repeatable, e.g. `--faults rx:loss=0.01,reorder=0.02,seed=7
    /// --faults tx:corrupt=0.01` [default: no faults].
    ///
    /// DIRECTION is `rx` (NIC to runtime), `tx` (runtime to NIC), `local` (runtime to runtime)
    /// or `all` (the three), each at most once. KEYs: `loss`, `dup`, `corrupt`, `reorder`,
    /// `delay` (probabilities from 0 to 1, drawn independently per frame); `delay_us` (held
    /// time, `N` or a uniform range `MIN-MAX`, at most 1000000; `delay` defaults to 1 when
    /// `delay_us` is given); `reorder_gap` (a reordered frame is held until this many later
    /// frames passed it [default: 3], 1 to 1000) and `reorder_us` (or this long at most
    /// [default: 1000], 1 to 1000000); `hold` (frames held at most, more are dropped and
    /// counted [default: 1024], 1 to 65536); `only` (`all`, `ipv4`, `tcp` or `udp`: the frames
    /// the faults apply to, others pass untouched and unnumbered [default: all]); `seed` (of the
    /// per-frame draws [default: 0]).
    /// Corruption flips one byte of an IPv4 packet (never ARP). In TOML, a table per direction:
    /// `[faults.rx]` with `loss = 0.01`, `delay_us = "50-200"`. A flag replaces the file's
    /// table for its direction.
    #[arg(long = "faults", value_name = "DIRECTION:KEY=VALUE,...")]
    pub faults: Vec<String>,

    /// `metrics_listen`: also serve the statistics in the Prometheus text format over HTTP at
    /// `/metrics` on this address and port, such as 127.0.0.1:9464, from a thread of its own
    /// (the loop only answers its statistics requests, as for `iokerneld stats`) [default: off].
    #[arg(long, value_name = "ADDRESS:PORT")]
    pub metrics_listen: Option<String>,

    /// `shield`: keep iokerneld's CPU to itself (every other movable thread, the unbound
    /// workqueues and the movable interrupts leave it; real-time throttling is lifted; the loop
    /// runs at SCHED_FIFO) and run latency-critical kthreads at SCHED_FIFO on the managed cores,
    /// all undone on exit: `on` or `off` (in TOML `true` or `false`); `on` needs root. The
    /// environment variable stands in for the flag, ahead of the file: a test suite sets it
    /// off once for every iokerneld it starts [default: on as root, else off].
    #[arg(long, value_name = "on|off", env = "IOKERNELD_SHIELD")]
    pub shield: Option<String>,

    /// Root of the sysfs CPU tree (for tests).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysfs_root: Option<PathBuf>,
}

/// `managed_cores` in TOML: an array of CPU numbers or a list string.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum CoreList {
    Numbers(Vec<i64>),
    Text(String),
}

/// The config file. Unknown keys are refused so that a misspelt setting is not silently
/// ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub core: Option<i64>,
    pub managed_cores: Option<CoreList>,
    pub socket: Option<PathBuf>,
    pub interval_us: Option<i64>,
    pub preemption_timeout_us: Option<i64>,
    pub policy: Option<String>,
    pub policy_options: Option<BTreeMap<String, toml::Value>>,
    pub handover: Option<String>,
    pub cede_grace_us: Option<i64>,
    pub share_quantum_us: Option<i64>,
    pub ack_wait_us: Option<i64>,
    pub rx_backlog_frames: Option<i64>,
    pub helper_spin_max_us: Option<i64>,
    pub control_poll_us: Option<i64>,
    pub log_level: Option<String>,
    pub log_file: Option<PathBuf>,
    pub nic: Option<String>,
    pub tap_name: Option<String>,
    pub host_ip: Option<String>,
    pub interface: Option<String>,
    pub xdp_queues: Option<i64>,
    pub xdp_attach: Option<String>,
    pub metrics_listen: Option<String>,
    /// Checked by [`Config::merge`], so that `shield = 3` is refused by name.
    pub shield: Option<toml::Value>,
    /// `[faults.DIRECTION]` tables of fault settings, checked by [`Config::merge`].
    pub faults: Option<BTreeMap<String, BTreeMap<String, toml::Value>>>,
}

/// A refused setting or config file.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `invalid KEY = VALUE: REASON`.
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
    /// The file could not be read or parsed.
    File { path: PathBuf, problem: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid { key, value, reason } => {
                write!(f, "invalid {key} = {value}: {reason}")
            }
            Self::File { path, problem } => {
                write!(f, "config file {}: {problem}", path.display())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// The policy's options: the command line's `KEY=VALUE`s if any, else the file's table (whose
/// values may be strings, numbers or booleans).
fn policy_options(
    args: &[String],
    file: Option<&BTreeMap<String, toml::Value>>,
) -> Result<Vec<(String, String)>, ConfigError> {
    if !args.is_empty() {
        return args
            .iter()
            .map(|pair| {
                corral_policy::parse_option(pair)
                    .ok_or_else(|| invalid("policy_options", pair, "expected KEY=VALUE"))
            })
            .collect();
    }
    let Some(table) = file else {
        return Ok(Vec::new());
    };
    table
        .iter()
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(invalid(
                        "policy_options",
                        format!("{key} = {other}"),
                        "expected a string, a number or a boolean",
                    ));
                }
            };
            Ok((key.clone(), text))
        })
        .collect()
}

fn invalid(key: &'static str, value: impl fmt::Display, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Log verbosity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLevel(pub log::LevelFilter);

impl LogLevel {
    fn parse(text: &str) -> Option<Self> {
        let level = match text.to_ascii_lowercase().as_str() {
            "off" => log::LevelFilter::Off,
            "error" => log::LevelFilter::Error,
            "warn" | "warning" => log::LevelFilter::Warn,
            "info" => log::LevelFilter::Info,
            "debug" => log::LevelFilter::Debug,
            "trace" => log::LevelFilter::Trace,
            _ => return None,
        };
        Some(Self(level))
    }
}

/// The NIC backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicConfig {
    /// No NIC: frames are switched between runtimes only.
    None,
    /// A TAP device named `name` whose host side gets `host_ip/prefix`.
    Tap {
        name: String,
        host_ip: std::net::Ipv4Addr,
        prefix: u8,
    },
    /// A real interface through AF_XDP.
    Xdp {
        interface: String,
        /// Sockets on queues `0..n`; `None` for every receive queue.
        queues: Option<u32>,
        attach: XdpAttach,
    },
    /// The built-in traffic generator, at `host_ip/prefix`.
    Gen {
        host_ip: std::net::Ipv4Addr,
        prefix: u8,
    },
}

/// Where `nic = "xdp"` runs its XDP program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpAttach {
    /// In the driver if it has native XDP, else generic.
    #[default]
    Auto,
    /// In the driver, or refuse to start.
    Native,
    /// After the driver, on socket buffers.
    Generic,
}

/// How a granted kthread is woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handover {
    /// By iokerneld's helper thread on the granted core, on that core.
    Local,
    /// By iokerneld's loop, from its own CPU.
    Remote,
}

impl Handover {
    pub fn parse(text: &str) -> Option<Handover> {
        match text {
            "local" => Some(Handover::Local),
            "remote" => Some(Handover::Remote),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Handover::Local => "local",
            Handover::Remote => "remote",
        }
    }
}

/// Checked settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub core: usize,
    /// Allocator core `i` is CPU `managed_cores[i]`.
    pub managed_cores: Vec<usize>,
    /// Online CPUs that are neither `core` nor managed: where a kthread that ignores
    /// preemption is sent.
    pub spare_cpus: Vec<usize>,
    pub socket: PathBuf,
    pub interval_us: u64,
    pub preemption_timeout_us: u64,
    /// A name in [`corral_policy::policies::KNOWN`].
    pub policy: String,
    /// The policy's own options, `(key, value)`, checked by the policy.
    pub policy_options: Vec<(String, String)>,
    pub handover: Handover,
    /// 0: signal a preemption at once.
    pub cede_grace_us: u64,
    /// 0: runtimes of equal standing may take a core from each other at every pass.
    pub share_quantum_us: u64,
    /// 0: every frame for a runtime without a core asks for one.
    pub ack_wait_us: u64,
    /// 0: a frame that finds no buffer or ring room is dropped at once.
    pub rx_backlog_frames: u64,
    pub helper_spin_max_us: u64,
    pub control_poll_us: u64,
    pub log_level: LogLevel,
    pub log_file: Option<PathBuf>,
    pub nic: NicConfig,
    pub faults: FaultsConfig,
    /// Where to serve the Prometheus metrics over HTTP; `None`: nowhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Shield iokerneld's CPU and run latency-critical kthreads at SCHED_FIFO
    /// (see [`crate::shield`]).
    pub shield: bool,
    pub sysfs_root: PathBuf,
}

/// The faults injected in each direction of the switch; `None`: none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultsConfig {
    pub rx: Option<FaultSpec>,
    pub tx: Option<FaultSpec>,
    pub local: Option<FaultSpec>,
}

impl FaultsConfig {
    pub fn get(&self, direction: Direction) -> Option<&FaultSpec> {
        match direction {
            Direction::Rx => self.rx.as_ref(),
            Direction::Tx => self.tx.as_ref(),
            Direction::Local => self.local.as_ref(),
        }
    }

    fn slot(&mut self, direction: Direction) -> &mut Option<FaultSpec> {
        match direction {
            Direction::Rx => &mut self.rx,
            Direction::Tx => &mut self.tx,
            Direction::Local => &mut self.local,
        }
    }

    /// Whether any direction injects anything.
    pub fn is_active(&self) -> bool {
        Direction::ALL
            .iter()
            .any(|&d| self.get(d).is_some_and(FaultSpec::is_active))
    }
}

/// The keys of a fault spec, as the errors list them.
const FAULT_KEYS: &str =
    "loss, dup, corrupt, reorder, delay, delay_us, reorder_gap, reorder_us, hold, only, seed";

/// `rx`, `tx`, `local` or `all`.
fn fault_directions(text: &str) -> Option<&'static [Direction]> {
    match text {
        "rx" => Some(&Direction::ALL[0..1]),
        "tx" => Some(&Direction::ALL[1..2]),
        "local" => Some(&Direction::ALL[2..3]),
        "all" => Some(&Direction::ALL),
        _ => None,
    }
}

fn probability(key: &str, text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|p| (0.0..=1.0).contains(p))
        .ok_or_else(|| format!("{key} = {text}: must be a probability from 0 to 1"))
}

fn bounded(key: &str, text: &str, min: u64, max: u64) -> Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| format!("{key} = {text}: must be a whole number from {min} to {max}"))
}

/// A fault spec from its `KEY=VALUE` settings (see `--help`).
pub fn parse_fault_spec<'a>(
    settings: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<FaultSpec, String> {
    let mut spec = FaultSpec::default();
    let mut seen: Vec<&str> = Vec::new();
    let mut delay = None;
    let mut delay_us = None;
    for (key, value) in settings {
        let (key, value) = (key.trim(), value.trim());
        if seen.contains(&key) {
            return Err(format!("{key} is given twice"));
        }
        seen.push(key);
        match key {
            "loss" => spec.loss = probability(key, value)?,
            "dup" => spec.dup = probability(key, value)?,
            "corrupt" => spec.corrupt = probability(key, value)?,
            "reorder" => spec.reorder = probability(key, value)?,
            "delay" => delay = Some(probability(key, value)?),
            "delay_us" => {
                let us = |text: &str, min: u64| {
                    text.trim()
                        .parse::<u64>()
                        .ok()
                        .filter(|v| (min..=MAX_DELAY_US).contains(v))
                        .ok_or_else(|| {
                            format!(
                                "delay_us = {value}: expected microseconds N (1 to \
                                 {MAX_DELAY_US}) or a range MIN-MAX (0 to {MAX_DELAY_US})"
                            )
                        })
                };
                let (min, max) = match value.split_once('-') {
                    Some((min, max)) => (us(min, 0)?, us(max, 1)?),
                    None => {
                        let one = us(value, 1)?;
                        (one, one)
                    }
                };
                if min > max {
                    return Err(format!(
                        "delay_us = {value}: the range's start is past its end"
                    ));
                }
                delay_us = Some((min, max));
            }
            "reorder_gap" => {
                spec.reorder_gap = bounded(key, value, 1, u64::from(MAX_REORDER_GAP))? as u32;
            }
            "reorder_us" => spec.reorder_us = bounded(key, value, 1, MAX_REORDER_US)?,
            "hold" => spec.hold = bounded(key, value, 1, MAX_HOLD as u64)? as usize,
            "only" => {
                spec.only = FrameFilter::parse(value).ok_or_else(|| {
                    format!("only = {value}: expected one of all, ipv4, tcp, udp")
                })?;
            }
            "seed" => {
                spec.seed = value.parse().map_err(|_| {
                    format!("seed = {value}: must be a whole number from 0 to 2^64-1")
                })?;
            }
            _ => {
                return Err(format!(
                    "unknown setting {key:?}; expected one of {FAULT_KEYS}"
                ));
            }
        }
    }
    if seen.is_empty() {
        return Err(format!(
            "no settings; expected KEY=VALUE with KEY one of {FAULT_KEYS}"
        ));
    }
    match (delay, delay_us) {
        (Some(p), None) if p > 0.0 => {
            return Err(format!(
                "delay = {p} needs delay_us, the time to hold a frame"
            ));
        }
        (p, Some((min, max))) => {
            spec.delay = p.unwrap_or(1.0);
            if spec.delay > 0.0 {
                spec.delay_min_us = min;
                spec.delay_max_us = max;
            }
        }
        (_, None) => {}
    }
    Ok(spec)
}

/// A `--faults` flag: `DIRECTION:KEY=VALUE,...`.
pub fn parse_fault_flag(text: &str) -> Result<(&'static [Direction], FaultSpec), String> {
    let (directions, settings) = text
        .split_once(':')
        .ok_or("expected DIRECTION:KEY=VALUE,... with DIRECTION one of rx, tx, local, all")?;
    let directions = fault_directions(directions.trim()).ok_or_else(|| {
        format!("unknown direction {directions:?}; expected one of rx, tx, local, all")
    })?;
    let pairs = settings
        .split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            item.split_once('=')
                .ok_or_else(|| format!("{:?} is not KEY=VALUE", item.trim()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((directions, parse_fault_spec(pairs)?))
}

/// The `[faults.DIRECTION]` tables of a config file merged with the `--faults` flags: a flag
/// replaces the file's table for its directions.
fn faults_config(file: &FileConfig, args: &SettingArgs) -> Result<FaultsConfig, ConfigError> {
    let mut faults = FaultsConfig::default();
    let mut from_file = [false; 3];
    for (direction, table) in file.faults.iter().flatten() {
        let shown = format!("[faults.{direction}]");
        let directions = fault_directions(direction).ok_or_else(|| {
            invalid(
                "faults",
                &shown,
                "unknown direction; expected one of rx, tx, local, all",
            )
        })?;
        let texts = table
            .iter()
            .map(|(key, value)| {
                let text = match value {
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::String(s) => s.clone(),
                    other => {
                        return Err(invalid(
                            "faults",
                            &shown,
                            format!("{key} = {other}: expected a number or a string"),
                        ));
                    }
                };
                Ok((key.as_str(), text))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let spec = parse_fault_spec(texts.iter().map(|(k, v)| (*k, v.as_str())))
            .map_err(|reason| invalid("faults", &shown, reason))?;
        for &d in directions {
            if from_file[d as usize] {
                return Err(invalid(
                    "faults",
                    &shown,
                    format!("{d} is given twice (by its own table and by [faults.all])"),
                ));
            }
            from_file[d as usize] = true;
            *faults.slot(d) = Some(spec.clone());
        }
    }
    let mut from_flags = [false; 3];
    for text in &args.faults {
        let shown = format!("{text:?}");
        let (directions, spec) =
            parse_fault_flag(text).map_err(|reason| invalid("faults", &shown, reason))?;
        for &d in directions {
            if from_flags[d as usize] {
                return Err(invalid(
                    "faults",
                    &shown,
                    format!("{d} is given by more than one --faults"),
                ));
            }
            from_flags[d as usize] = true;
            *faults.slot(d) = Some(spec.clone());
        }
    }
    Ok(faults)
}

/// Reads and parses a config file.
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        problem: e.to_string(),
    })?;
    parse_file(&text).map_err(|problem| ConfigError::File {
        path: path.to_owned(),
        problem,
    })
}

/// Parses config file text.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " | "))
}

fn non_negative(key: &'static str, value: i64) -> Result<u64, ConfigError> {
    u64::try_from(value).map_err(|_| invalid(key, value, "must not be negative"))
}

/// A delay in microseconds from the flag, else the file, else `default`: 0 (off) up to
/// [`MAX_SETTING_DELAY_US`].
fn up_to_a_second(
    key: &'static str,
    flag: Option<u64>,
    file: Option<i64>,
    default: u64,
) -> Result<u64, ConfigError> {
    let value = match (flag, file) {
        (Some(v), _) => v,
        (None, Some(v)) => non_negative(key, v)?,
        (None, None) => default,
    };
    if value > MAX_SETTING_DELAY_US {
        return Err(invalid(
            key,
            value,
            format!("must be at most {MAX_SETTING_DELAY_US} (one second)"),
        ));
    }
    Ok(value)
}

fn positive_us(key: &'static str, value: u64) -> Result<u64, ConfigError> {
    // An hour is far past any sensible interval and keeps nanosecond arithmetic from
    // overflowing.
    if value == 0 || value > 3_600_000_000 {
        return Err(invalid(
            key,
            value,
            "must be at least 1 and at most 3600000000 (one hour)",
        ));
    }
    Ok(value)
}

impl Config {
    /// Merges the file named by `--config` (if any) with the flags and checks the result
    /// against the machine.
    pub fn resolve(args: &SettingArgs) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Self::merge(&file, args)
    }

    /// Merges `file` with `args` (flags win) and checks the result.
    pub fn merge(file: &FileConfig, args: &SettingArgs) -> Result<Config, ConfigError> {
        let sysfs_root = args
            .sysfs_root
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::cpus::SYSFS_CPU_ROOT));
        let sysfs = Sysfs::new(&sysfs_root);
        let online = sysfs.online().map_err(|e| ConfigError::File {
            path: sysfs_root.join("online"),
            problem: e.problem,
        })?;

        let core = match (args.core, file.core) {
            (Some(core), _) => core,
            (None, Some(core)) => {
                usize::try_from(core).map_err(|_| invalid("core", core, "must not be negative"))?
            }
            (None, None) => 0,
        };
        check_cpu(&sysfs, &online, "core", core, core)?;

        let (managed_cores, shown) = match (&args.managed_cores, &file.managed_cores) {
            (Some(text), _) | (None, Some(CoreList::Text(text))) => {
                let shown = format!("{text:?}");
                let cpus = parse_cpu_list(text)
                    .map_err(|reason| invalid("managed_cores", &shown, reason))?;
                (cpus, shown)
            }
            (None, Some(CoreList::Numbers(numbers))) => {
                let shown = format!("{numbers:?}");
                let cpus = numbers
                    .iter()
                    .map(|&n| {
                        usize::try_from(n)
                            .ok()
                            .filter(|&n| n <= crate::cpus::MAX_CPU)
                            .ok_or_else(|| {
                                invalid("managed_cores", &shown, format!("{n} is not a CPU number"))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (cpus, shown)
            }
            (None, None) => {
                let cpus: Vec<usize> = online.iter().copied().filter(|&c| c != core).collect();
                let shown = format!("{:?} (every online CPU but core)", format_cpu_list(&cpus));
                (cpus, shown)
            }
        };
        if managed_cores.is_empty() {
            return Err(invalid("managed_cores", &shown, "no CPUs to manage"));
        }
        for (i, &cpu) in managed_cores.iter().enumerate() {
            if cpu == core {
                return Err(invalid(
                    "managed_cores",
                    &shown,
                    format!("iokerneld's own core {core} cannot also be managed"),
                ));
            }
            if managed_cores[..i].contains(&cpu) {
                return Err(invalid(
                    "managed_cores",
                    &shown,
                    format!("CPU {cpu} is listed twice"),
                ));
            }
            check_cpu(&sysfs, &online, "managed_cores", &shown, cpu)?;
        }
        if managed_cores.len() > corral_policy::MAX_CORES {
            return Err(invalid(
                "managed_cores",
                &shown,
                format!("more than {} CPUs", corral_policy::MAX_CORES),
            ));
        }
        let spare_cpus = online
            .iter()
            .copied()
            .filter(|c| *c != core && !managed_cores.contains(c))
            .collect();

        let socket = args
            .socket
            .clone()
            .or_else(|| file.socket.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
        if socket.as_os_str().is_empty() || socket.file_name().is_none() {
            return Err(invalid(
                "socket",
                format!("{:?}", socket.display().to_string()),
                "must name a file",
            ));
        }
        // sockaddr_un holds 108 bytes including the terminating NUL.
        if socket.as_os_str().len() > 107 {
            return Err(invalid(
                "socket",
                format!("{:?}", socket.display().to_string()),
                "longer than the 107 bytes a unix socket path may have",
            ));
        }

        let number = |key: &'static str, flag: Option<u64>, file: Option<i64>, default: u64| {
            let value = match (flag, file) {
                (Some(v), _) => v,
                (None, Some(v)) => non_negative(key, v)?,
                (None, None) => default,
            };
            positive_us(key, value)
        };
        let interval_us = number(
            "interval_us",
            args.interval_us,
            file.interval_us,
            DEFAULT_INTERVAL_US,
        )?;
        let preemption_timeout_us = number(
            "preemption_timeout_us",
            args.preemption_timeout_us,
            file.preemption_timeout_us,
            DEFAULT_PREEMPTION_TIMEOUT_US,
        )?;
        let policy = args
            .policy
            .clone()
            .or_else(|| file.policy.clone())
            .unwrap_or_else(|| DEFAULT_POLICY.to_owned());
        if !corral_policy::policies::KNOWN
            .iter()
            .any(|entry| entry.name == policy)
        {
            let unknown = corral_policy::UnknownPolicy {
                name: policy.clone(),
            };
            return Err(invalid(
                "policy",
                format!("{policy:?}"),
                unknown.to_string(),
            ));
        }
        let policy_options = policy_options(&args.policy_options, file.policy_options.as_ref())?;
        let check = corral_policy::PolicySettings {
            options: policy_options.clone(),
            ..corral_policy::PolicySettings::default()
        };
        if let Err(e) = corral_policy::check(&policy, &check) {
            let given: Vec<String> = policy_options
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            return Err(invalid("policy_options", given.join(","), e.to_string()));
        }
        let handover_text = args
            .handover
            .clone()
            .or_else(|| file.handover.clone())
            .unwrap_or_else(|| DEFAULT_HANDOVER.name().to_owned());
        let handover = Handover::parse(&handover_text).ok_or_else(|| {
            invalid(
                "handover",
                format!("{handover_text:?}"),
                "expected local or remote",
            )
        })?;
        let cede_grace_us = up_to_a_second(
            "cede_grace_us",
            args.cede_grace_us,
            file.cede_grace_us,
            DEFAULT_CEDE_GRACE_US,
        )?;
        let share_quantum_us = up_to_a_second(
            "share_quantum_us",
            args.share_quantum_us,
            file.share_quantum_us,
            DEFAULT_SHARE_QUANTUM_US,
        )?;
        let ack_wait_us = up_to_a_second(
            "ack_wait_us",
            args.ack_wait_us,
            file.ack_wait_us,
            DEFAULT_ACK_WAIT_US,
        )?;
        let rx_backlog_frames = match (args.rx_backlog_frames, file.rx_backlog_frames) {
            (Some(v), _) => v,
            (None, Some(v)) => non_negative("rx_backlog_frames", v)?,
            (None, None) => DEFAULT_RX_BACKLOG_FRAMES,
        };
        if rx_backlog_frames > MAX_RX_BACKLOG_FRAMES {
            return Err(invalid(
                "rx_backlog_frames",
                rx_backlog_frames,
                format!("must be at most {MAX_RX_BACKLOG_FRAMES}"),
            ));
        }
        let helper_spin_max_us = number(
            "helper_spin_max_us",
            args.helper_spin_max_us,
            file.helper_spin_max_us,
            DEFAULT_HELPER_SPIN_MAX_US,
        )?;
        let control_poll_us = number(
            "control_poll_us",
            args.control_poll_us,
            file.control_poll_us,
            DEFAULT_CONTROL_POLL_US,
        )?;

        let level_text = args
            .log_level
            .clone()
            .or_else(|| file.log_level.clone())
            .unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_owned());
        let log_level = LogLevel::parse(&level_text).ok_or_else(|| {
            invalid(
                "log_level",
                format!("{level_text:?}"),
                "expected one of off, error, warn, info, debug, trace",
            )
        })?;
        let log_file = args.log_file.clone().or_else(|| file.log_file.clone());
        let nic = nic_config(file, args)?;
        let faults = faults_config(file, args)?;
        let metrics_listen = match args
            .metrics_listen
            .as_ref()
            .or(file.metrics_listen.as_ref())
        {
            Some(text) => Some(
                parse_listen_address(text)
                    .map_err(|reason| invalid("metrics_listen", format!("{text:?}"), reason))?,
            ),
            None => None,
        };

        let shield = shield_setting(
            args.shield.as_deref(),
            file.shield.as_ref(),
            rustix::process::geteuid().is_root(),
        )?;

        Ok(Config {
            core,
            managed_cores,
            spare_cpus,
            socket,
            interval_us,
            preemption_timeout_us,
            policy,
            policy_options,
            handover,
            cede_grace_us,
            share_quantum_us,
            ack_wait_us,
            rx_backlog_frames,
            helper_spin_max_us,
            control_poll_us,
            log_level,
            log_file,
            nic,
            faults,
            metrics_listen,
            shield,
            sysfs_root,
        })
    }
}

/// `shield` from the flag or `IOKERNELD_SHIELD` (`on`/`off`), else the file (`true`/`false`),
/// else on for root only:
/// shielding moves other processes' threads and changes kernel settings.
fn shield_setting(
    flag: Option<&str>,
    file: Option<&toml::Value>,
    is_root: bool,
) -> Result<bool, ConfigError> {
    // A bad value in the file is refused even where the flag or the environment overrides it:
    // the file would fail the next start that goes without them.
    if let Some(value) = file
        && !value.is_bool()
    {
        return Err(invalid("shield", value, "expected true or false"));
    }
    let (on, shown) = match (flag, file) {
        (Some(text), _) => match text {
            "on" => (true, text.to_owned()),
            "off" => (false, text.to_owned()),
            _ => {
                return Err(invalid(
                    "shield",
                    format!("{text:?}"),
                    "expected on or off (from --shield, or the IOKERNELD_SHIELD environment \
                     variable, which stands in for it)",
                ));
            }
        },
        (None, Some(toml::Value::Boolean(on))) => (*on, on.to_string()),
        (None, Some(other)) => {
            return Err(invalid("shield", other, "expected true or false"));
        }
        (None, None) => return Ok(is_root),
    };
    if on && !is_root {
        return Err(invalid(
            "shield",
            shown,
            "shielding moves other processes' threads and changes kernel settings, which needs \
             root (effective user id 0); run as root or turn it off",
        ));
    }
    Ok(on)
}

/// An IP address and port to listen on: no host names (they would need a resolver at start)
/// and no port 0 (a port picked at random could not be scraped).
fn parse_listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    let address: std::net::SocketAddr = text.trim().parse().map_err(|_| {
        "expected an IP address and port, such as 127.0.0.1:9464 or [::1]:9464".to_owned()
    })?;
    if address.port() == 0 {
        return Err("port 0 would pick a port at random; name the port to serve on".into());
    }
    Ok(address)
}

fn nic_config(file: &FileConfig, args: &SettingArgs) -> Result<NicConfig, ConfigError> {
    let pick = |flag: &Option<String>, file: &Option<String>, default: &str| {
        flag.clone()
            .or_else(|| file.clone())
            .unwrap_or_else(|| default.to_owned())
    };
    let backend = pick(&args.nic, &file.nic, "tap");
    let tap_name = pick(&args.tap_name, &file.tap_name, DEFAULT_TAP_NAME);
    let host_ip = pick(&args.host_ip, &file.host_ip, DEFAULT_HOST_IP);
    // Checked even when unused, so that a typo does not lie in wait for the day `nic` changes.
    let name = check_interface_name(&tap_name)
        .map_err(|reason| invalid("tap_name", format!("{tap_name:?}"), reason))?;
    let (ip, prefix) = parse_host_cidr(&host_ip)
        .map_err(|reason| invalid("host_ip", format!("{host_ip:?}"), reason))?;
    match backend.as_str() {
        "none" => Ok(NicConfig::None),
        "tap" => Ok(NicConfig::Tap {
            name,
            host_ip: ip,
            prefix,
        }),
        "gen" => Ok(NicConfig::Gen {
            host_ip: ip,
            prefix,
        }),
        "xdp" => xdp_config(file, args),
        _ => Err(invalid(
            "nic",
            format!("{backend:?}"),
            "expected tap, xdp, gen or none",
        )),
    }
}

/// `nic = "xdp"`'s settings: `interface` is required, the others have defaults.
fn xdp_config(file: &FileConfig, args: &SettingArgs) -> Result<NicConfig, ConfigError> {
    let interface = args
        .interface
        .clone()
        .or_else(|| file.interface.clone())
        .ok_or_else(|| {
            invalid(
                "nic",
                "\"xdp\"".to_owned(),
                "it needs `interface` (--interface NAME), the interface to take frames from",
            )
        })?;
    let interface = check_interface_name(&interface)
        .map_err(|reason| invalid("interface", format!("{interface:?}"), reason))?;
    let queues = match (args.xdp_queues, file.xdp_queues) {
        (Some(n), _) => Some(i64::from(n)),
        (None, n) => n,
    };
    let queues = match queues {
        None => None,
        Some(n) if (1..=i64::from(MAX_XDP_QUEUES)).contains(&n) => Some(n as u32),
        Some(n) => {
            return Err(invalid(
                "xdp_queues",
                n.to_string(),
                format!("expected 1 to {MAX_XDP_QUEUES}"),
            ));
        }
    };
    let attach = args
        .xdp_attach
        .clone()
        .or_else(|| file.xdp_attach.clone())
        .unwrap_or_else(|| "auto".to_owned());
    let attach = match attach.as_str() {
        "auto" => XdpAttach::Auto,
        "native" => XdpAttach::Native,
        "generic" => XdpAttach::Generic,
        _ => {
            return Err(invalid(
                "xdp_attach",
                format!("{attach:?}"),
                "expected auto, native or generic",
            ));
        }
    };
    Ok(NicConfig::Xdp {
        interface,
        queues,
        attach,
    })
}

/// A Linux interface name: 1 to 15 bytes (IFNAMSIZ less the NUL), none of them `/`, `:`,
/// white space or control characters, and not `.` or `..`.
fn check_interface_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.len() > 15 {
        return Err("must be 1 to 15 bytes long".into());
    }
    if name == "." || name == ".." {
        return Err("is not a valid interface name".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!("must not contain {c:?}"));
    }
    Ok(name.to_owned())
}

/// `a.b.c.d/prefix` with a prefix of 1 to 30 (so that the subnet has room for the runtimes),
/// and an address that is neither the subnet's network nor its broadcast address.
fn parse_host_cidr(text: &str) -> Result<(std::net::Ipv4Addr, u8), String> {
    let (addr, prefix) = text
        .split_once('/')
        .ok_or("expected an address and prefix such as 10.99.0.1/24")?;
    let addr: std::net::Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IPv4 address"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| (1..=30).contains(p))
        .ok_or_else(|| format!("prefix {prefix:?} is not a number from 1 to 30"))?;
    if addr.is_multicast() || addr.is_broadcast() || addr.is_unspecified() {
        return Err("not a unicast address".into());
    }
    let host_mask = u32::MAX >> prefix;
    let host = u32::from(addr) & host_mask;
    if host == 0 || host == host_mask {
        return Err(format!(
            "{addr} is the network or broadcast address of its /{prefix} subnet"
        ));
    }
    Ok((addr, prefix))
}

fn check_cpu(
    sysfs: &Sysfs,
    online: &[usize],
    key: &'static str,
    shown: impl fmt::Display,
    cpu: usize,
) -> Result<(), ConfigError> {
    if !sysfs.exists(cpu) {
        return Err(invalid(
            key,
            shown,
            format!("CPU {cpu} does not exist on this machine"),
        ));
    }
    if !online.contains(&cpu) {
        return Err(invalid(key, shown, format!("CPU {cpu} is offline")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(online: &str, cpus: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("online"), format!("{online}\n")).unwrap();
        for cpu in 0..cpus {
            let topo = dir.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&topo).unwrap();
            std::fs::write(topo.join("thread_siblings_list"), format!("{cpu}\n")).unwrap();
        }
        dir
    }

    fn args(root: &Path) -> SettingArgs {
        SettingArgs {
            sysfs_root: Some(root.to_owned()),
            ..SettingArgs::default()
        }
    }

    #[test]
    fn defaults_manage_every_other_online_cpu() {
        let sys = fake_sysfs("0-2,4", 5);
        let config = Config::merge(&FileConfig::default(), &args(sys.path())).unwrap();
        assert_eq!(config.core, 0);
        assert_eq!(config.managed_cores, vec![1, 2, 4]);
        assert!(config.spare_cpus.is_empty());
        assert_eq!(config.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(config.interval_us, 5);
        assert_eq!(config.preemption_timeout_us, 10_000);
        assert_eq!(config.policy, "shenango");
        assert_eq!(config.handover, Handover::Local);
        assert_eq!(config.cede_grace_us, 0);
        assert_eq!(config.share_quantum_us, 1000);
        assert_eq!(config.ack_wait_us, 2000);
        assert_eq!(config.rx_backlog_frames, 4096);
        assert_eq!(config.helper_spin_max_us, 1000);
        assert_eq!(config.control_poll_us, 50);
        assert_eq!(config.log_level, LogLevel(log::LevelFilter::Info));
    }

    #[test]
    fn flags_override_the_file() {
        let sys = fake_sysfs("0-3", 4);
        let file = parse_file(
            "core = 1\nmanaged_cores = [2, 3]\ninterval_us = 10\nlog_level = \"debug\"\n",
        )
        .unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        assert_eq!((config.core, config.managed_cores.clone()), (1, vec![2, 3]));
        assert_eq!(config.spare_cpus, vec![0]);
        assert_eq!(config.interval_us, 10);
        let mut a = args(sys.path());
        a.managed_cores = Some("3".into());
        a.interval_us = Some(7);
        let config = Config::merge(&file, &a).unwrap();
        assert_eq!(config.managed_cores, vec![3]);
        assert_eq!(config.spare_cpus, vec![0, 2]);
        assert_eq!(config.interval_us, 7);
        let file = parse_file("handover = \"remote\"\ncede_grace_us = 0\n").unwrap();
        let mut a = args(sys.path());
        a.cede_grace_us = Some(25);
        let config = Config::merge(&file, &a).unwrap();
        assert_eq!(
            (config.handover, config.cede_grace_us),
            (Handover::Remote, 25)
        );
        let file = parse_file("share_quantum_us = 0\n").unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        assert_eq!(config.share_quantum_us, 0);
        let mut a = args(sys.path());
        a.share_quantum_us = Some(250);
        let config = Config::merge(&file, &a).unwrap();
        assert_eq!(config.share_quantum_us, 250);
    }

    #[test]
    fn policy_options_come_from_the_flags_or_else_the_file_and_the_policy_checks_them() {
        let sys = fake_sysfs("0-3", 4);
        let file = parse_file(
            "policy = \"arachne\"\npolicy_options = { interval_us = 5000, scale_up_load_factor = 2.5 }\n",
        )
        .unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        assert_eq!(
            config.policy_options,
            [
                ("interval_us".to_owned(), "5000".to_owned()),
                ("scale_up_load_factor".to_owned(), "2.5".to_owned())
            ]
        );
        let mut a = args(sys.path());
        a.policy_options = vec![" scale_down_hysteresis = 0.2".into()];
        let config = Config::merge(&file, &a).unwrap();
        assert_eq!(
            config.policy_options,
            [("scale_down_hysteresis".to_owned(), "0.2".to_owned())]
        );
        assert_eq!(
            Config::merge(&FileConfig::default(), &args(sys.path()))
                .unwrap()
                .policy_options,
            []
        );
        let refuse = |file: &str, flags: &[&str], expected: &str| {
            let file = parse_file(file).unwrap();
            let mut a = args(sys.path());
            a.policy_options = flags.iter().map(|f| f.to_string()).collect();
            let err = Config::merge(&file, &a).unwrap_err().to_string();
            assert!(err.contains(expected), "{flags:?}: {err}");
        };
        refuse(
            "",
            &["interval_us=5000"],
            "invalid policy_options = interval_us=5000: policy \"shenango\" has no option \"interval_us\"",
        );
        refuse(
            "policy = \"arachne\"",
            &["interval_us=0"],
            "policy \"arachne\" option interval_us = \"0\": expected microseconds",
        );
        refuse("", &["burst_sharing"], "expected KEY=VALUE");
        refuse(
            "policy_options = { burst_sharing = [1] }",
            &[],
            "expected a string, a number or a boolean",
        );
        refuse(
            "policy = \"static\"\npolicy_options = { cores_per_runtime = 0 }",
            &[],
            "cores_per_runtime = \"0\": expected a core count",
        );
    }

    #[test]
    fn bad_values_name_the_key_and_value() {
        let sys = fake_sysfs("0-2", 4);
        let check = |toml: &str, expected: &str| {
            let err = match parse_file(toml) {
                Ok(file) => Config::merge(&file, &args(sys.path()))
                    .unwrap_err()
                    .to_string(),
                Err(e) => e,
            };
            assert!(err.contains(expected), "{toml:?}: {err}");
        };
        check(
            "managed_cores = [0]",
            "invalid managed_cores = [0]: iokerneld's own core 0 cannot also be managed",
        );
        check(
            "managed_cores = \"1-2,1\"",
            "invalid managed_cores = \"1-2,1\": CPU 1 is listed twice",
        );
        check(
            "managed_cores = [9]",
            "invalid managed_cores = [9]: CPU 9 does not exist",
        );
        check("managed_cores = [3]", "CPU 3 is offline");
        check("managed_cores = \"1-x\"", "invalid managed_cores = \"1-x\"");
        check("managed_cores = []", "invalid managed_cores = []: no CPUs");
        check("core = 7", "invalid core = 7: CPU 7 does not exist");
        check("core = -1", "invalid core = -1");
        check("interval_us = 0", "invalid interval_us = 0");
        check("control_poll_us = -5", "invalid control_poll_us = -5");
        check(
            "preemption_timeout_us = 0",
            "invalid preemption_timeout_us = 0",
        );
        check("log_level = \"loud\"", "invalid log_level = \"loud\"");
        check(
            "policy = \"fifo\"",
            "invalid policy = \"fifo\": unknown policy \"fifo\"; known policies: \"shenango\"",
        );
        check("socket = \"\"", "invalid socket");
        check(
            "handover = \"ipi\"",
            "invalid handover = \"ipi\": expected local or remote",
        );
        check(
            "cede_grace_us = -1",
            "invalid cede_grace_us = -1: must not be negative",
        );
        check(
            "cede_grace_us = 2000000",
            "invalid cede_grace_us = 2000000: must be at most 1000000",
        );
        check(
            "share_quantum_us = -1",
            "invalid share_quantum_us = -1: must not be negative",
        );
        check(
            "ack_wait_us = -5",
            "invalid ack_wait_us = -5: must not be negative",
        );
        check(
            "ack_wait_us = 1000001",
            "invalid ack_wait_us = 1000001: must be at most 1000000",
        );
        check(
            "nic = \"xdp\"",
            "invalid nic = \"xdp\": it needs `interface` (--interface NAME)",
        );
        check(
            "nic = \"xdp\"\ninterface = \"a/b\"",
            "invalid interface = \"a/b\": must not contain '/'",
        );
        check(
            "nic = \"xdp\"\ninterface = \"eth1\"\nxdp_queues = 0",
            "invalid xdp_queues = 0: expected 1 to 256",
        );
        check(
            "nic = \"xdp\"\ninterface = \"eth1\"\nxdp_attach = \"driver\"",
            "invalid xdp_attach = \"driver\": expected auto, native or generic",
        );
        check(
            "rx_backlog_frames = -1",
            "invalid rx_backlog_frames = -1: must not be negative",
        );
        check(
            "rx_backlog_frames = 65537",
            "invalid rx_backlog_frames = 65537: must be at most 65536",
        );
        check(
            "share_quantum_us = 1000001",
            "invalid share_quantum_us = 1000001: must be at most 1000000 (one second)",
        );
        check("helper_spin_max_us = 0", "invalid helper_spin_max_us = 0");
        check("interval = 5", "unknown field `interval`");
        check("interval_us = \"5\"", "interval_us");
        check(
            "nic = \"dpdk\"",
            "invalid nic = \"dpdk\": expected tap, xdp, gen or none",
        );
        check(
            "tap_name = \"a-name-far-too-long\"",
            "invalid tap_name = \"a-name-far-too-long\": must be 1 to 15 bytes",
        );
        check(
            "tap_name = \"a/b\"",
            "invalid tap_name = \"a/b\": must not contain '/'",
        );
        check(
            "host_ip = \"10.0.0.1\"",
            "invalid host_ip = \"10.0.0.1\": expected an address",
        );
        check(
            "host_ip = \"10.0.0.1/31\"",
            "prefix \"31\" is not a number from 1 to 30",
        );
        check(
            "host_ip = \"10.0.0.x/24\"",
            "\"10.0.0.x\" is not an IPv4 address",
        );
        check(
            "host_ip = \"10.0.0.0/24\"",
            "10.0.0.0 is the network or broadcast address",
        );
        check("host_ip = \"224.0.0.1/24\"", "not a unicast address");
    }

    #[test]
    fn faults_from_flags_and_file() {
        let sys = fake_sysfs("0-1", 2);
        let config = Config::merge(&FileConfig::default(), &args(sys.path())).unwrap();
        assert_eq!(config.faults, FaultsConfig::default());
        assert!(!config.faults.is_active());

        let mut a = args(sys.path());
        a.faults = vec![
            "rx:loss=0.01,reorder=0.02,dup=0.01,corrupt=0.01,delay_us=100,seed=7".into(),
            "tx:delay=0.5,delay_us=50-200,reorder=1,reorder_gap=5,reorder_us=300,hold=16,only=tcp"
                .into(),
        ];
        let faults = Config::merge(&FileConfig::default(), &a).unwrap().faults;
        assert_eq!(
            faults.rx,
            Some(FaultSpec {
                seed: 7,
                loss: 0.01,
                dup: 0.01,
                corrupt: 0.01,
                reorder: 0.02,
                // delay_us alone delays every frame.
                delay: 1.0,
                delay_min_us: 100,
                delay_max_us: 100,
                ..FaultSpec::default()
            })
        );
        assert_eq!(
            faults.tx,
            Some(FaultSpec {
                delay: 0.5,
                delay_min_us: 50,
                delay_max_us: 200,
                reorder: 1.0,
                reorder_gap: 5,
                reorder_us: 300,
                hold: 16,
                only: FrameFilter::Tcp,
                ..FaultSpec::default()
            })
        );
        assert_eq!(faults.local, None);
        assert!(faults.is_active());
        // The canonical form reads back as the same spec, with or without a delay.
        for spec in [
            faults.tx.clone().unwrap(),
            FaultSpec {
                loss: 0.125,
                seed: u64::MAX,
                ..FaultSpec::default()
            },
        ] {
            let (_, again) = parse_fault_flag(&format!("tx:{spec}")).unwrap();
            assert_eq!(again, spec);
        }

        // `all` sets every direction; a file's table is replaced by a flag for its direction.
        let file = parse_file("[faults.all]\nloss = 0.25\nseed = 3\n[faults]\n").unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        for d in Direction::ALL {
            assert_eq!(config.faults.get(d).unwrap().loss, 0.25, "{d}");
            assert_eq!(config.faults.get(d).unwrap().seed, 3, "{d}");
        }
        let mut a = args(sys.path());
        a.faults = vec!["local:dup=1".into()];
        let config = Config::merge(&file, &a).unwrap();
        assert_eq!(config.faults.local.as_ref().unwrap().loss, 0.0);
        assert_eq!(config.faults.local.as_ref().unwrap().dup, 1.0);
        assert_eq!(config.faults.rx.as_ref().unwrap().loss, 0.25);

        let file =
            parse_file("[faults.local]\ncorrupt = 1\ndelay_us = \"0-20\"\ndelay = 0.1\nhold = 4\n")
                .unwrap();
        let local = Config::merge(&file, &args(sys.path()))
            .unwrap()
            .faults
            .local
            .unwrap();
        assert_eq!(
            (
                local.corrupt,
                local.delay,
                local.delay_min_us,
                local.delay_max_us,
                local.hold
            ),
            (1.0, 0.1, 0, 20, 4)
        );
    }

    #[test]
    fn bad_faults_name_the_setting() {
        let sys = fake_sysfs("0-1", 2);
        let flag = |flags: &[&str], expected: &str| {
            let mut a = args(sys.path());
            a.faults = flags.iter().map(|f| f.to_string()).collect();
            let err = Config::merge(&FileConfig::default(), &a)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{flags:?}: {err}");
        };
        flag(
            &["rx:loss=1.5"],
            "invalid faults = \"rx:loss=1.5\": loss = 1.5: must be a probability from 0 to 1",
        );
        flag(&["rx:dup=-0.1"], "dup = -0.1: must be a probability");
        flag(&["rx:corrupt=NaN"], "corrupt = NaN: must be a probability");
        flag(&["rx:reorder=inf"], "reorder = inf: must be a probability");
        flag(&["rx:loss=x"], "loss = x: must be a probability");
        flag(
            &["rx:lose=0.1"],
            "unknown setting \"lose\"; expected one of loss, dup",
        );
        flag(&["up:loss=0.1"], "unknown direction \"up\"");
        flag(&["loss=0.1"], "expected DIRECTION:KEY=VALUE");
        flag(&["rx:"], "no settings");
        flag(&["rx:loss"], "\"loss\" is not KEY=VALUE");
        flag(&["rx:loss=0.1,loss=0.2"], "loss is given twice");
        flag(
            &["rx:loss=0.1", "all:dup=0.1"],
            "invalid faults = \"all:dup=0.1\": rx is given by more than one --faults",
        );
        flag(
            &["rx:delay_us=0"],
            "delay_us = 0: expected microseconds N (1 to 1000000) or a range MIN-MAX",
        );
        flag(
            &["rx:delay_us=5000000"],
            "delay_us = 5000000: expected microseconds",
        );
        flag(&["rx:delay_us=-5"], "delay_us = -5: expected microseconds");
        flag(
            &["rx:delay_us=200-100"],
            "the range's start is past its end",
        );
        flag(&["rx:delay=0.5"], "delay = 0.5 needs delay_us");
        flag(
            &["rx:reorder=0.1,reorder_gap=0"],
            "reorder_gap = 0: must be a whole number from 1 to 1000",
        );
        flag(
            &["rx:reorder=0.1,reorder_us=2000000"],
            "reorder_us = 2000000",
        );
        flag(
            &["rx:loss=0.1,hold=0"],
            "hold = 0: must be a whole number from 1 to 65536",
        );
        flag(&["rx:seed=-1"], "seed = -1: must be a whole number");
        flag(
            &["rx:loss=0.1,only=icmp"],
            "only = icmp: expected one of all, ipv4, tcp, udp",
        );

        let file = |toml: &str, expected: &str| {
            let err = match parse_file(toml) {
                Ok(file) => Config::merge(&file, &args(sys.path()))
                    .unwrap_err()
                    .to_string(),
                Err(e) => e,
            };
            assert!(err.contains(expected), "{toml:?}: {err}");
        };
        file(
            "[faults.rx]\nloss = 2\n",
            "invalid faults = [faults.rx]: loss = 2: must be a probability from 0 to 1",
        );
        file("[faults.rx]\nlos = 0.5\n", "unknown setting \"los\"");
        file(
            "[faults.sideways]\nloss = 0.5\n",
            "invalid faults = [faults.sideways]: unknown direction",
        );
        file(
            "[faults.rx]\nloss = [0.5]\n",
            "loss = [0.5]: expected a number or a string",
        );
        file("[faults.rx]\n", "no settings");
        file(
            "[faults.rx]\nloss = 0.1\n[faults.all]\ndup = 0.1\n",
            "rx is given twice",
        );
        file("faults = 3\n", "faults");
        file(
            "[faults.rx]\ndelay_us = \"1-x\"\n",
            "delay_us = 1-x: expected microseconds",
        );
    }

    #[test]
    fn nic_settings() {
        let sys = fake_sysfs("0-1", 2);
        let config = Config::merge(&FileConfig::default(), &args(sys.path())).unwrap();
        assert_eq!(
            config.nic,
            NicConfig::Tap {
                name: "corral0".into(),
                host_ip: std::net::Ipv4Addr::new(10, 99, 0, 1),
                prefix: 24
            }
        );
        let file =
            parse_file("nic = \"tap\"\ntap_name = \"t1\"\nhost_ip = \"192.168.7.9/16\"\n").unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        assert_eq!(
            config.nic,
            NicConfig::Tap {
                name: "t1".into(),
                host_ip: std::net::Ipv4Addr::new(192, 168, 7, 9),
                prefix: 16
            }
        );
        let mut a = args(sys.path());
        a.nic = Some("none".into());
        assert_eq!(Config::merge(&file, &a).unwrap().nic, NicConfig::None);
        // gen takes its address from host_ip, from the file or a flag.
        a.nic = Some("gen".into());
        assert_eq!(
            Config::merge(&file, &a).unwrap().nic,
            NicConfig::Gen {
                host_ip: std::net::Ipv4Addr::new(192, 168, 7, 9),
                prefix: 16
            }
        );
        let file = parse_file("nic = \"gen\"\n").unwrap();
        assert_eq!(
            Config::merge(&file, &args(sys.path())).unwrap().nic,
            NicConfig::Gen {
                host_ip: std::net::Ipv4Addr::new(10, 99, 0, 1),
                prefix: 24
            }
        );
        let mut a = args(sys.path());
        a.host_ip = Some("10.1.2.3/8".into());
        assert_eq!(
            Config::merge(&file, &a).unwrap().nic,
            NicConfig::Gen {
                host_ip: std::net::Ipv4Addr::new(10, 1, 2, 3),
                prefix: 8
            }
        );
        let file = parse_file("nic = \"xdp\"\ninterface = \"eth1\"\n").unwrap();
        assert_eq!(
            Config::merge(&file, &args(sys.path())).unwrap().nic,
            NicConfig::Xdp {
                interface: "eth1".into(),
                queues: None,
                attach: XdpAttach::Auto
            }
        );
        let mut a = args(sys.path());
        a.interface = Some("veth3".into());
        a.xdp_queues = Some(4);
        a.xdp_attach = Some("native".into());
        assert_eq!(
            Config::merge(&file, &a).unwrap().nic,
            NicConfig::Xdp {
                interface: "veth3".into(),
                queues: Some(4),
                attach: XdpAttach::Native
            }
        );
        let bad = parse_file("nic = \"gen\"\nhost_ip = \"10.1.2.255/24\"\n").unwrap();
        let err = Config::merge(&bad, &args(sys.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid host_ip = \"10.1.2.255/24\""),
            "{err}"
        );
    }

    #[test]
    fn shield_is_on_for_root_by_default_and_refuses_anything_but_on_off_true_false() {
        assert_eq!(shield_setting(None, None, true), Ok(true));
        assert_eq!(shield_setting(None, None, false), Ok(false));
        assert_eq!(shield_setting(Some("off"), None, true), Ok(false));
        let file_on = toml::Value::Boolean(true);
        assert_eq!(shield_setting(None, Some(&file_on), true), Ok(true));
        assert_eq!(shield_setting(Some("off"), Some(&file_on), true), Ok(false));
        assert_eq!(shield_setting(Some("off"), None, false), Ok(false));
        let err = shield_setting(Some("maybe"), None, true)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid shield = \"maybe\": expected on or off (from --shield, or the \
             IOKERNELD_SHIELD environment variable, which stands in for it)"
        );
        let err = shield_setting(None, Some(&toml::Value::Integer(3)), true)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "invalid shield = 3: expected true or false");
        let err = shield_setting(Some("off"), Some(&toml::Value::Integer(3)), true)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "invalid shield = 3: expected true or false");
        let err = shield_setting(Some("on"), None, false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("invalid shield = on: "), "{err}");
        assert!(err.contains("needs root"), "{err}");
        let err = shield_setting(None, Some(&file_on), false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("invalid shield = true: "), "{err}");

        // Through the file parser and the merge.
        let sys = fake_sysfs("0-1", 2);
        let file = parse_file("shield = false\n").unwrap();
        assert!(!Config::merge(&file, &args(sys.path())).unwrap().shield);
        let file = parse_file("shield = 3\n").unwrap();
        let err = Config::merge(&file, &args(sys.path()))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "invalid shield = 3: expected true or false");
    }

    #[test]
    fn metrics_listen_takes_an_address_and_port_from_the_flag_or_the_file() {
        let sys = fake_sysfs("0-1", 2);
        let config = Config::merge(&FileConfig::default(), &args(sys.path())).unwrap();
        assert_eq!(config.metrics_listen, None);
        let file = parse_file("metrics_listen = \"127.0.0.1:9464\"\n").unwrap();
        let config = Config::merge(&file, &args(sys.path())).unwrap();
        assert_eq!(
            config.metrics_listen,
            Some("127.0.0.1:9464".parse().unwrap())
        );
        let mut flags = args(sys.path());
        flags.metrics_listen = Some("[::1]:9500".into());
        let config = Config::merge(&file, &flags).unwrap();
        assert_eq!(config.metrics_listen, Some("[::1]:9500".parse().unwrap()));
        for (text, expected) in [
            ("localhost:9464", "expected an IP address and port"),
            ("127.0.0.1", "expected an IP address and port"),
            ("127.0.0.1:99999", "expected an IP address and port"),
            ("127.0.0.1:0", "port 0"),
        ] {
            flags.metrics_listen = Some(text.into());
            let err = Config::merge(&file, &flags).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid metrics_listen = {text:?}: {expected}")),
                "{text}: {err}"
            );
        }
    }
}
