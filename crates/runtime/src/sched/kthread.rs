//! Per-kthread state, reached through `%gs`.
//!
//! A uthread may resume on a different kthread after any switch, and LLVM caches the address of
//! `thread_local!` data across calls, so per-kthread state must be re-derived from `%gs` after
//! every point where a switch can happen. The preemption counter lives at a fixed offset so a
//! single `inc`/`dec gs:[..]` updates it, which is atomic against both signals and migration.

use core::cell::{Cell, UnsafeCell};
use core::mem::offset_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, compiler_fence};

use crate::arch;
use crate::iokernel::IokKthread;
use crate::sched::Shared;
use crate::sched::idle::ParkWord;
use crate::sched::running::RunningFlag;
use crate::sched::runqueue::{RUNQ_CAPACITY, RunQueue};
use crate::sched::timer_watch::WatchedDeadline;
use crate::sched::uthread::UThread;
use crate::timer::TimerQueue;

/// Bit 31 of the preemption word is set while *no* preemption is pending, so that a single
/// `dec` reaching zero means "count dropped to zero and a preemption is pending".
pub(crate) const PREEMPT_NOT_PENDING: u32 = 1 << 31;

/// What a kthread is doing, as other kthreads see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum KthreadState {
    /// Running a uthread or its scheduler.
    Running = 0,
    /// Polling for work before parking.
    Spinning = 1,
    /// Blocked in the kernel, holding no core.
    Parked = 2,
    /// Exited: the runtime shut down.
    Gone = 3,
}

/// A [`KthreadState`] that other kthreads read.
pub(crate) struct AtomicKthreadState(AtomicU8);

impl AtomicKthreadState {
    fn new(state: KthreadState) -> Self {
        AtomicKthreadState(AtomicU8::new(state as u8))
    }

    #[inline]
    pub fn load(&self, order: Ordering) -> KthreadState {
        match self.0.load(order) {
            0 => KthreadState::Running,
            1 => KthreadState::Spinning,
            2 => KthreadState::Parked,
            3 => KthreadState::Gone,
            v => unreachable!("kthread state {v}: only KthreadState values are ever stored"),
        }
    }

    #[inline]
    pub fn store(&self, state: KthreadState, order: Ordering) {
        self.0.store(state as u8, order);
    }
}

#[repr(C, align(64))]
pub(crate) struct Kthread {
    /// `%gs:0`: this struct's own address.
    self_ptr: *const Kthread,
    /// `%gs:8`: preemption counter and pending bit.
    preempt: UnsafeCell<u32>,
    _pad: u32,
    /// `%gs:16`: the `%fs` base of the OS thread that is this kthread. A thread created by a
    /// kthread inherits its `%gs` base; comparing `%fs` tells such impostors apart.
    owner_fs: AtomicUsize,
    /// `%gs:24`: the running uthread, null while in the scheduler.
    current: Cell<*mut UThread>,

    pub index: usize,
    pub rt: *const Shared,

    // Shared with other kthreads.
    pub rq: RunQueue,
    pub timers: TimerQueue,
    pub state: AtomicKthreadState,
    /// What this kthread sleeps on while parked (standalone mode).
    pub park_word: ParkWord,
    /// While parked: the earliest timer deadline (any kthread's) this kthread wakes up for.
    pub park_deadline: WatchedDeadline,
    /// Bumped at every pass through the scheduler: an RCU quiescent state.
    pub rcu_gen: AtomicU64,
    pub tid: AtomicU32,
    /// Uthreads spawned on / exited on this kthread; written only by the owner.
    pub spawned: AtomicU64,
    pub exited: AtomicU64,

    // Owner only.
    pub sched_rsp: Cell<usize>,
    pub sched_running: RunningFlag,
    /// A uthread that exited and whose stack the scheduler must recycle.
    pub dead: Cell<*mut UThread>,
    /// Under iokerneld: the uthread the preemption signal interrupted, which the scheduler
    /// queues again only after the network work and timers that were due (`sched::kicked`).
    pub interrupted: Cell<*mut UThread>,
    pub stack_cache: UnsafeCell<Vec<NonNull<UThread>>>,
    rng: Cell<u64>,
    pub ticks: Cell<u32>,
    /// Under iokerneld: whether the scheduler has run a uthread since this kthread last got a
    /// core, which tells a request it answers before running anything from one that took a
    /// running uthread off the core.
    pub ran_since_grant: Cell<bool>,
    /// In the blocking reserve (see `sched::blocking`): asleep on `park_word`, outside the
    /// idle protocol, until the monitor puts it back to work.
    pub in_reserve: core::sync::atomic::AtomicBool,
    /// Context switches into uthreads, counted by the owner (read by the blocking monitor).
    switches: AtomicU64,
    next_id: Cell<u64>,
    id_limit: Cell<u64>,

    /// This kthread's end of the shared region under iokerneld.
    pub iok: Option<IokKthread>,

    /// `Config::uthread_tls`: switches install the next context's `%fs` base.
    uthread_tls: bool,
    /// With `uthread_tls`, the `%fs` base being left and the one being installed. Both equal
    /// the running uthread's base between switches; during a switch they differ, so that
    /// `current_kthread` recognises this kthread whichever base `%fs` holds at that instant
    /// (a signal can arrive between the two stores and the `wrfsbase`).
    fs_leaving: AtomicUsize,
    fs_entering: AtomicUsize,
}

pub(crate) const OFF_SELF: usize = offset_of!(Kthread, self_ptr);
pub(crate) const OFF_PREEMPT: usize = offset_of!(Kthread, preempt);
pub(crate) const OFF_FS: usize = offset_of!(Kthread, owner_fs);
pub(crate) const OFF_CURRENT: usize = offset_of!(Kthread, current);

const _: () = assert!(OFF_SELF == 0 && OFF_PREEMPT == 8 && OFF_FS == 16 && OFF_CURRENT == 24);

/// How many ids a kthread takes from the global counter at a time.
const ID_BLOCK: u64 = 1024;
static NEXT_ID_BLOCK: AtomicU64 = AtomicU64::new(1);

// SAFETY: fields shared between kthreads are atomics or lock-protected; the owner-only cells
// are touched only by the OS thread whose %gs points here, with preemption disabled.
unsafe impl Sync for Kthread {}
// SAFETY: as above.
unsafe impl Send for Kthread {}

impl Kthread {
    pub fn new(
        index: usize,
        rt: *const Shared,
        iok: Option<IokKthread>,
        uthread_tls: bool,
    ) -> Box<Kthread> {
        let rq = match &iok {
            Some(iok) => {
                let (head, tail) = crate::iokernel::runq_counters(iok);
                RunQueue::with_counters(RUNQ_CAPACITY, head, tail)
            }
            None => RunQueue::new(),
        };
        let mut k = Box::new(Kthread {
            self_ptr: core::ptr::null(),
            preempt: UnsafeCell::new(PREEMPT_NOT_PENDING),
            _pad: 0,
            owner_fs: AtomicUsize::new(0),
            current: Cell::new(core::ptr::null_mut()),
            index,
            rt,
            rq,
            timers: TimerQueue::published_in(iok.as_ref().map(|k| k.timer_deadline)),
            state: AtomicKthreadState::new(KthreadState::Running),
            park_word: ParkWord::new(),
            park_deadline: WatchedDeadline::new(),
            rcu_gen: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            spawned: AtomicU64::new(0),
            exited: AtomicU64::new(0),
            sched_rsp: Cell::new(0),
            sched_running: RunningFlag::new(true),
            dead: Cell::new(core::ptr::null_mut()),
            interrupted: Cell::new(core::ptr::null_mut()),
            stack_cache: UnsafeCell::new(Vec::new()),
            rng: Cell::new(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) << 17)),
            ticks: Cell::new(0),
            ran_since_grant: Cell::new(false),
            in_reserve: core::sync::atomic::AtomicBool::new(false),
            switches: AtomicU64::new(0),
            next_id: Cell::new(0),
            id_limit: Cell::new(0),
            iok,
            uthread_tls,
            fs_leaving: AtomicUsize::new(0),
            fs_entering: AtomicUsize::new(0),
        });
        k.self_ptr = &*k;
        k
    }

    /// Counts a switch into a uthread. Owner only: a load and a store, no locked instruction.
    #[inline]
    pub fn count_switch(&self) {
        self.switches
            .store(self.switches.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Switches into uthreads so far.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::Relaxed)
    }

    /// Makes the calling OS thread this kthread.
    pub fn bind_current_thread(&self) {
        ON_KTHREAD.with(|on| on.set(true));
        self.owner_fs.store(arch::fs_base(), Ordering::Relaxed);
        self.fs_leaving.store(arch::fs_base(), Ordering::Relaxed);
        self.fs_entering.store(arch::fs_base(), Ordering::Relaxed);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.tid.store(tid as u32, Ordering::Relaxed);
        arch::set_gs_base(self as *const Kthread as usize);
        // The scheduler itself always runs with preemption disabled.
        // SAFETY: only this thread touches the counter and it is not yet visible to signals.
        unsafe { *self.preempt.get() = PREEMPT_NOT_PENDING | 1 };
    }

    /// Detaches the calling OS thread from this kthread.
    pub fn unbind_current_thread(&self) {
        self.owner_fs.store(0, Ordering::Relaxed);
        arch::set_gs_base(0);
        ON_KTHREAD.with(|on| on.set(false));
    }

    /// Installs the `%fs` base of the context about to run: `uthread_fs`, or this kthread's
    /// own for 0 (the scheduler, or a uthread without TLS of its own). Does nothing unless
    /// `Config::uthread_tls` is set.
    ///
    /// # Safety
    /// Called on this kthread, with preemption disabled, right before switching to the context
    /// whose base this is; nothing after it reads thread-local data of the old context.
    #[inline(always)]
    pub unsafe fn install_fs(&self, uthread_fs: usize) {
        if self.uthread_tls {
            // SAFETY: forwarded.
            unsafe { self.install_fs_now(uthread_fs) };
        }
    }

    /// # Safety
    /// As for `install_fs`.
    #[inline]
    unsafe fn install_fs_now(&self, uthread_fs: usize) {
        let fs = if uthread_fs == 0 {
            self.owner_fs.load(Ordering::Relaxed)
        } else {
            uthread_fs
        };
        if self.fs_leaving.load(Ordering::Relaxed) == fs {
            return;
        }
        // Announce the new base before installing it and retire the old one after: at every
        // instant one of the two slots (or owner_fs) matches %fs, so a signal handler
        // running in between still finds its kthread.
        self.fs_entering.store(fs, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // SAFETY: per the contract; the base belongs to the context we switch to next.
        unsafe { arch::set_fs_base(fs) };
        compiler_fence(Ordering::SeqCst);
        self.fs_leaving.store(fs, Ordering::Relaxed);
    }

    /// Whether `fs` is a base this kthread runs with right now (its own, or, with
    /// `Config::uthread_tls`, one being switched between).
    #[inline(always)]
    fn owns_fs(&self, fs: usize) -> bool {
        self.owner_fs.load(Ordering::Relaxed) == fs
            || (self.uthread_tls
                && (self.fs_leaving.load(Ordering::Relaxed) == fs
                    || self.fs_entering.load(Ordering::Relaxed) == fs))
    }

    #[inline]
    pub fn current(&self) -> *mut UThread {
        self.current.get()
    }

    #[inline]
    pub fn set_current(&self, th: *mut UThread) {
        self.current.set(th);
    }

    #[inline]
    pub fn shared(&self) -> &Shared {
        // SAFETY: the runtime outlives its kthreads' bindings (unbound before it is freed).
        unsafe { &*self.rt }
    }

    /// This kthread's iokerneld state. Only for runtimes in iokerneld mode.
    pub fn iok(&self) -> &IokKthread {
        self.iok
            .as_ref()
            .expect("iokerneld state of a kthread in standalone mode")
    }

    pub fn next_random(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }

    pub fn alloc_thread_id(&self) -> u64 {
        if self.next_id.get() == self.id_limit.get() {
            let base = NEXT_ID_BLOCK.fetch_add(ID_BLOCK, Ordering::Relaxed);
            self.next_id.set(base);
            self.id_limit.set(base + ID_BLOCK);
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// The preemption word, for the signal handler and diagnostics.
    pub fn preempt_word(&self) -> u32 {
        // SAFETY: a plain read of a u32 that only this kthread and its signal handler write.
        unsafe { self.preempt.get().read_volatile() }
    }
}

/// Increments an owner-written counter without a read-modify-write instruction.
#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// An id from the global counter, for uthreads spawned from outside any kthread.
pub(crate) fn alloc_global_thread_id() -> u64 {
    NEXT_ID_BLOCK.fetch_add(1, Ordering::Relaxed)
}

std::thread_local! {
    /// Whether this OS thread is a kthread. Not per-kthread state (it is the same on every
    /// kthread), so a stale read after a uthread migrated is still right; it is only consulted
    /// when the `%gs`/`%fs` comparison below fails.
    static ON_KTHREAD: Cell<bool> = const { Cell::new(false) };
}

/// The kthread the caller runs on, if it runs on one.
#[inline(always)]
pub(crate) fn current_kthread() -> Option<&'static Kthread> {
    loop {
        let base = arch::gs_base();
        if base == 0 {
            return None;
        }
        // SAFETY: a nonzero gs base in this process is only ever set by bind_current_thread to
        // a Kthread, and Kthreads are never freed (see Shared::new), so this is live memory.
        let k = unsafe { &*(base as *const Kthread) };
        if k.owns_fs(arch::fs_base()) {
            return Some(k);
        }
        // Either a thread that inherited a kthread's %gs when it was created (not a kthread),
        // or a uthread preempted and moved to another kthread between the two reads.
        if !on_kthread_thread() {
            return None;
        }
    }
}

/// `ON_KTHREAD`, out of line: in a shared library (the `corral-run` shim) a thread-local's
/// address costs a `__tls_get_addr` call, which the compiler would otherwise hoist into every
/// caller of `current_kthread` (every `malloc` and `free` under the shim), fast path included.
#[cold]
#[inline(never)]
fn on_kthread_thread() -> bool {
    ON_KTHREAD.with(Cell::get)
}

/// Marks the thread-local data now installed (a uthread's own, with `Config::uthread_tls`) as
/// belonging to code that runs on kthreads, for `current_kthread`'s migration check.
pub(crate) fn mark_tls_on_kthread() {
    ON_KTHREAD.with(|on| on.set(true));
}

/// The current kthread, for code that only ever runs on one (the scheduler, a uthread).
///
/// # Safety
/// The caller runs on a kthread, and must not keep the reference across a context switch.
#[inline(always)]
pub(crate) unsafe fn this_kthread() -> &'static Kthread {
    // SAFETY: per the contract, %gs points at the live kthread we run on.
    unsafe { &*(arch::gs_read::<OFF_SELF>() as *const Kthread) }
}
