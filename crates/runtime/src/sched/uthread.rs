//! Uthreads: control block, spawning, joining and exit.

use core::cell::{Cell, UnsafeCell};
use core::fmt;
use core::num::NonZeroU64;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};
use std::any::Any;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use crate::arch;
use crate::config::check_stack_size;
use crate::preempt;
use crate::sched::kthread::{self, Kthread};
use crate::sched::running::RunningFlag;
use crate::sched::{self, Shared, stack};
use crate::sync::waitq::{self, WaitNode};

/// Closures up to this size live at the top of the uthread's own stack; larger ones are boxed.
const INLINE_CLOSURE_MAX: usize = 1024;

/// A uthread's control block, at the top of its stack mapping.
#[repr(C, align(64))]
pub(crate) struct UThread {
    rsp: UnsafeCell<usize>,
    /// 1 from the moment a kthread decides to run it until its context is fully saved.
    pub running: RunningFlag,
    id: Cell<u64>,
    name: UnsafeCell<Option<Box<str>>>,
    rt: Cell<*const Shared>,
    entry: Cell<unsafe fn(usize)>,
    arg: Cell<usize>,
    map_base: usize,
    map_len: usize,
    stack_size: usize,
    /// Its own `%fs` base (`Config::uthread_tls`), or 0 to run on its kthread's.
    fs_base: Cell<usize>,
}

unsafe fn no_entry(_: usize) {}

impl UThread {
    pub fn new(map_base: usize, map_len: usize, stack_size: usize) -> UThread {
        UThread {
            rsp: UnsafeCell::new(0),
            running: RunningFlag::new(false),
            id: Cell::new(0),
            name: UnsafeCell::new(None),
            rt: Cell::new(ptr::null()),
            entry: Cell::new(no_entry),
            arg: Cell::new(0),
            map_base,
            map_len,
            stack_size,
            fs_base: Cell::new(0),
        }
    }

    #[inline]
    pub fn rsp_slot(&self) -> *mut usize {
        self.rsp.get()
    }

    #[inline]
    pub fn saved_rsp(&self) -> usize {
        // SAFETY: only read by the kthread that is about to resume this uthread, after its
        // running flag showed the save completed.
        unsafe { *self.rsp.get() }
    }

    /// # Safety
    /// The runtime that spawned this uthread is alive (it outlives its uthreads).
    #[inline]
    pub unsafe fn runtime(&self) -> &Shared {
        // SAFETY: per the contract.
        unsafe { &*self.rt.get() }
    }

    #[inline]
    pub fn fs_base(&self) -> usize {
        self.fs_base.get()
    }

    pub fn mapping(&self) -> (usize, usize) {
        (self.map_base, self.map_len)
    }

    pub fn stack_size(&self) -> usize {
        self.stack_size
    }

    /// The memory its code runs on: from just above the guard page up to this control block
    /// (a closure kept inline sits at the top of that range, as a frame would).
    pub fn stack_range(&self) -> core::ops::Range<usize> {
        self.map_base + crate::config::page_size()..self as *const UThread as usize
    }

    /// Lowest and highest+1 address of the guard page.
    pub fn guard_range(&self) -> (usize, usize) {
        (self.map_base, self.map_base + crate::config::page_size())
    }

    pub fn id(&self) -> u64 {
        self.id.get()
    }

    /// The name, if any. Only for the uthread itself or its owner.
    pub fn name(&self) -> Option<&str> {
        // SAFETY: the name is written only at spawn and at recycling, never while anyone reads.
        unsafe { (*self.name.get()).as_deref() }
    }

    pub fn clear_for_reuse(&self) {
        // SAFETY: the uthread is dead; nobody reads its name.
        unsafe { *self.name.get() = None };
        self.running.release();
    }
}

/// Identifies a uthread for its whole life; never reused within a process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(NonZeroU64);

impl ThreadId {
    pub fn as_u64(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Debug for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ThreadId({})", self.0)
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The id of the calling uthread; `None` on a thread that is not a uthread.
pub fn current_id() -> Option<ThreadId> {
    preempt::disable();
    let id = kthread::current_kthread()
        .map(|k| k.current())
        .filter(|th| !th.is_null())
        // SAFETY: the current uthread is alive while it runs.
        .and_then(|th| NonZeroU64::new(unsafe { (*th).id() }));
    preempt::enable();
    id.map(ThreadId)
}

/// Index of the kthread the caller runs on right now (it may change at any switch);
/// `None` off a kthread.
pub fn kthread_index() -> Option<usize> {
    kthread::current_kthread().map(|k| k.index)
}

/// The calling uthread's stack (lowest address up to one past the highest), or `None`
/// outside a uthread: what a C library reports as a thread's stack, for programs that check
/// their stack pointer against it.
pub fn current_stack() -> Option<core::ops::Range<usize>> {
    preempt::disable();
    let range = kthread::current_kthread()
        .map(|k| k.current())
        .filter(|th| !th.is_null())
        // SAFETY: the current uthread is alive while it runs.
        .map(|th| unsafe { (*th).stack_range() });
    preempt::enable();
    range
}

/// The name of the calling uthread, if it is one and has a name.
pub fn current_name() -> Option<String> {
    preempt::disable();
    let name = kthread::current_kthread()
        .map(|k| k.current())
        .filter(|th| !th.is_null())
        // SAFETY: the current uthread is alive while it runs.
        .and_then(|th| unsafe { (*th).name().map(str::to_owned) });
    preempt::enable();
    name
}

/// Result slot shared by a uthread and its [`JoinHandle`].
struct Packet<T> {
    /// `RUNNING`, `DONE`, or the address of the joiner's wait node.
    state: AtomicUsize,
    result: UnsafeCell<Option<std::thread::Result<T>>>,
}

const RUNNING: usize = 0;
const DONE: usize = 1;

// SAFETY: the result is written once by the uthread before DONE is published, and read only
// by the joiner after it observed DONE.
unsafe impl<T: Send> Sync for Packet<T> {}

impl<T> Packet<T> {
    fn complete(&self, result: std::thread::Result<T>) {
        // SAFETY: only the uthread writes, once, before publishing DONE.
        unsafe { *self.result.get() = Some(result) };
        let prev = self.state.swap(DONE, Ordering::AcqRel);
        if prev > DONE {
            // SAFETY: a joiner's node stays alive until it is woken.
            unsafe { waitq::wake(prev as *const WaitNode) };
        }
    }

    fn wait(&self) {
        if self.state.load(Ordering::Acquire) == DONE {
            return;
        }
        let node = WaitNode::for_current();
        waitq::block_with(&node, || {
            self.state
                .compare_exchange(
                    RUNNING,
                    &node as *const WaitNode as usize,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        });
        debug_assert_eq!(self.state.load(Ordering::Acquire), DONE);
    }

    fn take(&self) -> std::thread::Result<T> {
        // SAFETY: DONE was observed with Acquire; the uthread no longer touches the slot.
        unsafe { (*self.result.get()).take() }.expect("uthread result taken twice")
    }
}

/// An owned permission to join a uthread. Dropping it detaches the uthread.
pub struct JoinHandle<T> {
    packet: Arc<Packet<T>>,
    id: ThreadId,
    name: Option<Box<str>>,
}

impl<T> JoinHandle<T> {
    /// Waits for the uthread to finish. `Err` carries the payload of its panic.
    pub fn join(self) -> Result<T, Box<dyn Any + Send + 'static>> {
        self.packet.wait();
        self.packet.take()
    }

    pub fn is_finished(&self) -> bool {
        self.packet.state.load(Ordering::Acquire) == DONE
    }

    pub fn id(&self) -> ThreadId {
        self.id
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

/// Configures a new uthread; errors come back as `io::Error` instead of panics.
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// Usable stack bytes (rounded up to whole pages); at least one page.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns onto the runtime of the calling uthread.
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let rt = current_runtime()?;
        self.spawn_in(rt, f)
    }

    pub(crate) fn spawn_in<F, T>(self, rt: &Shared, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let packet = Arc::new(Packet {
            state: AtomicUsize::new(RUNNING),
            result: UnsafeCell::new(None),
        });
        let theirs = packet.clone();
        let name = self.name.clone().map(String::into_boxed_str);
        let id = self.launch(rt, move || {
            let result = panic::catch_unwind(AssertUnwindSafe(f));
            theirs.complete(result);
        })?;
        Ok(JoinHandle { packet, id, name })
    }

    /// Spawns a uthread nobody will join, onto the runtime of the calling uthread. It costs
    /// no allocation beyond its stack; a panic in it is reported by the panic hook and
    /// otherwise ignored.
    pub fn spawn_detached<F>(self, f: F) -> io::Result<ThreadId>
    where
        F: FnOnce() + Send + 'static,
    {
        let rt = current_runtime()?;
        self.spawn_detached_in(rt, f)
    }

    pub(crate) fn spawn_detached_in<F>(self, rt: &Shared, f: F) -> io::Result<ThreadId>
    where
        F: FnOnce() + Send + 'static,
    {
        self.launch(rt, move || {
            let _ = panic::catch_unwind(AssertUnwindSafe(f));
        })
    }

    /// Creates the uthread and makes it runnable. `main` must not unwind.
    fn launch(self, rt: &Shared, main: impl FnOnce() + Send + 'static) -> io::Result<ThreadId> {
        let stack_size = match self.stack_size {
            Some(s) => {
                check_stack_size(s)?;
                stack::round_stack_size(s)
            }
            None => rt.stacks.default_size,
        };
        apply_backpressure();
        let name = self.name.map(String::into_boxed_str);
        preempt::disable();
        let k = kthread::current_kthread().filter(|k| ptr::eq(k.rt, rt));
        let th = match stack::alloc(k, rt, stack_size) {
            Ok(th) => th,
            Err(e) => {
                preempt::enable();
                return Err(e);
            }
        };
        let id = match k {
            Some(k) => {
                kthread::bump(&k.spawned);
                k.alloc_thread_id()
            }
            None => {
                rt.foreign_spawned.fetch_add(1, Ordering::Relaxed);
                kthread::alloc_global_thread_id()
            }
        };
        // SAFETY: th is a fresh or recycled control block owned by nobody else.
        unsafe { prepare(th, rt, id, name, main) };
        // A parked kthread (spawning for a datagram it drained while waiting for a grant) must
        // not keep the new uthread: see `sched::ready`.
        match k.filter(|k| k.state.load(Ordering::Relaxed) != kthread::KthreadState::Parked) {
            Some(k) => {
                sched::push_local(k, th.as_ptr() as usize);
                preempt::enable();
                rt.wake_if_idle_after_local_push();
            }
            None => {
                preempt::enable();
                rt.inject(th.as_ptr() as usize);
            }
        }
        Ok(ThreadId(
            NonZeroU64::new(id).expect("thread ids start at 1"),
        ))
    }
}

/// The runtime of the calling uthread.
fn current_runtime() -> io::Result<&'static Shared> {
    preempt::disable();
    let rt = kthread::current_kthread().map(|k| k.rt);
    preempt::enable();
    match rt {
        // SAFETY: a runtime outlives the kthreads bound to it, and so every uthread on them.
        Some(rt) => Ok(unsafe { &*rt }),
        None => Err(io::Error::other(
            "corral: spawn called outside a Corral runtime (use Runtime::spawn)",
        )),
    }
}

/// A spawning uthread whose local queue is full runs some of that work first, so that a tight
/// spawn loop cannot pile up unbounded numbers of unstarted uthreads (and their stacks).
fn apply_backpressure() {
    if !preempt::is_enabled() {
        return;
    }
    preempt::disable();
    let full = kthread::current_kthread().is_some_and(|k| {
        !k.current().is_null() && k.rq.len() >= super::runqueue::RUNQ_CAPACITY - 1
    });
    preempt::enable();
    if full {
        sched::yield_now();
    }
}

/// Spawns a uthread on the current runtime; panics if that fails (see [`Builder::spawn`]).
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn(f)
        .expect("corral: failed to spawn a uthread")
}

/// Spawns a uthread nobody will join (see [`Builder::spawn_detached`]); panics if that fails.
pub fn spawn_detached<F>(f: F) -> ThreadId
where
    F: FnOnce() + Send + 'static,
{
    Builder::new()
        .spawn_detached(f)
        .expect("corral: failed to spawn a uthread")
}

/// Fills in a control block and lays out its stack so the first switch runs `main`.
///
/// # Safety
/// `th` is owned by the caller and not running.
unsafe fn prepare<F: FnOnce() + Send + 'static>(
    th: NonNull<UThread>,
    rt: &Shared,
    id: u64,
    name: Option<Box<str>>,
    main: F,
) {
    // SAFETY: owned by the caller.
    let t = unsafe { th.as_ref() };
    t.id.set(id);
    // SAFETY: nobody reads the name of a uthread that is not running yet.
    unsafe { *t.name.get() = name };
    t.rt.set(rt);
    t.fs_base.set(0);
    t.running.release();
    let header = th.as_ptr() as usize;
    let top = if size_of::<F>() <= INLINE_CLOSURE_MAX && align_of::<F>() <= 64 {
        let at = (header - size_of::<F>()) & !(align_of::<F>().max(16) - 1);
        // SAFETY: `at` lies in the top of this uthread's own stack, suitably aligned.
        unsafe { (at as *mut F).write(main) };
        t.entry.set(call_inline::<F>);
        t.arg.set(at);
        at & !15
    } else {
        t.entry.set(call_boxed::<F>);
        t.arg.set(Box::into_raw(Box::new(main)) as usize);
        header
    };
    // SAFETY: [map_base + page, top) is this uthread's writable stack, far more than 128 bytes.
    let rsp = unsafe { arch::init_stack(top, uthread_start, th.as_ptr() as usize) };
    // SAFETY: not running, owned by the caller.
    unsafe { *t.rsp.get() = rsp };
}

unsafe fn call_inline<F: FnOnce()>(at: usize) {
    // SAFETY: prepare wrote an F here and nobody else reads it.
    let f = unsafe { (at as *mut F).read() };
    f();
}

unsafe fn call_boxed<F: FnOnce()>(at: usize) {
    // SAFETY: prepare leaked a Box<F> to this address.
    let f = unsafe { Box::from_raw(at as *mut F) };
    f();
}

/// First Rust code of every uthread.
unsafe extern "C" fn uthread_start(th: usize) -> ! {
    // We arrive through a switch made with preemption disabled.
    // SAFETY: we run on a kthread.
    unsafe { preempt::enable_on_kthread() };
    let th = th as *const UThread;
    // SAFETY: our own control block.
    let (entry, arg) = unsafe { ((*th).entry.get(), (*th).arg.get()) };
    // SAFETY: entry/arg were set together by prepare; the closure catches its own panics.
    unsafe { entry(arg) };
    // SAFETY: the closure returned; nothing left to drop on this stack.
    unsafe { sched::exit_current() }
}

/// Gives the calling uthread its own `%fs` base (thread control block and TLS), installed now
/// and by every switch back to it; 0 returns it to its kthread's. Only in a runtime built with
/// `Config::uthread_tls`, which is what lets unmodified C programs keep `errno`, `__thread`
/// variables and their C library's per-thread state per uthread.
///
/// # Safety
/// `fs` is 0 or a thread control block laid out as the C library expects, used by no other
/// thread until this uthread sets another base or exits; the caller does not keep references
/// to thread-local data across this call.
pub unsafe fn set_uthread_fs_base(fs: usize) -> io::Result<()> {
    preempt::disable();
    let Some(k) = kthread::current_kthread().filter(|k| !k.current().is_null()) else {
        preempt::enable();
        return Err(io::Error::other(
            "corral: set_uthread_fs_base called outside a uthread",
        ));
    };
    if !k.shared().config.uthread_tls {
        preempt::enable();
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "corral: set_uthread_fs_base needs Config::uthread_tls",
        ));
    }
    // SAFETY: the current uthread is alive while it runs.
    unsafe { (*k.current()).fs_base.set(fs) };
    // SAFETY: on this kthread, preemption disabled; the base is the running uthread's own.
    unsafe { k.install_fs(fs) };
    // Read through the new base: the migration check in current_kthread must see true.
    kthread::mark_tls_on_kthread();
    preempt::enable();
    Ok(())
}

/// Ends the calling uthread at once, like `pthread_exit`: whatever lives on its stack is
/// leaked, not dropped. Returns an error off a uthread.
///
/// # Safety
/// Nothing on the uthread's stack may be referenced by anyone once it is gone.
pub unsafe fn exit_uthread() -> io::Error {
    preempt::disable();
    let on_uthread = kthread::current_kthread().is_some_and(|k| !k.current().is_null());
    preempt::enable();
    if !on_uthread {
        return io::Error::other("corral: exit_uthread called outside a uthread");
    }
    // SAFETY: per the contract, nothing on this stack is needed any more.
    unsafe { sched::exit_current() }
}

/// For diagnostics: the current uthread of `k`, if any.
pub(crate) fn running_on(k: &Kthread) -> Option<&UThread> {
    // SAFETY: the current uthread is alive while it is current.
    unsafe { k.current().as_ref() }
}
