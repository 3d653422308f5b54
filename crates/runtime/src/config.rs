//! Runtime configuration and its validation.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use corral_abi::control::PreemptionMode;

/// Default usable stack size of a uthread.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;
/// Largest stack a uthread may ask for.
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// Most kthreads one runtime may run.
pub const MAX_KTHREADS: usize = 1024;

/// Environment variable naming iokerneld's control socket; [`Config::from_env`] switches to
/// [`Mode::Iokernel`] when it is set.
pub const IOKERNELD_SOCKET_ENV: &str = "CORRAL_IOKERNELD";

/// Default path of iokerneld's control socket.
pub const DEFAULT_IOKERNELD_SOCKET: &str = "/run/corral/iokerneld.sock";

/// How the runtime gets its cores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A fixed set of kthreads that park on their own when idle; no iokerneld.
    Standalone,
    /// iokerneld grants and takes back cores: kthreads start parked, are woken on the core
    /// iokerneld picks, park by telling it so, and yield their core when it sends the
    /// preemption signal.
    Iokernel(IokernelSettings),
}

/// What a runtime asks iokerneld for when it registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IokernelSettings {
    /// iokerneld's control socket.
    pub socket: PathBuf,
    /// Shown in iokerneld's logs and statistics (1 to 32 bytes).
    pub name: String,
    /// Cores the runtime may hold without ever being preempted. At most the kthread count;
    /// all runtimes' guarantees together must fit iokerneld's managed cores.
    pub guaranteed_cores: usize,
    /// Kthreads that never park once granted a core, so that work reaching them never waits
    /// for a wake-up. They hold guaranteed cores: at most `guaranteed_cores`.
    pub spinning_kthreads: usize,
    /// How iokerneld asks a kthread for its core back: with its grace period for a
    /// cooperative park (runtimes whose uthreads reach preemption points often), or by signal
    /// at once (programs that would never notice the request within the grace period).
    pub preemption: PreemptionMode,
}

impl IokernelSettings {
    /// No guarantee, no spinning kthreads: every core is burstable.
    pub fn new(socket: impl Into<PathBuf>, name: impl Into<String>) -> Self {
        IokernelSettings {
            socket: socket.into(),
            name: name.into(),
            guaranteed_cores: 0,
            spinning_kthreads: 0,
            preemption: PreemptionMode::Cooperative,
        }
    }

    pub fn preemption_mode(mut self, mode: PreemptionMode) -> Self {
        self.preemption = mode;
        self
    }

    pub fn guaranteed_cores(mut self, cores: usize) -> Self {
        self.guaranteed_cores = cores;
        self
    }

    pub fn spinning_kthreads(mut self, kthreads: usize) -> Self {
        self.spinning_kthreads = kthreads;
        self
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Standalone => f.write_str("standalone"),
            Mode::Iokernel(s) => write!(f, "iokerneld ({})", s.socket.display()),
        }
    }
}

/// Settings of one runtime. Build with [`Config::default`] and the setters, then
/// [`crate::Runtime::new`] validates it.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many kthreads to run (the most cores the runtime may use at once).
    pub kthreads: usize,
    /// CPUs to pin kthread `i` to (`cpus[i % len]`); `None` leaves placement to Linux.
    pub cpus: Option<Vec<usize>>,
    /// Default usable stack size of a uthread, in bytes.
    pub stack_size: usize,
    /// How long an idle kthread polls for work before it parks.
    pub spin_before_park: Duration,
    /// Let `PREEMPT_SIGNAL` sent to a kthread preempt the uthread it runs (iokerneld does this;
    /// in standalone mode it is off unless asked for).
    pub preemption: bool,
    /// Let each uthread carry its own `%fs` base (its own TLS block and thread control block),
    /// installed by the context switch (see [`crate::set_uthread_fs_base`]). Off by default:
    /// uthreads then share their kthread's TLS and the switch never touches `%fs`.
    pub uthread_tls: bool,
    /// Kthreads held in reserve for kthreads blocked in the kernel (standalone mode only): when
    /// a kthread has stayed inside one uthread, asleep in a system call, while other uthreads
    /// wait to run, a reserve kthread runs them in its place, and the kthread that comes back
    /// returns to the reserve once it finds nothing to do. Unmodified programs block in system
    /// calls the runtime cannot turn into uthread waits. 0 (the default) keeps none.
    pub blocking_reserve: usize,
    pub mode: Mode,
    /// The runtime's IPv4 network, if it has one.
    pub net: Option<crate::net::NetConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kthreads: allowed_cpus().len().max(1),
            cpus: None,
            stack_size: DEFAULT_STACK_SIZE,
            spin_before_park: Duration::from_micros(2),
            preemption: false,
            uthread_tls: false,
            blocking_reserve: 0,
            mode: Mode::Standalone,
            net: None,
        }
    }
}

impl Config {
    pub fn kthreads(mut self, n: usize) -> Self {
        self.kthreads = n;
        self
    }

    /// Pins the kthreads to these CPUs, in order.
    pub fn cpus(mut self, cpus: Vec<usize>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Pins the kthreads, in order, to the CPUs this process may use.
    pub fn pinned(mut self) -> Self {
        self.cpus = Some(allowed_cpus());
        self
    }

    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    pub fn spin_before_park(mut self, d: Duration) -> Self {
        self.spin_before_park = d;
        self
    }

    pub fn preemption(mut self, on: bool) -> Self {
        self.preemption = on;
        self
    }

    /// Lets uthreads carry their own `%fs` base (see [`Config::uthread_tls`]).
    pub fn uthread_tls(mut self, on: bool) -> Self {
        self.uthread_tls = on;
        self
    }

    /// Keeps `n` kthreads in reserve for kthreads blocked in the kernel (see
    /// [`Config::blocking_reserve`]).
    pub fn blocking_reserve(mut self, n: usize) -> Self {
        self.blocking_reserve = n;
        self
    }

    /// Gives the runtime an IPv4 address (and with it a network stack).
    pub fn net(mut self, net: crate::net::NetConfig) -> Self {
        self.net = Some(net);
        self
    }

    /// Gets cores from iokerneld (which implies preemption).
    pub fn iokernel(mut self, settings: IokernelSettings) -> Self {
        self.mode = Mode::Iokernel(settings);
        self.preemption = true;
        self
    }

    /// The default configuration, switched to iokerneld mode when `CORRAL_IOKERNELD` names a
    /// control socket; the runtime is then named after the program.
    pub fn from_env() -> Self {
        let config = Config::default();
        match std::env::var_os(IOKERNELD_SOCKET_ENV) {
            Some(socket) if !socket.is_empty() => {
                let name = std::env::args()
                    .next()
                    .and_then(|arg0| {
                        std::path::Path::new(&arg0)
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                    })
                    .unwrap_or_else(|| "corral".into());
                let name: String = name.chars().take(32).collect();
                config.iokernel(IokernelSettings::new(socket, name))
            }
            _ => config,
        }
    }

    /// Checks every value; the error names the offending setting and value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.kthreads == 0 {
            return Err(ConfigError::new("kthreads", "0", "at least 1"));
        }
        if self.kthreads > MAX_KTHREADS {
            return Err(ConfigError::new(
                "kthreads",
                self.kthreads,
                format!("at most {MAX_KTHREADS}"),
            ));
        }
        if self.kthreads + self.blocking_reserve > MAX_KTHREADS {
            return Err(ConfigError::new(
                "blocking_reserve",
                self.blocking_reserve,
                format!(
                    "at most {} beside {} kthreads",
                    MAX_KTHREADS - self.kthreads,
                    self.kthreads
                ),
            ));
        }
        if self.blocking_reserve > 0 && matches!(self.mode, Mode::Iokernel(_)) {
            return Err(ConfigError::new(
                "blocking_reserve",
                self.blocking_reserve,
                "0 under iokerneld, which grants cores to registered kthreads",
            ));
        }
        check_stack_size(self.stack_size).map_err(|e| ConfigError {
            key: "stack_size",
            ..e
        })?;
        if self.spin_before_park > Duration::from_secs(1) {
            return Err(ConfigError::new(
                "spin_before_park",
                format!("{:?}", self.spin_before_park),
                "at most 1s",
            ));
        }
        if let Mode::Iokernel(settings) = &self.mode {
            settings.validate(self)?;
        }
        if let Some(net) = &self.net {
            net.validate()?;
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(ConfigError::new(
                    "cpus",
                    "[]",
                    "a non-empty list of CPU numbers",
                ));
            }
            let allowed = allowed_cpus();
            if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(ConfigError::new(
                    "cpus",
                    bad,
                    format!("a CPU this process may run on ({allowed:?})"),
                ));
            }
        }
        Ok(())
    }
}

impl IokernelSettings {
    fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        const MAX_REGISTERED: usize = corral_abi::control::MAX_REGISTER_KTHREADS;
        if config.kthreads > MAX_REGISTERED {
            return Err(ConfigError::new(
                "kthreads",
                config.kthreads,
                format!("at most {MAX_REGISTERED} under iokerneld"),
            ));
        }
        if config.cpus.is_some() {
            return Err(ConfigError::new(
                "cpus",
                format!("{:?}", config.cpus.as_deref().unwrap_or_default()),
                "none under iokerneld, which picks each kthread's core",
            ));
        }
        if !config.preemption {
            return Err(ConfigError::new(
                "preemption",
                "false",
                "true under iokerneld, which takes cores back with the preemption signal",
            ));
        }
        if self.name.is_empty() || self.name.len() > 32 || self.name.chars().any(char::is_control) {
            return Err(ConfigError::new(
                "iokernel.name",
                format!("{:?}", self.name),
                "1 to 32 bytes without control characters",
            ));
        }
        if self.guaranteed_cores > config.kthreads {
            return Err(ConfigError::new(
                "iokernel.guaranteed_cores",
                self.guaranteed_cores,
                format!("at most kthreads ({})", config.kthreads),
            ));
        }
        if self.spinning_kthreads > self.guaranteed_cores {
            return Err(ConfigError::new(
                "iokernel.spinning_kthreads",
                self.spinning_kthreads,
                format!(
                    "at most iokernel.guaranteed_cores ({})",
                    self.guaranteed_cores
                ),
            ));
        }
        Ok(())
    }
}

/// Checks a uthread stack size.
pub(crate) fn check_stack_size(bytes: usize) -> Result<(), ConfigError> {
    let page = page_size();
    if bytes < page {
        return Err(ConfigError::new(
            "stack_size",
            bytes,
            format!("at least one page ({page} bytes)"),
        ));
    }
    if bytes > MAX_STACK_SIZE {
        return Err(ConfigError::new(
            "stack_size",
            bytes,
            format!("at most {MAX_STACK_SIZE} bytes"),
        ));
    }
    Ok(())
}

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: &'static str,
    pub value: String,
    pub expected: String,
}

impl ConfigError {
    pub(crate) fn new(
        key: &'static str,
        value: impl fmt::Display,
        expected: impl fmt::Display,
    ) -> Self {
        ConfigError {
            key,
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} = {}: expected {}",
            self.key, self.value, self.expected
        )
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for io::Error {
    fn from(e: ConfigError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// The CPUs this process may run on, in increasing order. Linux always answers for the calling
/// thread; should it ever refuse, CPU 0 is the one CPU every machine has.
pub fn allowed_cpus() -> Vec<usize> {
    corral_affinity::allowed_cpus().unwrap_or_else(|_| vec![0])
}
