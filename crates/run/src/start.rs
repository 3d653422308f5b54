//! Starting the program inside a Corral runtime. The shim interposes `__libc_start_main`, so
//! glibc initializes the process and runs constructors as usual, then calls the shim instead of
//! `main`. The shim starts the runtime and runs `main` as a uthread on the main thread's own
//! TLS and thread control block; the main OS thread then sleeps for good, with every signal
//! blocked and without touching its TLS again, so only the `main` uthread uses that TLS. When
//! `main` returns, the uthread calls `exit` with its status (atexit handlers and static
//! destructors run there, where pthread calls work), so the exit status is the program's.

use core::arch::asm;
use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::real::real;
use crate::settings::{self, Settings};
use crate::{disposition, refuse, signals, thread, tls};

type Main = unsafe extern "C" fn(i32, *mut *mut c_char, *mut *mut c_char) -> i32;
type StartMain =
    unsafe extern "C" fn(Main, i32, *mut *mut c_char, usize, usize, usize, *mut c_void) -> i32;

static PROGRAM_MAIN: AtomicUsize = AtomicUsize::new(0);
static MAIN_TCB: AtomicUsize = AtomicUsize::new(0);
/// Set once the main OS thread is done with its TLS; the `main` uthread waits for it.
static MAIN_THREAD_PARKED: AtomicU32 = AtomicU32::new(0);
/// The word the main OS thread sleeps on; nobody ever changes it.
static NEVER: AtomicU32 = AtomicU32::new(0);

/// Exit status for bad settings (as the launcher's usage errors).
const USAGE_STATUS: i32 = 2;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_start_main(
    main: Main,
    argc: i32,
    argv: *mut *mut c_char,
    init: usize,
    fini: usize,
    rtld_fini: usize,
    stack_end: *mut c_void,
) -> i32 {
    PROGRAM_MAIN.store(main as usize, Ordering::Relaxed);
    let real = real!(__libc_start_main: StartMain);
    // SAFETY: glibc's own start routine, with main replaced by one of the same signature.
    unsafe {
        real(
            main_in_runtime,
            argc,
            argv,
            init,
            fini,
            rtld_fini,
            stack_end,
        )
    }
}

/// The main thread's TCB, which `main`'s uthread runs on (0 before the runtime starts).
pub fn main_tcb() -> usize {
    MAIN_TCB.load(Ordering::Relaxed)
}

/// Whether the caller is the `main` uthread (on the main thread's TCB).
pub fn is_main_thread() -> bool {
    tls::current_tcb() == MAIN_TCB.load(Ordering::Relaxed)
}

fn program_name(argv: *mut *mut c_char) -> String {
    // SAFETY: argv[0] is the program's NUL-terminated name (or null).
    let arg0 = unsafe { argv.as_ref().copied().filter(|p| !p.is_null()) };
    arg0.map(|p| {
        // SAFETY: as above.
        let s = unsafe { core::ffi::CStr::from_ptr(p) }.to_string_lossy();
        s.rsplit('/').next().unwrap_or("corral-run").to_owned()
    })
    .filter(|s| !s.is_empty())
    .unwrap_or_else(|| "corral-run".into())
}

/// Removes the launcher's variables, so that what the program starts is not a Corral runtime
/// (an exec of its own puts them back: see `exec`).
fn restore_environment() {
    if std::env::var_os(settings::LAUNCHED_ENV).is_none() {
        return;
    }
    let previous = std::env::var_os(settings::PREVIOUS_PRELOAD_ENV);
    // SAFETY: before main: the program has started no threads of its own that read the
    // environment (constructors that did would race with any setenv too).
    unsafe {
        match previous {
            Some(p) => std::env::set_var("LD_PRELOAD", p),
            None => std::env::remove_var("LD_PRELOAD"),
        }
        for key in settings::LAUNCHER_VARS {
            std::env::remove_var(key);
        }
    }
}

unsafe extern "C" fn main_in_runtime(
    argc: i32,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> i32 {
    let settings = Settings::read(|k| std::env::var(k).ok()).unwrap_or_else(|e| {
        eprintln!("corral-run: {e}");
        std::process::exit(USAGE_STATUS)
    });
    crate::exec::remember_launch(settings.children_too);
    if !settings.children_too {
        restore_environment();
    }
    crate::syscall::resolve();
    let config = settings.config(&program_name(argv));
    let program_disposition = disposition::kernel_disposition(corral::PREEMPT_SIGNAL);
    // Before the kthreads exist: they inherit the mask that leaves signals to the dispatcher.
    signals::prepare(config.preemption);
    let rt: &'static corral::Runtime = match corral::Runtime::new(config) {
        Ok(rt) => Box::leak(Box::new(rt)),
        Err(e) => refuse::fatal(&format!("cannot start a Corral runtime: {e}")),
    };
    disposition::take_over_preempt_signal(program_disposition);
    if let Err(e) = signals::start(rt) {
        refuse::fatal(&format!("cannot start routing signals: {e}"));
    }
    MAIN_TCB.store(tls::current_tcb(), Ordering::Relaxed);
    let (argv, envp) = (argv as usize, envp as usize);
    let spawned = rt.spawn_with(corral::Builder::new().name("main"), move || {
        run_main(argc, argv, envp)
    });
    if let Err(e) = spawned {
        refuse::fatal(&format!("cannot start main as a uthread: {e}"));
    }
    // Signals go to the dispatcher and the kthreads; this thread only sleeps.
    // SAFETY: a full set, and the C library's pthread_sigmask (we are not a uthread).
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, core::ptr::null_mut());
    }
    MAIN_THREAD_PARKED.store(1, Ordering::Release);
    sleep_forever()
}

/// Sleeps without touching TLS (not even `errno`, which the `main` uthread now owns).
fn sleep_forever() -> ! {
    loop {
        // SAFETY: FUTEX_WAIT_PRIVATE on a word that stays 0, with no timeout: a raw system
        // call, so no C library wrapper writes errno.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") libc::SYS_futex => _,
                in("rdi") NEVER.as_ptr(),
                in("rsi") libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                in("rdx") 0,
                in("r10") 0,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
    }
}

fn run_main(argc: i32, argv: usize, envp: usize) {
    while MAIN_THREAD_PARKED.load(Ordering::Acquire) == 0 {
        corral::yield_now();
    }
    thread::note_main_stack();
    // SAFETY: the main OS thread no longer uses its TCB (it sleeps without touching TLS).
    unsafe { corral::set_uthread_fs_base(MAIN_TCB.load(Ordering::Relaxed)) }
        .unwrap_or_else(|e| refuse::fatal(&format!("cannot give main its TLS: {e}")));
    enter_main(argc, argv, envp)
}

/// Kept out of line: thread-local addresses from before the TLS switch must not be reused.
#[inline(never)]
fn enter_main(argc: i32, argv: usize, envp: usize) -> ! {
    signals::enter_main(MAIN_TCB.load(Ordering::Relaxed));
    // SAFETY: the program's main, saved by __libc_start_main.
    let main: Main = unsafe { core::mem::transmute(PROGRAM_MAIN.load(Ordering::Relaxed)) };
    // SAFETY: main with the arguments glibc gave it.
    let status = unsafe { main(argc, argv as *mut *mut c_char, envp as *mut *mut c_char) };
    // SAFETY: what glibc does when main returns.
    unsafe { libc::exit(status) }
}
