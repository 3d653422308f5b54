//! C ABI of the Corral runtime: uthreads, mutexes, condition variables, wait groups and UDP
//! sockets for C and C++ programs. `include/corral.h` is generated from this file by cbindgen (see `build.rs`), so
//! the doc comments here are the C documentation; `include/corral.hpp` wraps it for C++.
//!
//! Every function that can fail returns 0 or a negative errno value. Nothing unwinds into C: a
//! Rust panic is caught at the boundary, reported on stderr by the panic hook, and returned as
//! `-ENOTRECOVERABLE`.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::alloc::{self, Layout};
use std::io::{self, Write};
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use std::net::{Ipv4Addr, SocketAddrV4};

use corral::net::{NetConfig, UdpSocket};
use corral::{Builder, Condvar, Config, JoinHandle, Mutex, MutexGuard, Runtime, WaitGroup};

/// Returned for a Rust panic caught at the boundary: the runtime's state may be inconsistent.
const PANICKED: c_int = -libc::ENOTRECOVERABLE;

/// Runs `f`, turning a panic into `on_panic`: a panic reaching an `extern "C"` boundary would
/// abort the whole process, where C callers can handle an error code.
fn ffi_guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    // AssertUnwindSafe: after a panic we only hand back an error code. Restoring the runtime's
    // invariants is not possible from here; keeping the unwind out of C is what must hold.
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Maps a runtime error to a positive errno value.
fn errno_of(e: &io::Error) -> c_int {
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    // The runtime wraps some OS errors with a message, which keeps the kind but drops the code.
    match e.kind() {
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::PermissionDenied => libc::EPERM,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        _ => libc::EIO,
    }
}

/// Writes one diagnostic line, ignoring a closed stderr (`eprintln!` would panic on it).
fn report(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "corral: {msg}");
}

/// A C pointer carried to another uthread. C owns what it points to.
#[derive(Clone, Copy)]
struct SendPtr(*mut c_void);

// SAFETY: Rust never dereferences the pointer; whether the pointee may be used from another
// thread is the C caller's business, as with the argument of pthread_create.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// Closures must call this rather than read `.0`: closures capture disjoint fields, and
    /// capturing the bare `*mut c_void` would make the closure `!Send`.
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// Allocates uninitialized memory for a `T`, or returns null if memory runs out: C callers
/// expect to handle that, where `Box::new` would abort the process.
fn try_alloc<T>() -> *mut T {
    const { assert!(size_of::<T>() != 0) };
    // SAFETY: the layout is not zero-sized (checked above).
    unsafe { alloc::alloc(Layout::new::<T>()) }.cast::<T>()
}

/// Moves `value` to the heap, or returns null if memory runs out (see [`try_alloc`]).
fn try_box<T>(value: T) -> *mut T {
    let p = try_alloc::<T>();
    if !p.is_null() {
        // SAFETY: fresh, non-null, and laid out for a T.
        unsafe { p.write(value) };
    }
    p
}

/// Frees what [`try_box`] returned. `Box::from_raw` accepts it because `try_alloc` used the
/// global allocator with `T`'s own layout, as `Box` does.
///
/// # Safety
/// `p` came from `try_box::<T>` (or `try_alloc::<T>` and was then initialized) and is not used
/// afterwards.
unsafe fn free_boxed<T>(p: *mut T) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p) });
}

/// Borrows a C object for the duration of a call.
///
/// # Safety
/// `p` is null or points to a live object that stays alive for `'a`: the C contract is that
/// an object is not freed while any call on it is in progress.
unsafe fn obj<'a, T>(p: *mut T) -> Option<&'a T> {
    // SAFETY: per the contract.
    unsafe { p.as_ref() }
}

// ---------------------------------------------------------------------------------------------
// Runtime

/// Settings of a runtime started by `corral_run`. Start from `corral_config_default` and change
/// the fields you need.
#[repr(C)]
pub struct CorralConfig {
    /// How many kernel threads run uthreads (the most cores used at once); 1 to 1024.
    pub kthreads: u32,
    /// Usable stack bytes of each uthread, rounded up to whole pages; one page to 1 GiB.
    pub stack_size: usize,
    /// How long an idle kernel thread polls for work before it sleeps, in nanoseconds; at most
    /// one second.
    pub spin_before_park_ns: u32,
    /// Nonzero pins kernel thread i to the i-th CPU this process may run on.
    pub pin: c_int,
}

impl CorralConfig {
    fn to_config(&self) -> Config {
        let mut cfg = Config::from_env()
            .kthreads(self.kthreads as usize)
            .stack_size(self.stack_size)
            .spin_before_park(Duration::from_nanos(self.spin_before_park_ns.into()));
        if self.pin != 0 {
            cfg = cfg.pinned();
        }
        cfg
    }
}

/// Fills `config` with the defaults: one kernel thread per CPU this process may use, 256 KiB
/// stacks, 2 microseconds of polling before sleeping, no pinning. Does nothing if `config` is
/// NULL.
///
/// # Safety
/// `config` is NULL or points to writable memory for one `corral_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_config_default(config: *mut CorralConfig) {
    ffi_guard((), || {
        if config.is_null() {
            return;
        }
        let d = Config::default();
        let c = CorralConfig {
            kthreads: u32::try_from(d.kthreads).unwrap_or(u32::MAX),
            stack_size: d.stack_size,
            spin_before_park_ns: u32::try_from(d.spin_before_park.as_nanos()).unwrap_or(u32::MAX),
            pin: c_int::from(d.cpus.is_some()),
        };
        // SAFETY: non-null and writable per the contract; `write` because C may pass
        // uninitialized memory.
        unsafe { config.write(c) };
    });
}

/// Starts a runtime configured by `config` (NULL: the defaults), runs `main_fn(arg)` in a
/// uthread on it, and returns when `main_fn` returns, after shutting the runtime down. The
/// calling OS thread blocks meanwhile.
///
/// When the environment variable `CORRAL_IOKERNELD` names iokerneld's control socket, the
/// runtime registers with iokerneld, which then grants and takes back its cores; `pin` must
/// then be 0.
///
/// The network (for the `corral_udp_*` functions) is configured by environment variables:
/// - `CORRAL_IP`: the runtime's IPv4 address, `a.b.c.d` or `a.b.c.d/prefix` (default prefix
///   24). Without it the runtime has no network and `corral_udp_bind` fails with `-ENETDOWN`.
/// - `CORRAL_NETMASK`: overrides the prefix, e.g. `255.255.0.0`.
/// - `CORRAL_GATEWAY`: next hop for addresses outside the subnet.
/// - `CORRAL_MAC`: `aa:bb:cc:dd:ee:ff`; by default `02:43:` followed by the address's bytes.
/// - `CORRAL_STATIC_ARP`: `ip=mac,ip=mac,...` neighbours that are never resolved.
///
/// Under iokerneld, frames reach the runtime through it; without iokerneld only the runtime's
/// own address is reachable.
///
/// Join or wait for the uthreads you spawn before `main_fn` returns: at shutdown, uthreads that
/// can still run are run to completion, but ones blocked then are abandoned.
///
/// Returns 0, or:
/// - `-EINVAL`: `main_fn` is NULL, or a setting is out of range (a message naming the setting
///   and its value is written to stderr);
/// - a negative errno value from the OS if the kernel threads or the first uthread cannot be
///   started (e.g. `-EAGAIN`, `-ENOMEM`);
/// - `-ENOTRECOVERABLE`: an internal error (a Rust panic, reported on stderr).
///
/// # Safety
/// `config` is NULL or points to a valid `corral_config`; `main_fn` may be called with `arg`
/// on another OS thread and must not unwind (no C++ exception or `longjmp` may leave it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_run(
    config: *const CorralConfig,
    main_fn: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(main_fn) = main_fn else {
            report(format_args!("corral_run: main_fn is NULL"));
            return -libc::EINVAL;
        };
        // SAFETY: NULL or valid per the contract.
        let mut cfg = match unsafe { config.as_ref() } {
            Some(c) => c.to_config(),
            None => Config::from_env(),
        };
        match NetConfig::from_env() {
            Ok(Some(net)) => cfg = cfg.net(net),
            Ok(None) => {}
            Err(e) => {
                report(format_args!("corral_run: {e}"));
                return -libc::EINVAL;
            }
        }
        if let Err(e) = cfg.validate() {
            report(format_args!("corral_run: {e}"));
            return -libc::EINVAL;
        }
        let rt = match Runtime::new(cfg) {
            Ok(rt) => rt,
            Err(e) => {
                report(format_args!("corral_run: cannot start the runtime: {e}"));
                return -errno_of(&e);
            }
        };
        let arg = SendPtr(arg);
        let main = move || {
            // SAFETY: the caller promised main_fn accepts arg on any thread and never unwinds.
            unsafe { main_fn(arg.get()) }
        };
        match rt.spawn_with(Builder::new().name("main"), main) {
            Ok(handle) => match handle.join() {
                Ok(()) => 0,
                Err(_) => PANICKED,
            },
            Err(e) => {
                report(format_args!("corral_run: cannot spawn main_fn: {e}"));
                -errno_of(&e)
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Uthreads

/// Opaque; see `corral_thread_t`.
pub struct CorralThread {
    handle: JoinHandle<SendPtr>,
}

/// A joinable uthread, from `corral_spawn`. Released by `corral_join` or `corral_detach`.
pub type ThreadT = CorralThread;

/// Spawns on the calling uthread's runtime; only uthreads can, since a plain OS thread has no
/// runtime to spawn onto.
fn spawn_here<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, c_int> {
    if corral::kthread_index().is_none() {
        return Err(-libc::EPERM);
    }
    Builder::new().spawn(f).map_err(|e| -errno_of(&e))
}

/// Spawns a uthread running `fn(arg)` on the caller's runtime and stores a handle to it in
/// `*out` (only on success). The handle must be passed to `corral_join` or `corral_detach`
/// exactly once.
///
/// Returns 0, or `-EINVAL` (`out` or `fn` is NULL), `-EPERM` (the caller is not a uthread),
/// `-ENOMEM` (no memory for the stack), another negative errno value from the OS, or
/// `-ENOTRECOVERABLE` (internal error).
///
/// # Safety
/// `out` is NULL or writable; `fn` may be called with `arg` on another OS thread and must not
/// unwind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_spawn(
    out: *mut *mut ThreadT,
    r#fn: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(f) = r#fn else { return -libc::EINVAL };
        if out.is_null() {
            return -libc::EINVAL;
        }
        // Allocated before spawning: once the uthread exists it cannot be taken back, and a
        // failed call must not leave it running with the caller's `arg`.
        let slot = try_alloc::<CorralThread>();
        if slot.is_null() {
            return -libc::ENOMEM;
        }
        let arg = SendPtr(arg);
        // SAFETY: the caller promised f accepts arg on any thread and never unwinds.
        let run = move || SendPtr(unsafe { f(arg.get()) });
        match spawn_here(run) {
            Ok(handle) => {
                // SAFETY: slot is fresh memory for a CorralThread; out is non-null and
                // writable per the contract.
                unsafe {
                    slot.write(CorralThread { handle });
                    out.write(slot);
                }
                0
            }
            Err(code) => {
                // SAFETY: allocated by try_alloc with this layout and never initialized.
                unsafe { alloc::dealloc(slot.cast(), Layout::new::<CorralThread>()) };
                code
            }
        }
    })
}

/// Spawns a uthread running `fn(arg)` that nobody joins; its resources are freed when it
/// returns. Returns as `corral_spawn` does.
///
/// # Safety
/// `fn` may be called with `arg` on another OS thread and must not unwind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_spawn_detached(
    r#fn: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(f) = r#fn else { return -libc::EINVAL };
        let arg = SendPtr(arg);
        // SAFETY: the caller promised f accepts arg on any thread and never unwinds.
        let run = move || unsafe { f(arg.get()) };
        match spawn_here(run) {
            Ok(handle) => {
                drop(handle);
                0
            }
            Err(code) => code,
        }
    })
}

/// Waits for the uthread of `thread` to return, stores its return value in `*retval` unless
/// `retval` is NULL, and frees the handle. May be called from any thread, uthread or not.
///
/// Returns 0, `-EINVAL` (`thread` is NULL) or `-ENOTRECOVERABLE` (internal error; the handle
/// is freed all the same).
///
/// # Safety
/// `thread` is NULL or a handle from `corral_spawn` not yet joined or detached; `retval` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_join(thread: *mut ThreadT, retval: *mut *mut c_void) -> c_int {
    ffi_guard(PANICKED, || {
        if thread.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live handle from corral_spawn (via try_box), consumed here exactly once.
        let t = unsafe { Box::from_raw(thread) };
        match t.handle.join() {
            Ok(value) => {
                if !retval.is_null() {
                    // SAFETY: non-null and writable per the contract.
                    unsafe { retval.write(value.get()) };
                }
                0
            }
            Err(_) => PANICKED,
        }
    })
}

/// Frees `thread` without waiting; the uthread keeps running and its resources are freed when
/// it returns. Returns 0, or `-EINVAL` if `thread` is NULL.
///
/// # Safety
/// `thread` is NULL or a handle from `corral_spawn` not yet joined or detached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_detach(thread: *mut ThreadT) -> c_int {
    ffi_guard(PANICKED, || {
        if thread.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live handle from corral_spawn, consumed here exactly once.
        unsafe { free_boxed(thread) };
        0
    })
}

/// Lets other uthreads run. Outside a runtime, yields the OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_yield() {
    ffi_guard((), corral::yield_now);
}

/// Blocks the calling uthread for at least `us` microseconds, letting others run meanwhile.
/// Outside a runtime, sleeps the OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_sleep_us(us: u64) {
    ffi_guard((), || corral::sleep(Duration::from_micros(us)));
}

/// The calling uthread's id: nonzero, and never reused within the process. 0 if the caller is
/// not a uthread.
#[unsafe(no_mangle)]
pub extern "C" fn corral_thread_id() -> u64 {
    ffi_guard(0, || corral::current_id().map_or(0, |id| id.as_u64()))
}

/// Index of the kernel thread the caller runs on at this moment (it can change at any blocking
/// call or yield), or -1 if the caller is not on one of a runtime's kernel threads.
#[unsafe(no_mangle)]
pub extern "C" fn corral_kthread_index() -> c_int {
    ffi_guard(-1, || {
        corral::kthread_index().map_or(-1, |i| c_int::try_from(i).unwrap_or(c_int::MAX))
    })
}

// ---------------------------------------------------------------------------------------------
// Mutex

/// Opaque; see `corral_mutex_t`.
pub struct CorralMutex {
    lock: Mutex<()>,
    /// Token of the holder (see `caller_token`), 0 when unlocked. Written only by the holder,
    /// so a thread that reads its own token knows it holds the lock (Relaxed suffices: it can
    /// only be reading its own latest write).
    owner: AtomicU64,
    /// The holder's guard. The Rust API unlocks by dropping a guard, and C needs lock and unlock
    /// as separate calls, so the guard is parked here between them. Only the holder touches it.
    /// `'static` is sound because `corral_mutex_free` refuses a locked mutex, so the guard is
    /// always dropped before the mutex it borrows.
    guard: UnsafeCell<Option<MutexGuard<'static, ()>>>,
}

/// A mutex that blocks uthreads (and plain OS threads) waiting for it. Error-checking: locking
/// it again from the holder, or unlocking it from another thread, fails instead of deadlocking
/// or corrupting it.
pub type MutexT = CorralMutex;

/// Identifies the calling thread for mutex ownership. A uthread may move between OS threads,
/// so uthreads use their id; other threads use the address of a thread-local, tagged with the
/// top bit so the two kinds never collide (uthread ids are counters far below 2^63).
fn caller_token() -> u64 {
    match corral::current_id() {
        Some(id) => id.as_u64(),
        None => {
            thread_local! { static TOKEN: u8 = const { 0 } }
            TOKEN.with(|t| ptr::from_ref(t).addr() as u64) | (1 << 63)
        }
    }
}

impl CorralMutex {
    /// # Safety
    /// The caller holds the lock (its token is in `owner`).
    unsafe fn take_guard(&self) -> MutexGuard<'static, ()> {
        // SAFETY: only the holder touches the cell, and the caller is the holder.
        unsafe { (*self.guard.get()).take() }.expect("a held corral_mutex stores its guard")
    }

    /// # Safety
    /// `guard` is for this mutex and was just acquired by the caller.
    unsafe fn store_guard(&self, guard: MutexGuard<'static, ()>, token: u64) {
        self.owner.store(token, Ordering::Relaxed);
        // SAFETY: the caller holds the lock, so nobody else touches the cell.
        unsafe { *self.guard.get() = Some(guard) };
    }

    fn holds(&self, token: u64) -> bool {
        self.owner.load(Ordering::Relaxed) == token
    }
}

/// Creates an unlocked mutex. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_mutex_new() -> *mut MutexT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralMutex {
            lock: Mutex::new(()),
            owner: AtomicU64::new(0),
            guard: UnsafeCell::new(None),
        })
    })
}

/// Locks `mutex`, blocking the caller until it is free. Returns 0, `-EINVAL` (NULL) or
/// `-EDEADLK` (the caller already holds it).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_lock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live until corral_mutex_free, which refuses it while it is locked, so it
        // outlives the guard we store ('static).
        let Some(m) = (unsafe { obj::<'static>(mutex) }) else {
            return -libc::EINVAL;
        };
        let me = caller_token();
        if m.holds(me) {
            return -libc::EDEADLK;
        }
        let guard = m.lock.lock();
        // SAFETY: just acquired.
        unsafe { m.store_guard(guard, me) };
        0
    })
}

/// Locks `mutex` if it is free. Returns 0, `-EBUSY` (locked, also by the caller) or `-EINVAL`
/// (NULL).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_trylock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: as in corral_mutex_lock.
        let Some(m) = (unsafe { obj::<'static>(mutex) }) else {
            return -libc::EINVAL;
        };
        match m.lock.try_lock() {
            Some(guard) => {
                // SAFETY: just acquired.
                unsafe { m.store_guard(guard, caller_token()) };
                0
            }
            None => -libc::EBUSY,
        }
    })
}

/// Unlocks `mutex`, handing it to the longest waiter if any. Returns 0, `-EINVAL` (NULL) or
/// `-EPERM` (the caller does not hold it).
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_unlock(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(m) = (unsafe { obj(mutex) }) else {
            return -libc::EINVAL;
        };
        if !m.holds(caller_token()) {
            return -libc::EPERM;
        }
        m.owner.store(0, Ordering::Relaxed);
        // SAFETY: the caller holds the lock (checked above).
        drop(unsafe { m.take_guard() });
        0
    })
}

/// Frees `mutex`. Returns 0 (also for NULL), or `-EBUSY` if it is locked, in which case it is
/// left alone. Nobody may use it afterwards, and nobody may be waiting for it.
///
/// # Safety
/// `mutex` is NULL or a live mutex from `corral_mutex_new`, with no call on it in progress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_mutex_free(mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(m) = (unsafe { obj(mutex) }) else {
            return 0;
        };
        // Unlocked means no stored guard: the lock hands off straight to waiters, so a
        // successful try_lock also means nobody is queued.
        match m.lock.try_lock() {
            Some(guard) => drop(guard),
            None => return -libc::EBUSY,
        }
        // SAFETY: from corral_mutex_new; unlocked, and the caller promised no further use.
        unsafe { free_boxed(mutex) };
        0
    })
}

// ---------------------------------------------------------------------------------------------
// Condition variable

/// Opaque; see `corral_condvar_t`.
pub struct CorralCondvar {
    cv: Condvar,
}

/// A condition variable, used with a `corral_mutex_t`.
pub type CondvarT = CorralCondvar;

/// Creates a condition variable. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_condvar_new() -> *mut CondvarT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralCondvar { cv: Condvar::new() })
    })
}

/// Shared by wait and timedwait: `wait` gets the guard and returns whether it timed out.
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
unsafe fn condvar_wait_with(
    condvar: *mut CorralCondvar,
    mutex: *mut CorralMutex,
    wait: impl FnOnce(&Condvar, &mut MutexGuard<'static, ()>) -> bool,
) -> c_int {
    // SAFETY: live for the call per the contract.
    let cv = unsafe { obj(condvar) };
    // SAFETY: as in corral_mutex_lock.
    let m = unsafe { obj::<'static>(mutex) };
    let (Some(cv), Some(m)) = (cv, m) else {
        return -libc::EINVAL;
    };
    let me = caller_token();
    if !m.holds(me) {
        return -libc::EPERM;
    }
    // The guard leaves the cell for the wait: while we sleep the mutex is free, and the next
    // holder stores its own guard there.
    m.owner.store(0, Ordering::Relaxed);
    // SAFETY: the caller holds the lock (checked above).
    let mut guard = unsafe { m.take_guard() };
    let timed_out = wait(&cv.cv, &mut guard);
    // SAFETY: the wait re-acquired the mutex before returning.
    unsafe { m.store_guard(guard, me) };
    if timed_out { -libc::ETIMEDOUT } else { 0 }
}

/// Unlocks `mutex`, waits until `condvar` is signalled, and locks `mutex` again before
/// returning. Wake-ups are never lost, but re-check your condition in a loop: another thread
/// may get the mutex first.
///
/// Returns 0, `-EINVAL` (a NULL argument) or `-EPERM` (the caller does not hold `mutex`).
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_wait(condvar: *mut CondvarT, mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: forwarded contract.
        unsafe {
            condvar_wait_with(condvar, mutex, |cv, g| {
                cv.wait(g);
                false
            })
        }
    })
}

/// Like `corral_condvar_wait`, giving up after `timeout_us` microseconds: returns
/// `-ETIMEDOUT` then, never earlier than the timeout (with `mutex` locked again).
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_timedwait(
    condvar: *mut CondvarT,
    mutex: *mut MutexT,
    timeout_us: u64,
) -> c_int {
    ffi_guard(PANICKED, || {
        let timeout = Duration::from_micros(timeout_us);
        // SAFETY: forwarded contract.
        unsafe {
            condvar_wait_with(condvar, mutex, |cv, g| {
                cv.wait_timeout(g, timeout).timed_out()
            })
        }
    })
}

/// Wakes the longest waiter on `condvar`, if any. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_signal(condvar: *mut CondvarT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(cv) = (unsafe { obj(condvar) }) else {
            return -libc::EINVAL;
        };
        cv.cv.notify_one();
        0
    })
}

/// Wakes every waiter on `condvar`. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_broadcast(condvar: *mut CondvarT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(cv) = (unsafe { obj(condvar) }) else {
            return -libc::EINVAL;
        };
        cv.cv.notify_all();
        0
    })
}

/// Frees `condvar` (NULL is ignored). Nobody may be waiting on it or use it afterwards.
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`, with no call on
/// it in progress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_free(condvar: *mut CondvarT) {
    ffi_guard((), || {
        if !condvar.is_null() {
            // SAFETY: from corral_condvar_new; the caller promised no further use.
            unsafe { free_boxed(condvar) };
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Wait group

/// Opaque; see `corral_waitgroup_t`.
pub struct CorralWaitGroup {
    wg: WaitGroup,
    /// One reference for the owner (dropped by `corral_waitgroup_free`) plus one per `done` in
    /// progress. `WaitGroup::done` still touches the group after the decrement that lets a
    /// waiter return, and C code typically frees the group right after `wait`, so the memory
    /// must outlive every `done` call, not just the count reaching zero.
    refs: AtomicUsize,
}

impl CorralWaitGroup {
    /// # Safety
    /// `p` is live and the caller owns one of its references, which it gives up here.
    unsafe fn release(p: *mut CorralWaitGroup) {
        // SAFETY: live while we hold our reference.
        let refs = unsafe { &(*p).refs };
        if refs.fetch_sub(1, Ordering::Release) == 1 {
            // Pairs with the other holders' Release decrements: their use of the group
            // happens before the free.
            fence(Ordering::Acquire);
            // SAFETY: ours was the last reference; nobody can reach the group any more.
            unsafe { free_boxed(p) };
        }
    }
}

/// Waits for a set of tasks: `add` before starting them, `done` as each ends, `wait` until
/// all are done.
pub type WaitGroupT = CorralWaitGroup;

/// Creates a wait group with a count of 0. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_waitgroup_new() -> *mut WaitGroupT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralWaitGroup {
            wg: WaitGroup::new(),
            refs: AtomicUsize::new(1),
        })
    })
}

/// Adds `n` to the count of tasks. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_add(wg: *mut WaitGroupT, n: usize) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        g.wg.add(n);
        0
    })
}

/// Marks one task done, waking the waiters when the count reaches 0. Returns 0, or `-EINVAL`
/// (NULL, or the count is already 0). The group may be freed by a waiter while this call is
/// still returning; that is safe.
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new` whose count this task is part
/// of.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_done(wg: *mut WaitGroupT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract: our task is still counted, so the owner
        // cannot have passed wait and freed it yet.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        // Relaxed: this happens before our decrement of the count, which happens before the
        // waiter returns and frees, so the owner's decrement of refs sees ours (as Arc::clone).
        g.refs.fetch_add(1, Ordering::Relaxed);
        // Racy against a concurrent excess `done`, but catches the plain misuse before the
        // runtime's count wraps around.
        let rc = if g.wg.count() == 0 {
            -libc::EINVAL
        } else {
            ffi_guard(PANICKED, || {
                g.wg.done();
                0
            })
        };
        // SAFETY: we took a reference above.
        unsafe { CorralWaitGroup::release(wg) };
        rc
    })
}

/// Blocks until the count is 0 (returns at once if it is). Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_wait(wg: *mut WaitGroupT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        g.wg.wait();
        0
    })
}

/// Frees `wg` (NULL is ignored). Call it once nobody waits on it and no more tasks will call
/// `corral_waitgroup_done`; `done` calls still returning are fine.
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`, freed only once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_free(wg: *mut WaitGroupT) {
    ffi_guard((), || {
        if !wg.is_null() {
            // SAFETY: live, and the owner's reference is given up exactly once.
            unsafe { CorralWaitGroup::release(wg) };
        }
    });
}

// ---------------------------------------------------------------------------------------------
// UDP

/// An IPv4 socket address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CorralSockAddr {
    /// IPv4 address in host byte order: 10.0.0.2 is `0x0a000002`. 0 is "any" in
    /// `corral_udp_bind`.
    pub ip: u32,
    /// Port in host byte order; 0 in `corral_udp_bind` picks a free ephemeral port.
    pub port: u16,
}

impl From<CorralSockAddr> for SocketAddrV4 {
    fn from(a: CorralSockAddr) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(a.ip), a.port)
    }
}

impl From<SocketAddrV4> for CorralSockAddr {
    fn from(a: SocketAddrV4) -> CorralSockAddr {
        CorralSockAddr {
            ip: u32::from(*a.ip()),
            port: a.port(),
        }
    }
}

/// Opaque; see `corral_udp_t`.
pub struct CorralUdp {
    socket: UdpSocket,
}

/// A UDP socket of the runtime (see `corral_udp_bind`).
pub type UdpT = CorralUdp;

/// Reads a C socket address, or `-EINVAL` for NULL.
///
/// # Safety
/// `addr` is NULL or points to a valid `corral_sockaddr`.
unsafe fn addr_in(addr: *const CorralSockAddr) -> Result<SocketAddrV4, c_int> {
    // SAFETY: per the contract.
    unsafe { addr.as_ref() }
        .map(|a| SocketAddrV4::from(*a))
        .ok_or(-libc::EINVAL)
}

/// Turns a byte count or an error into the `ssize_t`-style result of the UDP calls.
fn len_or_errno(r: io::Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => -(errno_of(&e) as isize),
    }
}

/// Opens a UDP socket bound to `local` (`ip` 0 or the runtime's address; `port` 0 for an
/// ephemeral port) and stores it in `*out`. Call from a uthread of a runtime whose network is
/// configured (see `corral_run`).
///
/// Returns 0, or `-EINVAL` (a NULL pointer), `-EADDRINUSE`, `-EADDRNOTAVAIL` (another
/// address), `-ENETDOWN` (no network configured, or not called from a uthread),
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `local` points to a valid `corral_sockaddr`; `out` points to writable memory for one
/// pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_bind(
    local: *const CorralSockAddr,
    out: *mut *mut UdpT,
) -> c_int {
    ffi_guard(PANICKED, || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: per the contract.
        let local = match unsafe { addr_in(local) } {
            Ok(a) => a,
            Err(e) => return e,
        };
        let socket = match UdpSocket::bind(local) {
            Ok(s) => s,
            Err(e) => return -errno_of(&e),
        };
        let p = try_box(CorralUdp { socket });
        if p.is_null() {
            return -libc::ENOMEM;
        }
        // SAFETY: writable per the contract.
        unsafe { out.write(p) };
        0
    })
}

/// Sets the only peer `corral_udp_send` sends to and `corral_udp_recv` receives from.
/// Returns 0, or `-EINVAL` (NULL, port 0 or address 0).
///
/// # Safety
/// `udp` is a live socket; `peer` points to a valid `corral_sockaddr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_connect(udp: *mut UdpT, peer: *const CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: per the contract.
        let (Some(u), Ok(peer)) = (unsafe { obj(udp) }, unsafe { addr_in(peer) }) else {
            return -libc::EINVAL;
        };
        match u.socket.connect(peer) {
            Ok(()) => 0,
            Err(e) => -errno_of(&e),
        }
    })
}

/// Sends `len` bytes from `buf` as one datagram to `dst`. Blocks the uthread while no
/// transmit buffer is free. Returns `len`, or `-EINVAL`, `-EMSGSIZE` (larger than one frame:
/// 1472 bytes), `-ENETUNREACH` (outside the subnet with no gateway), `-ENOTRECOVERABLE`.
///
/// # Safety
/// `udp` is a live socket; `buf` points to `len` readable bytes (or `len` is 0); `dst` points
/// to a valid `corral_sockaddr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_send_to(
    udp: *mut UdpT,
    buf: *const c_void,
    len: usize,
    dst: *const CorralSockAddr,
) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: per the contract.
        let (Some(u), Ok(dst)) = (unsafe { obj(udp) }, unsafe { addr_in(dst) }) else {
            return -(libc::EINVAL as isize);
        };
        // SAFETY: per the contract.
        let Some(data) = (unsafe { bytes_in(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.send_to(data, dst))
    })
}

/// `corral_udp_send_to` the connected peer; `-EDESTADDRREQ` if not connected.
///
/// # Safety
/// As for `corral_udp_send_to`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_send(udp: *mut UdpT, buf: *const c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: per the contract.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_in(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.send(data))
    })
}

/// Receives one datagram into `buf` (the excess of a longer one is discarded) and, if `src`
/// is not NULL, stores its source there. Blocks the uthread until a datagram arrives or the
/// read timeout passes. Returns the bytes copied, or `-EAGAIN` (timed out), `-EINVAL`,
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `udp` is a live socket; `buf` points to `len` writable bytes (or `len` is 0); `src` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_recv_from(
    udp: *mut UdpT,
    buf: *mut c_void,
    len: usize,
    src: *mut CorralSockAddr,
) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: per the contract.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_out(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        match u.socket.recv_from(data) {
            Ok((n, from)) => {
                if !src.is_null() {
                    // SAFETY: non-null and writable per the contract.
                    unsafe { src.write(from.into()) };
                }
                n as isize
            }
            Err(e) => -(errno_of(&e) as isize),
        }
    })
}

/// `corral_udp_recv_from` the connected peer; `-ENOTCONN` if not connected.
///
/// # Safety
/// As for `corral_udp_recv_from`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_recv(udp: *mut UdpT, buf: *mut c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: per the contract.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_out(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.recv(data))
    })
}

/// Makes receives give up with `-EAGAIN` after `timeout_ns` nanoseconds; 0 waits forever.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `udp` is a live socket.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_set_read_timeout(udp: *mut UdpT, timeout_ns: u64) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { obj(udp) }) else {
            return -libc::EINVAL;
        };
        let t = (timeout_ns != 0).then(|| Duration::from_nanos(timeout_ns));
        match u.socket.set_read_timeout(t) {
            Ok(()) => 0,
            Err(e) => -errno_of(&e),
        }
    })
}

/// Stores the socket's bound address (with the port chosen for port 0) in `*out`.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `udp` is a live socket; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_local_addr(udp: *mut UdpT, out: *mut CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { obj(udp) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match u.socket.local_addr() {
            // SAFETY: non-null and writable per the contract.
            Ok(a) => unsafe {
                out.write(a.into());
                0
            },
            Err(e) => -errno_of(&e),
        }
    })
}

/// Closes the socket and frees it; its port is free again at once. No other call on it may
/// be in progress or follow. Does nothing for NULL.
///
/// # Safety
/// `udp` is NULL or a socket from `corral_udp_bind` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_close(udp: *mut UdpT) {
    ffi_guard((), || {
        if !udp.is_null() {
            // SAFETY: from corral_udp_bind (try_box), closed once per the contract.
            unsafe { free_boxed(udp) };
        }
    });
}

/// Borrows `len` bytes at `buf` for reading; NULL is allowed only with `len` 0.
///
/// # Safety
/// `buf` points to `len` readable bytes that stay valid and unmodified for `'a`.
unsafe fn bytes_in<'a>(buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// Borrows `len` bytes at `buf` for writing; NULL is allowed only with `len` 0.
///
/// # Safety
/// `buf` points to `len` writable bytes that nothing else touches for `'a`.
unsafe fn bytes_out<'a>(buf: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_errno() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EAGAIN)),
            libc::EAGAIN
        );
        let wrapped = io::Error::new(io::ErrorKind::OutOfMemory, "cannot map a stack");
        assert_eq!(errno_of(&wrapped), libc::ENOMEM);
        assert_eq!(errno_of(&io::Error::other("x")), libc::EIO);
    }

    #[test]
    fn default_config_round_trips() {
        let mut c = core::mem::MaybeUninit::<CorralConfig>::uninit();
        // SAFETY: writable memory for one config.
        unsafe { corral_config_default(c.as_mut_ptr()) };
        // SAFETY: initialized by the call.
        let c = unsafe { c.assume_init() };
        assert!(c.kthreads >= 1);
        assert_eq!(c.stack_size, corral::DEFAULT_STACK_SIZE);
        assert_eq!(c.pin, 0);
        assert!(c.to_config().validate().is_ok());
        let bad = CorralConfig { kthreads: 0, ..c };
        let err = bad.to_config().validate().unwrap_err();
        assert_eq!(err.key, "kthreads");
    }

    #[test]
    fn mutex_checks_ownership_off_runtime() {
        let m = corral_mutex_new();
        assert!(!m.is_null());
        // SAFETY: m is live until freed at the end; the other thread finishes before that.
        unsafe {
            assert_eq!(corral_mutex_unlock(m), -libc::EPERM);
            assert_eq!(corral_mutex_lock(m), 0);
            assert_eq!(corral_mutex_lock(m), -libc::EDEADLK);
            assert_eq!(corral_mutex_trylock(m), -libc::EBUSY);
            assert_eq!(corral_mutex_free(m), -libc::EBUSY);
            let shared = SendPtr(m.cast());
            let other = std::thread::spawn(move || corral_mutex_unlock(shared.get().cast()));
            assert_eq!(other.join().unwrap(), -libc::EPERM);
            assert_eq!(corral_mutex_unlock(m), 0);
            assert_eq!(corral_mutex_free(m), 0);
        }
    }

    #[test]
    fn waitgroup_lives_until_the_last_reference() {
        let wg = corral_waitgroup_new();
        // SAFETY: wg is live until its last reference goes, which the test tracks.
        unsafe {
            assert_eq!(corral_waitgroup_done(wg), -libc::EINVAL);
            assert_eq!(corral_waitgroup_add(wg, 1), 0);
            assert_eq!(corral_waitgroup_done(wg), 0);
            assert_eq!(corral_waitgroup_wait(wg), 0);
            // Stand in for a `done` that is still returning when the owner frees the group.
            (*wg).refs.fetch_add(1, Ordering::Relaxed);
            corral_waitgroup_free(wg);
            assert_eq!((*wg).refs.load(Ordering::Relaxed), 1);
            CorralWaitGroup::release(wg);
        }
    }

    #[test]
    fn spawn_needs_a_runtime() {
        unsafe extern "C" fn noop(_: *mut c_void) {}
        // SAFETY: noop ignores its argument.
        assert_eq!(
            unsafe { corral_spawn_detached(Some(noop), ptr::null_mut()) },
            -libc::EPERM
        );
        assert_eq!(corral_thread_id(), 0);
        assert_eq!(corral_kthread_index(), -1);
    }

    #[test]
    fn udp_needs_a_network() {
        let mut out = ptr::null_mut();
        let any = CorralSockAddr::default();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { corral_udp_bind(&any, &mut out) }, -libc::ENETDOWN);
        // SAFETY: NULL is rejected, not dereferenced.
        assert_eq!(
            unsafe { corral_udp_bind(ptr::null(), &mut out) },
            -libc::EINVAL
        );
        // SAFETY: NULL socket.
        assert_eq!(
            unsafe { corral_udp_send(ptr::null_mut(), ptr::null(), 0) },
            -(libc::EINVAL as isize)
        );
        // SAFETY: NULL is allowed.
        unsafe { corral_udp_close(ptr::null_mut()) };
    }

    #[test]
    fn udp_round_trip_through_the_c_calls() {
        let ip = Ipv4Addr::new(10, 77, 0, 2);
        let cfg = Config::default().kthreads(1).net(NetConfig::new(ip, 24));
        let rt = Runtime::new(cfg).unwrap();
        rt.block_on(move || {
            let ip = u32::from(ip);
            let mut server = ptr::null_mut();
            let mut client = ptr::null_mut();
            let server_addr = CorralSockAddr { ip, port: 5353 };
            let mut client_addr = CorralSockAddr::default();
            let mut buf = [0u8; 32];
            let mut from = CorralSockAddr::default();
            // SAFETY: every pointer is valid for the call; sockets are closed once at the end.
            unsafe {
                assert_eq!(corral_udp_bind(&server_addr, &mut server), 0);
                assert_eq!(
                    corral_udp_bind(&server_addr, &mut client),
                    -libc::EADDRINUSE
                );
                let any = CorralSockAddr { ip: 0, port: 0 };
                assert_eq!(corral_udp_bind(&any, &mut client), 0);
                assert_eq!(corral_udp_local_addr(client, &mut client_addr), 0);
                assert!(client_addr.port >= 49152);
                assert_eq!(
                    corral_udp_send(client, b"x".as_ptr().cast(), 1),
                    -(libc::EDESTADDRREQ as isize)
                );
                assert_eq!(corral_udp_connect(client, &server_addr), 0);
                assert_eq!(corral_udp_send(client, b"ping".as_ptr().cast(), 4), 4);
                let n = corral_udp_recv_from(server, buf.as_mut_ptr().cast(), buf.len(), &mut from);
                assert_eq!(n, 4);
                assert_eq!(&buf[..4], b"ping");
                assert_eq!(
                    from,
                    CorralSockAddr {
                        ip,
                        port: client_addr.port
                    }
                );
                assert_eq!(
                    corral_udp_send_to(server, b"pong".as_ptr().cast(), 4, &from),
                    4
                );
                assert_eq!(
                    corral_udp_recv(client, buf.as_mut_ptr().cast(), buf.len()),
                    4
                );
                assert_eq!(&buf[..4], b"pong");
                let big = vec![0u8; 1473];
                assert_eq!(
                    corral_udp_send(client, big.as_ptr().cast(), big.len()),
                    -(libc::EMSGSIZE as isize)
                );
                assert_eq!(corral_udp_set_read_timeout(server, 1_000_000), 0);
                assert_eq!(
                    corral_udp_recv(server, buf.as_mut_ptr().cast(), buf.len()),
                    -(libc::ENOTCONN as isize)
                );
                assert_eq!(
                    corral_udp_recv_from(
                        server,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        ptr::null_mut()
                    ),
                    -(libc::EAGAIN as isize)
                );
                corral_udp_close(client);
                corral_udp_close(server);
            }
        });
        assert_eq!(rt.net_stats().unwrap().udp_rx_datagrams, 2);
    }
}
