//! Starting and stopping a runtime.

use std::io;
use std::panic;

use crate::config::{Config, Mode};
use crate::iokernel::watchdog::Watchdog;
use crate::sched::uthread::{Builder, JoinHandle};
use crate::sched::{self, Shared};

/// A running set of kthreads. Dropping it stops them once their current uthreads block;
/// uthreads still blocked then are abandoned (their memory is leaked, never freed under them).
pub struct Runtime {
    shared: *mut Shared,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Ends the process if iokerneld goes away (iokerneld mode, once registered).
    watchdog: Option<Watchdog>,
}

// SAFETY: Shared is Sync; the pointer is only freed in drop.
unsafe impl Send for Runtime {}
// SAFETY: as above.
unsafe impl Sync for Runtime {}

impl Runtime {
    /// Validates `config` and starts its kthreads.
    pub fn new(config: Config) -> io::Result<Runtime> {
        config.validate()?;
        if config.preemption {
            crate::signal::install_preemption_handler();
        }
        crate::sync::mutex::asymmetric_fences();
        let (iok, memfd) = match &config.mode {
            Mode::Standalone => (None, None),
            Mode::Iokernel(_) => {
                let (shared, kthreads, memfd) = crate::iokernel::prepare(&config)?;
                (Some((shared, kthreads)), Some(memfd))
            }
        };
        let shared = Box::into_raw(Shared::new(config, iok));
        // SAFETY: just allocated; freed only in drop, after every kthread stopped.
        let rt: &'static Shared = unsafe { &*shared };
        let mut runtime = Runtime {
            shared,
            threads: Vec::new(),
            watchdog: None,
        };
        // Each kthread pins itself before it runs anything and says whether that worked: a
        // kthread silently running elsewhere than configured would break the caller's
        // placement without a trace.
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        for &k in rt.kthreads.iter() {
            let cpu = rt.config.cpus.as_ref().map(|c| c[k.index % c.len()]);
            let pinned_tx = pinned_tx.clone();
            let t = std::thread::Builder::new()
                .name(format!("corral-k{}", k.index))
                .stack_size(256 * 1024)
                .spawn(move || {
                    let pinned = cpu.map_or(Ok(()), corral_affinity::pin_current_thread);
                    let ok = pinned.is_ok();
                    let _ = pinned_tx.send(pinned);
                    // Runtime::new reads until every sender is gone.
                    drop(pinned_tx);
                    if ok {
                        sched::kthread_main(k);
                    }
                })?;
            runtime.threads.push(t);
        }
        drop(pinned_tx);
        for pinned in pinned_rx.iter() {
            // On failure, dropping `runtime` stops the kthreads that did start.
            pinned?;
        }
        if let Some(monitor) = crate::sched::blocking::start(rt)? {
            runtime.threads.push(monitor);
        }
        if let (Some(iok), Mode::Iokernel(settings), Some(memfd)) =
            (&rt.iok, &rt.config.mode, memfd)
        {
            // On failure, dropping `runtime` wakes the parked kthreads and stops them.
            crate::iokernel::register(iok, &rt.kthreads, settings, rt.config.net.as_ref(), memfd)?;
            runtime.watchdog = Some(iok.watch_connection()?);
        }
        Ok(runtime)
    }

    /// The id iokerneld gave this runtime (iokerneld mode only).
    pub fn iokernel_runtime_id(&self) -> Option<u64> {
        self.shared().iok.as_ref().map(|iok| iok.runtime_id())
    }

    /// Per kthread: the core iokerneld last granted it (`None` before any grant), and how
    /// many grants and preemption requests it has received. Empty in standalone mode.
    pub fn iokernel_kthread_stats(&self) -> Vec<IokernelKthreadStats> {
        use core::sync::atomic::Ordering::Relaxed;
        self.shared()
            .kthreads
            .iter()
            .filter_map(|k| Some((k, k.iok.as_ref()?)))
            .map(|(k, iok)| IokernelKthreadStats {
                cpu: Some(iok.cpu.load(Relaxed)).filter(|&c| c != u32::MAX),
                grants: iok.grants.load(Relaxed),
                preemptions: iok.preemptions.load(Relaxed),
                spurious_wakes: iok.spurious_wakes.load(Relaxed),
                kicks: iok.kicks.load(Relaxed),
                cedes_before_running: iok.cedes_before_running.load(Relaxed),
                parked: k.state.load(Relaxed) == crate::sched::kthread::KthreadState::Parked,
                runnable: k.rq.len(),
                next_timer_ns: Some(k.timers.next_deadline()).filter(|&d| d != u64::MAX),
            })
            .collect()
    }

    /// Uthreads on the runtime's shared queue right now (readied from outside a kthread, by a
    /// parked one, or spilled from a full run queue).
    pub fn shared_runnable(&self) -> usize {
        self.shared()
            .inject_len
            .load(core::sync::atomic::Ordering::Relaxed)
    }

    fn shared(&self) -> &Shared {
        // SAFETY: valid until drop.
        unsafe { &*self.shared }
    }

    pub fn config(&self) -> &Config {
        &self.shared().config
    }

    /// How this runtime gets its cores.
    pub fn mode(&self) -> &Mode {
        &self.config().mode
    }

    /// Spawns a uthread from outside the runtime.
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_with(Builder::new(), f)
            .expect("corral: failed to spawn a uthread")
    }

    /// Spawns a uthread configured by `builder` from outside the runtime.
    pub fn spawn_with<F, T>(&self, builder: Builder, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        builder.spawn_in(self.shared(), f)
    }

    /// Runs `f` as a uthread and blocks the calling thread until it returns. A panic in `f`
    /// is resumed here.
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.spawn(f).join() {
            Ok(v) => v,
            Err(payload) => panic::resume_unwind(payload),
        }
    }

    /// OS thread ids of the kthreads, in kthread order (0 for one not started yet): the
    /// targets of `PREEMPT_SIGNAL`.
    pub fn kthread_tids(&self) -> Vec<i32> {
        self.shared()
            .kthreads
            .iter()
            .map(|k| k.tid.load(core::sync::atomic::Ordering::Relaxed) as i32)
            .collect()
    }

    /// Uthreads spawned and not yet finished.
    pub fn live_uthreads(&self) -> u64 {
        self.shared().live_uthreads()
    }

    /// Each live TCP connection described for diagnostics (a stalled transfer): endpoints,
    /// state, sequence variables, windows and timers, and the runtime's timer and waiters. The
    /// format may change; formatting costs, so this is not for polling.
    pub fn describe_tcp_connections(&self) -> Vec<String> {
        self.shared()
            .net
            .as_ref()
            .map(|n| n.describe_tcp_connections())
            .unwrap_or_default()
    }

    /// The network stack's counters (packets, bytes, ARP, every drop reason, each socket);
    /// `None` without a network configured. Cheap enough to read while traffic flows.
    pub fn net_stats(&self) -> Option<crate::net::NetStats> {
        self.shared().net.as_ref().map(|n| n.stats())
    }

    /// The runtime's network address and MAC, when a network is configured.
    pub fn net_identity(&self) -> Option<(std::net::Ipv4Addr, crate::net::MacAddr)> {
        self.shared().net.as_ref().map(|n| (n.ip(), n.mac()))
    }
}

/// What one kthread has seen of iokerneld.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IokernelKthreadStats {
    pub cpu: Option<u32>,
    pub grants: u64,
    pub preemptions: u64,
    /// Wake-ups that came without a grant and were ignored.
    pub spurious_wakes: u64,
    /// Preemption signals that came without a request for the core (iokerneld's kicks).
    pub kicks: u64,
    /// Requests for the core it answered from its scheduler before running any uthread since
    /// the grant before them (it was still getting back to work when the request came).
    pub cedes_before_running: u64,
    /// Whether it is parked in the kernel (holding no core) right now.
    pub parked: bool,
    /// Uthreads on its run queue right now.
    pub runnable: usize,
    /// Its earliest timer (`timer::now_ns` clock), if it holds any.
    pub next_timer_ns: Option<u64>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared().begin_shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(watchdog) = self.watchdog.take() {
            // Before disconnecting, which is no sign that iokerneld went away.
            watchdog.stop();
        }
        if let Some(iok) = &self.shared().iok {
            iok.disconnect();
        }
        if self.shared().live_uthreads() == 0 {
            // SAFETY: every kthread has stopped and no uthread refers to the runtime.
            drop(unsafe { Box::from_raw(self.shared) });
        }
    }
}

/// Starts a runtime with `config`, runs `f` on it, and shuts it down.
pub fn run<F, T>(config: Config, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let rt = Runtime::new(config)?;
    Ok(rt.block_on(f))
}
