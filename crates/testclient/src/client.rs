//! A runtime stand-in that speaks the shared-memory ABI directly: it registers with iokerneld
//! using real OS threads as kthreads and then behaves according to a [`Mode`]. The
//! `corral-abi-client` binary wraps it; tests also use the lower-level pieces
//! ([`RegionFile`], [`request`]) to send malformed registrations on purpose.
//!
//! Each kthread reports what happens to it through the `events` callback as one line of text:
//! `grant K CPU running-on C since-decision-ns N` (N: from iokerneld's decision to give it the
//! core to now, -1 if none was recorded), `preempt K`, `park K`, `yielded K`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use corral_abi::control::{PreemptionMode, Registration, Reply};
use corral_abi::transport;
use corral_abi::{Command, Layout, RegionBuilder, RingKind, Slot, flags};

use crate::netclient::{self, NetMode, NetOptions};
use corral_iokernel::sys::{self, Mapping};

/// How long to wait for iokerneld to answer a request.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the kthreads do once they hold a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Park at once (after consuming any shared-queue work).
    Idle,
    /// Spin until asked to give the core back, then yield saying work is left.
    Busy,
    /// Block SIGUSR1 and spin without ever looking at the ingress ring: a kthread that ignores
    /// preemption.
    BlockSigusr1,
    /// After registering, overwrite the region's header and rings with random bytes.
    Garbage,
    /// As `Busy`, but keep writing random values into iokerneld's cede word of its kthreads.
    ScribbleCede,
    /// Kthread 0 sends and receives frames (see [`crate::netclient`]); needs addresses.
    Net(NetMode),
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "idle" => Mode::Idle,
            "busy" => Mode::Busy,
            "block-sigusr1" => Mode::BlockSigusr1,
            "garbage" => Mode::Garbage,
            "scribble-cede" => Mode::ScribbleCede,
            "echo" => Mode::Net(NetMode::Echo),
            "ping" => Mode::Net(NetMode::Ping),
            "spoof" => Mode::Net(NetMode::Spoof),
            "oob-tx" => Mode::Net(NetMode::OobTx),
            "oob-post" => Mode::Net(NetMode::OobPost),
            _ => {
                return Err(format!(
                    "unknown mode {s:?}: expected idle, busy, block-sigusr1, garbage, \
                     scribble-cede, echo, ping, spoof, oob-tx or oob-post"
                ));
            }
        })
    }
}

/// Receives one event line per kthread happening.
pub type EventSink = Arc<dyn Fn(String) + Send + Sync>;

/// What to register as.
#[derive(Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub name: String,
    pub kthreads: usize,
    pub guaranteed_cores: u16,
    pub max_cores: u16,
    pub spinning_kthreads: u16,
    /// Whether iokerneld is to wait its grace period for a cede or signal at once.
    pub preemption: PreemptionMode,
    pub mode: Mode,
    /// Kthread 0 reports a timer due this long after registration (zero: already due), which
    /// makes iokerneld wake the runtime then.
    pub timer_after: Option<Duration>,
    /// A helper thread adds one item to the shared queue this long after registration.
    pub work_after: Option<Duration>,
    pub events: Option<EventSink>,
    /// Addresses to register for steering; `None`: no network.
    pub net: Option<corral_abi::control::NetIdentity>,
    /// Where pings and spoofed frames go.
    pub peer: Option<corral_abi::control::NetIdentity>,
    /// Frames to send in the sending packet modes.
    pub count: u64,
    /// UDP payload bytes per ping (at least 8).
    pub payload_len: usize,
}

impl Options {
    /// One idle kthread, no guarantee.
    pub fn new(socket: impl Into<PathBuf>, name: impl Into<String>) -> Self {
        Self {
            socket: socket.into(),
            name: name.into(),
            kthreads: 1,
            guaranteed_cores: 0,
            max_cores: 1,
            spinning_kthreads: 0,
            preemption: PreemptionMode::Cooperative,
            mode: Mode::Idle,
            timer_after: None,
            work_after: None,
            events: None,
            net: None,
            peer: None,
            count: 0,
            payload_len: 64,
        }
    }
}

/// Why registration did not happen.
#[derive(Debug)]
pub enum ClientError {
    /// iokerneld answered with an error.
    Refused(String),
    Io(io::Error),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(message) => write!(f, "refused: {message}"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A memfd laid out as a region, and the client's own mapping of it (shared with its
/// kthreads).
pub struct RegionFile {
    pub memfd: OwnedFd,
    pub mapping: Arc<Mapping>,
    pub layout: Layout,
}

impl RegionFile {
    /// A region for `kthreads` kthreads. `seal`: seal it as iokerneld demands (tests pass
    /// `false` to check the refusal).
    pub fn new(kthreads: u32, seal: bool) -> io::Result<Self> {
        Self::with_builder(Self::builder(kthreads), seal)
    }

    /// The layout [`RegionFile::new`] uses.
    pub fn builder(kthreads: u32) -> RegionBuilder {
        RegionBuilder::new(kthreads)
            .ingress_slots(256)
            .egress_packet_slots(64)
            .egress_command_slots(64)
    }

    /// A region laid out by `builder`, made by corral-abi's transport as a runtime makes it.
    pub fn with_builder(builder: RegionBuilder, seal: bool) -> io::Result<Self> {
        let file = if seal {
            transport::RegionFile::create(&builder)?
        } else {
            transport::RegionFile::create_unsealed(&builder)?
        };
        Ok(Self {
            memfd: file.memfd,
            mapping: Arc::new(file.mapping),
            layout: file.layout,
        })
    }
}

/// Connects to `socket`, sends `bytes` with `fds` attached and waits for the reply. Returns the
/// connection too: a registered runtime must keep it open.
pub fn request(
    socket: &Path,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<(OwnedFd, Reply)> {
    transport::client::request(socket, bytes, fds, REPLY_TIMEOUT)
}

/// How a registered runtime's connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// iokerneld sent this error (an eviction notice) before closing.
    Evicted(String),
    /// Closed without a word.
    Closed,
    /// Still open when the wait ended.
    StillOpen,
}

static SIGUSR1_SEEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigusr1(_: libc::c_int) {
    SIGUSR1_SEEN.fetch_add(1, Ordering::Relaxed);
}

/// SIGUSR1 signals this process has received (any thread).
pub fn sigusr1_seen() -> u64 {
    SIGUSR1_SEEN.load(Ordering::Relaxed)
}

struct Shared {
    stop: AtomicBool,
    mapping: Arc<Mapping>,
    /// The value of each kthread's wake word it last woke for.
    wake_seen: Vec<AtomicU32>,
    events: Option<EventSink>,
}

impl Shared {
    fn emit(&self, line: String) {
        if let Some(sink) = &self.events {
            sink(line);
        }
    }
}

/// A registered runtime stand-in. Dropping it stops its threads and closes its connection,
/// which iokerneld takes as the runtime's exit.
pub struct Runtime {
    /// The id iokerneld assigned.
    pub id: u64,
    /// Thread id of each kthread.
    pub tids: Vec<i32>,
    conn: OwnedFd,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Creates the region and kthreads, registers, and starts the kthreads.
    pub fn start(options: Options) -> Result<Runtime, ClientError> {
        // Installed before iokerneld can know our threads, so that a preemption signal never
        // meets the default action (which would kill the process).
        sys::install_handler(libc::SIGUSR1, on_sigusr1)?;
        let kthreads = options.kthreads;
        let mut builder = RegionFile::builder(kthreads as u32);
        if let Mode::Net(_) = options.mode {
            if options.net.is_none() {
                return Err(ClientError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "packet modes need addresses (--mac and --ip)",
                )));
            }
            builder = builder.packet_area_size(netclient::PACKET_AREA);
        }
        let region = RegionFile::with_builder(builder, true)?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            mapping: region.mapping.clone(),
            wake_seen: (0..kthreads).map(|_| AtomicU32::new(0)).collect(),
            events: options.events.clone(),
        });

        let (tid_tx, tid_rx) = mpsc::channel();
        let mut go = Vec::with_capacity(kthreads);
        let mut threads = Vec::with_capacity(kthreads + 1);
        for index in 0..kthreads {
            let (go_tx, go_rx) = mpsc::channel::<bool>();
            go.push(go_tx);
            let shared = shared.clone();
            let tid_tx = tid_tx.clone();
            let options = options.clone();
            let thread = std::thread::Builder::new()
                .name(format!("kthread-{index}"))
                .spawn(move || {
                    if options.mode == Mode::BlockSigusr1 {
                        // Before the tid is known outside, so that no signal slips in early.
                        let _ = sys::mask_signal(libc::SIGUSR1, true);
                    }
                    let _ = tid_tx.send((index, sys::gettid()));
                    if go_rx.recv() == Ok(true) {
                        kthread_main(index, &shared, &options);
                    }
                })?;
            threads.push(thread);
        }
        drop(tid_tx);
        let mut tids = vec![0; kthreads];
        for _ in 0..kthreads {
            let (index, tid) = tid_rx
                .recv()
                .map_err(|_| io::Error::other("a kthread died before reporting its tid"))?;
            tids[index] = tid;
        }

        let release = |threads: Vec<JoinHandle<()>>, start: bool| {
            for tx in &go {
                let _ = tx.send(start);
            }
            if !start {
                for t in threads {
                    let _ = t.join();
                }
            }
        };
        let registration = Registration {
            name: options.name.clone(),
            guaranteed_cores: options.guaranteed_cores,
            max_cores: options.max_cores,
            spinning_kthreads: options.spinning_kthreads,
            run_queue_capacity: 256,
            preemption: options.preemption,
            tids: tids.clone(),
            net: options.net,
        };
        let reply = transport::client::register(
            &options.socket,
            registration,
            region.memfd.as_fd(),
            REPLY_TIMEOUT,
        );
        let (conn, id) = match reply {
            Ok((conn, Reply::Registered { runtime_id })) => (conn, runtime_id),
            Ok((_, Reply::Error { message })) => {
                release(threads, false);
                return Err(ClientError::Refused(message));
            }
            Ok((_, other)) => {
                release(threads, false);
                return Err(ClientError::Io(io::Error::other(format!(
                    "unexpected reply {other:?}"
                ))));
            }
            Err(e) => {
                release(threads, false);
                return Err(e.into());
            }
        };
        drop(region.memfd);
        if options.mode == Mode::Garbage {
            scribble(&shared.mapping, &region.layout);
        }
        release(Vec::new(), true);
        if let Some(after) = options.work_after {
            let shared = shared.clone();
            threads.push(std::thread::spawn(move || {
                std::thread::sleep(after);
                if !shared.stop.load(Ordering::Relaxed)
                    && let Ok(region) = shared.mapping.raw().attach()
                    && let Some(k0) = region.kthread(0)
                {
                    k0.positions().shared_tail.fetch_add(1, Ordering::AcqRel);
                }
            }));
        }
        Ok(Runtime {
            id,
            tids,
            conn,
            shared,
            threads,
        })
    }

    /// The control connection.
    pub fn conn(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }

    /// The shared region as this process maps it.
    pub fn mapping(&self) -> &Mapping {
        &self.shared.mapping
    }

    /// Waits up to `timeout` (forever if `None`) for iokerneld to close the connection.
    pub fn wait_ending(&self, timeout: Option<Duration>) -> io::Result<Ending> {
        let fd = self.conn.as_fd();
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(Ending::StillOpen);
            }
            let timespec = left.map(|l| rustix::time::Timespec {
                tv_sec: l.as_secs() as i64,
                tv_nsec: i64::from(l.subsec_nanos()),
            });
            let mut pfd = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut pfd, timespec.as_ref()) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
            let mut buf = vec![0u8; 64 << 10];
            match rustix::net::recv(fd, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Ok(Ending::Closed),
                Ok((n, _)) => match Reply::decode(&buf[..n]) {
                    Ok(Reply::Error { message }) => return Ok(Ending::Evicted(message)),
                    _ => continue,
                },
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::CONNRESET) => return Ok(Ending::Closed),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for index in 0..self.shared.wake_seen.len() {
            if let Some(word) = wake_word(&self.shared, index) {
                word.fetch_add(1, Ordering::SeqCst);
                let _ = rustix::thread::futex::wake(
                    word,
                    rustix::thread::futex::Flags::empty(),
                    u32::MAX,
                );
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Blocks until iokerneld rings the kthread's wake word (a shared futex in the region);
/// `false` once the runtime is stopping.
fn wait_for_wake(shared: &Shared, index: usize) -> bool {
    let Some(word) = wake_word(shared, index) else {
        return false;
    };
    let seen = &shared.wake_seen[index];
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = word.load(Ordering::SeqCst);
        if now != seen.load(Ordering::Relaxed) {
            seen.store(now, Ordering::Relaxed);
            return !shared.stop.load(Ordering::Relaxed);
        }
        let timeout = rustix::time::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        // Returns at once if the word moved on meanwhile; a timeout or signal loops.
        let _ = rustix::thread::futex::wait(
            word,
            rustix::thread::futex::Flags::empty(),
            now,
            Some(&timeout),
        );
    }
}

/// Kthread `index`'s wake word in the region.
fn wake_word(shared: &Shared, index: usize) -> Option<&AtomicU32> {
    let region = shared.mapping.raw().attach().ok()?;
    Some(region.kthread(index as u32)?.wake_word())
}

fn kthread_main(index: usize, shared: &Shared, options: &Options) {
    let Ok(region) = shared.mapping.raw().attach() else {
        return;
    };
    let Some(view) = region.kthread(index as u32) else {
        return;
    };
    let Some(k0) = region.kthread(0) else {
        return;
    };
    let mut ingress = view.ingress_consumer();
    let mut commands = view.egress_command_producer();
    if options.mode == Mode::Garbage {
        // The rings are garbage now; wait to be stopped.
        while wait_for_wake(shared, index) {}
        return;
    }
    if let (Mode::Net(mode), 0, Some(identity)) = (options.mode, index, options.net) {
        let net = NetOptions {
            mode,
            peer: options.peer,
            count: options.count,
            payload_len: options.payload_len,
        };
        netclient::kthread_main(
            region.clone(),
            identity,
            net,
            &|| wait_for_wake(shared, index),
            &|| shared.stop.load(Ordering::Relaxed),
            &|line| shared.emit(line),
        );
        return;
    }
    if index == 0
        && let Some(after) = options.timer_after
    {
        let deadline = sys::now_ns() + after.as_nanos() as u64;
        let _ = commands.try_push(Slot::value(Command::TimerDeadline, deadline));
    }
    let mut preempt_requested = false;
    // Reads the ingress ring; returns whether a Grant arrived.
    let mut drain = |preempt_requested: &mut bool| {
        let mut granted = false;
        while let Some(slot) = ingress.try_pop() {
            match slot.command_on(RingKind::Ingress) {
                Ok(Command::Grant) => {
                    // A grant supersedes a preemption that raced with an earlier park.
                    *preempt_requested = false;
                    granted = true;
                    let on = sys::current_cpu().map_or(-1, |c| c as i64);
                    let decided = view.wake_decision().load(Ordering::Acquire);
                    let since = if decided == 0 {
                        -1
                    } else {
                        sys::now_ns().saturating_sub(decided) as i64
                    };
                    shared.emit(format!(
                        "grant {index} {} running-on {on} since-decision-ns {since}",
                        slot.payload()
                    ));
                }
                Ok(Command::Preempt) => {
                    *preempt_requested = true;
                    shared.emit(format!("preempt {index}"));
                }
                _ => {}
            }
        }
        granted
    };
    while wait_for_wake(shared, index) {
        if !drain(&mut preempt_requested) {
            continue;
        }
        // Take whatever was handed in through the shared queue.
        let positions = k0.positions();
        let tail = positions.shared_tail.load(Ordering::Acquire);
        positions.shared_head.store(tail, Ordering::Release);
        let spins = index < usize::from(options.spinning_kthreads);
        match options.mode {
            Mode::Idle | Mode::Net(_) if !spins => {
                let command = if preempt_requested {
                    Command::Yielded
                } else {
                    Command::Park
                };
                preempt_requested = false;
                let _ = commands.try_push(Slot::value(command, 0));
                shared.emit(format!("park {index}"));
            }
            Mode::BlockSigusr1 => {
                while !shared.stop.load(Ordering::Relaxed) {
                    core::hint::spin_loop();
                }
                return;
            }
            _ => {
                // Busy (or spinning): run until asked for the core back.
                while !preempt_requested {
                    if shared.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    drain(&mut preempt_requested);
                    if options.mode == Mode::ScribbleCede {
                        view.cede_word().store(fastrand::u32(..), Ordering::Relaxed);
                    }
                    core::hint::spin_loop();
                }
                preempt_requested = false;
                let _ = commands.try_push(Slot::new(Command::Yielded, flags::HAS_WORK, 0, 0));
                shared.emit(format!("yielded {index}"));
            }
        }
    }
}

/// Overwrites the header and every kthread area with random bytes, and marks every egress
/// command slot as freshly written so that iokerneld reads the garbage at once.
fn scribble(mapping: &Mapping, layout: &Layout) {
    let region = mapping.raw();
    let words = layout.packet_area().offset as usize / 8;
    let base = region.as_ptr().cast::<AtomicU64>();
    let store = |word: usize, value: u64| {
        // SAFETY: `word * 8` lies before the packet area, inside the mapping, 8-byte aligned;
        // the region is only ever accessed atomically.
        unsafe { (*base.add(word)).store(value, Ordering::Relaxed) }
    };
    for word in 0..words {
        store(word, fastrand::u64(..));
    }
    let slots = layout.ring_slots(RingKind::EgressCommand) as usize;
    let lap_bit = 1u64 << 31;
    for index in 0..layout.kthreads() {
        let Some(offset) = layout.kthread_offset(index) else {
            continue;
        };
        let ring = offset as usize + layout.kthread_layout().egress_command as usize;
        for slot in 0..slots {
            let word = (ring + slot * corral_abi::SLOT_SIZE) / 8;
            store(word, fastrand::u64(..) | lap_bit);
        }
    }
}
