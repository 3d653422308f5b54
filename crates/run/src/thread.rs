//! Threads: `pthread_create` makes a uthread with its own TLS (see [`crate::tls`]), and join,
//! detach, exit and thread-key destructors follow POSIX. `pthread_self` and `pthread_equal`
//! stay glibc's: they read the TCB, which is the uthread's own. Callers that are not uthreads
//! (constructors before `main`, the runtime itself) get the C library's threads.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use corral::SpinLock;

use crate::real::real;
use crate::{futex, refuse, signals, tls};

unsafe extern "C" {
    /// glibc's, which knows its attribute layout (the libc crate does not declare it).
    fn pthread_attr_getdetachstate(attr: *const libc::pthread_attr_t, state: *mut i32) -> i32;
}

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

/// glibc's default thread stack (its `RLIMIT_STACK` default).
pub const DEFAULT_STACK_SIZE: usize = 8 << 20;

const DONE: u32 = 1;
const DETACHED: u32 = 2;

/// A thread made by `pthread_create`: its `pthread_t` is its TCB.
struct Record {
    tcb: usize,
    /// `DONE` and `DETACHED`; joiners sleep on it.
    flags: AtomicU32,
    retval: AtomicUsize,
    /// Its stack, lowest address and one past the highest, once it has started (0 before).
    stack: StackRange,
}

/// A uthread's stack as `pthread_getattr_np` reports it; written once, by the thread itself.
struct StackRange {
    low: AtomicUsize,
    high: AtomicUsize,
}

impl StackRange {
    const fn unknown() -> StackRange {
        StackRange {
            low: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
        }
    }

    /// Records the calling uthread's stack.
    fn note_current(&self) {
        if let Some(range) = corral::current_stack() {
            self.low.store(range.start, Ordering::Relaxed);
            self.high.store(range.end, Ordering::Release);
        }
    }

    fn get(&self) -> Option<core::ops::Range<usize>> {
        let high = self.high.load(Ordering::Acquire);
        (high != 0).then(|| self.low.load(Ordering::Relaxed)..high)
    }
}

/// The stack of `main`'s uthread, which runs on the main thread's TCB.
static MAIN_STACK: StackRange = StackRange::unknown();

/// Called by `main`'s uthread before it runs the program's `main`.
pub fn note_main_stack() {
    MAIN_STACK.note_current();
}

static THREADS: LazyLock<SpinLock<HashMap<usize, Arc<Record>>>> =
    LazyLock::new(|| SpinLock::new(HashMap::new()));
/// Threads created and not yet finished; the main thread's `pthread_exit` waits for 0.
static LIVE: AtomicU32 = AtomicU32::new(0);

/// `pthread_key_create`'s destructors by key (glibc's `PTHREAD_KEYS_MAX` keys).
static KEY_DESTRUCTORS: [AtomicUsize; 1024] = [const { AtomicUsize::new(0) }; 1024];
static KEYS_USED: AtomicUsize = AtomicUsize::new(0);
const DESTRUCTOR_ITERATIONS: usize = 4;

/// Whether the caller is a uthread (of the shim's runtime: the only one in the process).
pub fn on_uthread() -> bool {
    corral::current_id().is_some()
}

/// Threads created by the program that have not finished.
pub fn live_threads() -> u32 {
    LIVE.load(Ordering::SeqCst)
}

/// Whether `t` is a thread the shim made (running, or finished and not yet joined).
pub fn is_shim_thread(t: libc::pthread_t) -> bool {
    record(t).is_some()
}

fn record(t: libc::pthread_t) -> Option<Arc<Record>> {
    THREADS.lock().get(&(t as usize)).cloned()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> i32 {
    if !on_uthread() {
        let f = real!(pthread_create: unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartRoutine, *mut c_void) -> i32);
        // SAFETY: forwarded with the caller's arguments.
        return unsafe { f(thread, attr, start, arg) };
    }
    refuse::check_thread_start(start as usize);
    let mut stack_size = DEFAULT_STACK_SIZE;
    let mut detach_state = libc::PTHREAD_CREATE_JOINABLE;
    if !attr.is_null() {
        // SAFETY: attr is an initialized attribute object; glibc's accessors read it.
        unsafe {
            libc::pthread_attr_getstacksize(attr, &mut stack_size);
            pthread_attr_getdetachstate(attr, &mut detach_state);
        }
    }
    let Some(tcb) = tls::allocate() else {
        return libc::EAGAIN;
    };
    let rec = Arc::new(Record {
        tcb,
        flags: AtomicU32::new(if detach_state == libc::PTHREAD_CREATE_DETACHED {
            DETACHED
        } else {
            0
        }),
        retval: AtomicUsize::new(0),
        stack: StackRange::unknown(),
    });
    THREADS.lock().insert(tcb, rec.clone());
    LIVE.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller's out-pointer; set before the thread can run, as glibc does.
    unsafe { *thread = tcb as libc::pthread_t };
    let arg = arg as usize;
    let signal_record = signals::new_thread(tcb);
    let builder = corral::Builder::new().stack_size(stack_size.max(libc::PTHREAD_STACK_MIN));
    let spawned = builder.spawn_detached(move || {
        // SAFETY: tcb is the fresh TCB allocated for this thread alone.
        unsafe { corral::set_uthread_fs_base(tcb) }.expect("corral-run: a thread without its TLS");
        tls::enter();
        run(start, arg, rec, signal_record);
    });
    if spawned.is_err() {
        signals::forget(tcb);
        THREADS.lock().remove(&tcb);
        LIVE.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: nothing runs on it.
        unsafe { tls::free(tcb) };
        return libc::EAGAIN;
    }
    0
}

/// The thread's body, on its own TLS. Kept out of line: thread-local addresses computed before
/// the TLS switch must not be reused after it.
#[inline(never)]
fn run(
    start: StartRoutine,
    arg: usize,
    rec: Arc<Record>,
    signal_record: Option<Arc<signals::Record>>,
) {
    rec.stack.note_current();
    if let Some(signal_record) = &signal_record {
        signals::enter_uthread(signal_record);
    }
    let ret = start(arg as *mut c_void);
    finish(&rec, ret as usize);
}

/// What a thread does when it ends (returning from its start routine or in `pthread_exit`):
/// destructors on its own TLS, then back to the kthread's TLS and tell joiners.
fn finish(rec: &Arc<Record>, ret: usize) {
    tls::run_thread_local_destructors();
    run_key_destructors();
    signals::leave();
    // SAFETY: 0 returns this uthread to its kthread's own TLS; nothing of ours is kept in ours.
    unsafe { corral::set_uthread_fs_base(0) }.expect("corral-run: a thread off its uthread");
    rec.retval.store(ret, Ordering::Relaxed);
    let before = rec.flags.fetch_or(DONE, Ordering::SeqCst);
    futex::wake(&rec.flags, usize::MAX);
    if before & DETACHED != 0 {
        release(rec);
    }
    if LIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
        futex::wake(&LIVE, usize::MAX);
    }
}

/// Forgets a finished thread nobody will join, with its TLS.
fn release(rec: &Record) {
    THREADS.lock().remove(&rec.tcb);
    // SAFETY: the thread finished (DONE) and left its TLS before saying so.
    unsafe { tls::free(rec.tcb) };
}

/// Runs thread-key destructors as glibc does at thread exit: each key with a destructor and a
/// non-null value is cleared, then its destructor runs; up to `DESTRUCTOR_ITERATIONS` rounds
/// while destructors keep setting values.
fn run_key_destructors() {
    for _ in 0..DESTRUCTOR_ITERATIONS {
        let mut ran = false;
        let used = KEYS_USED.load(Ordering::Acquire);
        for (key, d) in KEY_DESTRUCTORS.iter().enumerate().take(used) {
            let d = d.load(Ordering::Acquire);
            if d == 0 {
                continue;
            }
            let key = key as libc::pthread_key_t;
            // SAFETY: glibc's thread-specific data of this thread (its own TCB).
            let value = unsafe { libc::pthread_getspecific(key) };
            if value.is_null() {
                continue;
            }
            // SAFETY: as above; then the program's destructor for this key, with its value.
            unsafe {
                libc::pthread_setspecific(key, core::ptr::null());
                core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(d)(value);
            }
            ran = true;
        }
        if !ran {
            break;
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_key_create(
    key: *mut libc::pthread_key_t,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
) -> i32 {
    let f = real!(pthread_key_create: unsafe extern "C" fn(*mut libc::pthread_key_t, Option<unsafe extern "C" fn(*mut c_void)>) -> i32);
    // SAFETY: glibc allocates the key (and runs the destructor for its own threads).
    let rc = unsafe { f(key, destructor) };
    if rc == 0 {
        // SAFETY: glibc just wrote the key.
        let k = unsafe { *key } as usize;
        if let Some(slot) = KEY_DESTRUCTORS.get(k) {
            slot.store(destructor.map_or(0, |d| d as usize), Ordering::Release);
            KEYS_USED.fetch_max(k + 1, Ordering::AcqRel);
        }
    }
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_key_delete(key: libc::pthread_key_t) -> i32 {
    if let Some(slot) = KEY_DESTRUCTORS.get(key as usize) {
        slot.store(0, Ordering::Release);
    }
    let f = real!(pthread_key_delete: unsafe extern "C" fn(libc::pthread_key_t) -> i32);
    // SAFETY: forwarded.
    unsafe { f(key) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_join(t: libc::pthread_t, retval: *mut *mut c_void) -> i32 {
    let Some(rec) = record(t) else {
        let f = real!(pthread_join: unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> i32);
        // SAFETY: not one of ours: the C library's thread.
        return unsafe { f(t, retval) };
    };
    if rec.tcb == tls::current_tcb() {
        return libc::EDEADLK;
    }
    loop {
        let flags = rec.flags.load(Ordering::SeqCst);
        if flags & DETACHED != 0 {
            return libc::EINVAL;
        }
        if flags & DONE != 0 {
            break;
        }
        let _ = futex::wait(&rec.flags, flags, None);
    }
    if !retval.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *retval = rec.retval.load(Ordering::Relaxed) as *mut c_void };
    }
    release(&rec);
    0
}

/// For a uthread, its own stack (glibc would report the main thread's for `main`'s uthread,
/// whose TCB it shares, and fail for the TCBs it did not make), a guard page and its detach
/// state; a created thread that has not started yet reports its stack size only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_getattr_np(
    t: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> i32 {
    let me = t as usize == tls::current_tcb() && on_uthread();
    let rec = record(t);
    let main = t as usize == crate::start::main_tcb() && MAIN_STACK.get().is_some();
    if !me && rec.is_none() && !main {
        let f = real!(pthread_getattr_np: unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> i32);
        // SAFETY: not one of ours: the C library's thread.
        return unsafe { f(t, attr) };
    }
    let stack = if me {
        corral::current_stack()
    } else if let Some(rec) = &rec {
        rec.stack.get()
    } else {
        MAIN_STACK.get()
    };
    let detached = rec
        .as_ref()
        .is_some_and(|r| r.flags.load(Ordering::SeqCst) & DETACHED != 0);
    // SAFETY: the caller's attribute object, initialized here as glibc's does; glibc's
    // setters validate what they store.
    unsafe {
        let rc = libc::pthread_attr_init(attr);
        if rc != 0 {
            return rc;
        }
        let rc = match stack {
            Some(range) => {
                libc::pthread_attr_setstack(attr, range.start as *mut c_void, range.len())
            }
            None => libc::pthread_attr_setstacksize(attr, DEFAULT_STACK_SIZE),
        };
        if rc != 0 {
            libc::pthread_attr_destroy(attr);
            return rc;
        }
        libc::pthread_attr_setguardsize(attr, libc::sysconf(libc::_SC_PAGESIZE) as usize);
        if detached {
            libc::pthread_attr_setdetachstate(attr, libc::PTHREAD_CREATE_DETACHED);
        }
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_detach(t: libc::pthread_t) -> i32 {
    let Some(rec) = record(t) else {
        let f = real!(pthread_detach: unsafe extern "C" fn(libc::pthread_t) -> i32);
        // SAFETY: not one of ours: the C library's thread.
        return unsafe { f(t) };
    };
    let before = rec.flags.fetch_or(DETACHED, Ordering::SeqCst);
    if before & DETACHED != 0 {
        return libc::EINVAL;
    }
    if before & DONE != 0 {
        release(&rec);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    if on_uthread() {
        if let Some(rec) = record(tls::current_tcb() as libc::pthread_t) {
            finish(&rec, retval as usize);
            // SAFETY: the thread is over; its stack's contents are abandoned, as glibc's
            // pthread_exit abandons C frames (no C++ unwinding: see the notes on limits).
            let e = unsafe { corral::exit_uthread() };
            refuse::fatal(&format!("pthread_exit: {e}"));
        }
        if crate::start::is_main_thread() {
            // The process lives on until its last thread ends, then exits with status 0.
            tls::run_thread_local_destructors();
            run_key_destructors();
            loop {
                let live = LIVE.load(Ordering::SeqCst);
                if live == 0 {
                    break;
                }
                let _ = futex::wait(&LIVE, live, None);
            }
            // SAFETY: exit is what glibc does after the last thread of a process ends.
            unsafe { libc::exit(0) };
        }
    }
    let f = real!(pthread_exit: unsafe extern "C" fn(*mut c_void) -> !);
    // SAFETY: not a thread of ours.
    unsafe { f(retval) }
}
