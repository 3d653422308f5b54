//! Keeping Corral across `exec`. Before `main` the shim removes the launcher's variables from
//! the environment (see `start`), so that the programs a program starts run as plain Linux
//! programs. But an `exec` by the Corral process itself starts no other program: it replaces
//! this one, as a shell-script wrapper's `exec`, `env` or a launcher that re-executes itself
//! do. So the `exec` family puts the launcher's variables back into the environment it passes
//! on, and the new image starts inside a Corral runtime as this one did.
//!
//! A child (a process `fork`ed from this one that then `exec`s; `posix_spawn`, `system`,
//! `popen`) runs plain by default. With `--children corral` the variables stay in the
//! environment and are added to any environment passed explicitly, so every descendant runs
//! under Corral, each as a runtime of its own.
//!
//! glibc's exec functions call its internal `__execve`, so each public one is interposed;
//! `execl`, `execlp` and `execle` take variable arguments, which naked entry points gather.
//! Before the exec the calling kthread is given back what a thread of the program would pass
//! on to the new image: the scheduling policy and CPU affinity the process started with (not
//! those iokerneld or the runtime gave the kthread), the calling uthread's signal mask, and
//! the program's `SIG_IGN` for the preemption signal.

use core::ffi::{CStr, c_char, c_int};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use crate::real::real;
use crate::settings;

type Execve =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type Fexecve = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
type PosixSpawn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// The process that runs as a Corral runtime (0 until its runtime starts): a forked child has
/// another pid.
static CORRAL_PID: AtomicI32 = AtomicI32::new(0);
/// `--children corral`.
static CHILDREN_TOO: AtomicBool = AtomicBool::new(false);
static LAUNCH: OnceLock<Launch> = OnceLock::new();

/// What a new image needs to start as this one did.
struct Launch {
    /// The launcher's variables, as `KEY=VALUE`, but for the preload ones.
    vars: Vec<CString>,
    /// The shim's own path: the first entry of `LD_PRELOAD`, where `corral-run` puts it.
    shim: String,
    /// The process's scheduling as it started, before any kthread was moved.
    affinity: libc::cpu_set_t,
    policy: c_int,
    param: libc::sched_param,
}

/// The variables a new image needs from the launcher (`LD_PRELOAD` aside).
fn carried_vars() -> impl Iterator<Item = &'static str> {
    settings::LAUNCHER_VARS
        .iter()
        .copied()
        .chain([settings::IOKERNELD_ENV])
}

/// Called on the main thread before the runtime starts and before the launcher's variables
/// are removed from the environment.
pub fn remember_launch(children_too: bool) {
    let Some(shim) = std::env::var("LD_PRELOAD").ok().and_then(|p| {
        p.split([' ', ':'])
            .find(|s| !s.is_empty())
            .map(str::to_owned)
    }) else {
        // Loaded some other way: nothing to put back.
        return;
    };
    let mut vars = Vec::new();
    for key in carried_vars().filter(|k| *k != settings::PREVIOUS_PRELOAD_ENV) {
        if let Some(value) = std::env::var_os(key) {
            let mut entry = format!("{key}=").into_bytes();
            entry.extend_from_slice(value.as_bytes());
            vars.extend(CString::new(entry));
        }
    }
    // SAFETY: plain data, filled in by the kernel; zeroes are valid for both.
    let (mut affinity, mut param) = unsafe {
        (
            core::mem::zeroed::<libc::cpu_set_t>(),
            core::mem::zeroed::<libc::sched_param>(),
        )
    };
    // SAFETY: this thread's scheduling, read into locals of the right size.
    let policy = unsafe {
        libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut affinity);
        libc::sched_getparam(0, &mut param);
        libc::sched_getscheduler(0)
    };
    let launch = Launch {
        vars,
        shim,
        affinity,
        policy,
        param,
    };
    if LAUNCH.set(launch).is_ok() {
        CHILDREN_TOO.store(children_too, Ordering::Relaxed);
        // SAFETY: getpid has no preconditions.
        CORRAL_PID.store(unsafe { libc::getpid() }, Ordering::Release);
    }
}

/// The launch to carry into an exec by the calling process, if it is to run under Corral.
fn launch_for_exec() -> Option<&'static Launch> {
    let launch = LAUNCH.get()?;
    // SAFETY: getpid has no preconditions (and is a system call: right in a forked child).
    let same_process = unsafe { libc::getpid() } == CORRAL_PID.load(Ordering::Acquire);
    (same_process || CHILDREN_TOO.load(Ordering::Relaxed)).then_some(launch)
}

/// An environment for a new image: `envp` without the launcher's variables, then those of
/// this launch, with the shim first in `LD_PRELOAD` before whatever `envp` preloads.
struct Environment {
    _owned: Vec<CString>,
    pointers: Vec<*const c_char>,
}

impl Environment {
    /// # Safety
    /// `envp` is null or a null-terminated array of NUL-terminated strings.
    unsafe fn new(launch: &Launch, envp: *const *const c_char) -> Environment {
        let ours = |key: &[u8]| carried_vars().any(|k| k.as_bytes() == key);
        let mut pointers = Vec::new();
        let mut their_preload: Option<Vec<u8>> = None;
        let mut at = envp;
        while !at.is_null() {
            // SAFETY: within the caller's null-terminated array.
            let entry = unsafe { *at };
            if entry.is_null() {
                break;
            }
            // SAFETY: each entry is a NUL-terminated string.
            let bytes = unsafe { CStr::from_ptr(entry) }.to_bytes();
            let (key, value) = match bytes.iter().position(|&b| b == b'=') {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &b""[..]),
            };
            if key == b"LD_PRELOAD" {
                their_preload = Some(without_shim(value, launch.shim.as_bytes()).to_vec());
            } else if !ours(key) {
                pointers.push(entry);
            }
            // SAFETY: the array goes on to its null terminator.
            at = unsafe { at.add(1) };
        }
        let mut owned = launch.vars.clone();
        let their_preload = their_preload.filter(|p| !p.is_empty());
        let mut preload = format!("LD_PRELOAD={}", launch.shim).into_bytes();
        if let Some(theirs) = &their_preload {
            preload.push(b' ');
            preload.extend_from_slice(theirs);
            let mut previous = format!("{}=", settings::PREVIOUS_PRELOAD_ENV).into_bytes();
            previous.extend_from_slice(theirs);
            owned.extend(CString::new(previous));
        }
        owned.extend(CString::new(preload));
        pointers.extend(owned.iter().map(|s| s.as_ptr()));
        pointers.push(core::ptr::null());
        Environment {
            _owned: owned,
            pointers,
        }
    }

    fn as_ptr(&self) -> *const *const c_char {
        self.pointers.as_ptr()
    }
}

/// `LD_PRELOAD`'s value with the shim taken off its front, where an environment that was
/// already a Corral one has it.
fn without_shim<'a>(value: &'a [u8], shim: &[u8]) -> &'a [u8] {
    match value.trim_ascii_start().strip_prefix(shim) {
        Some(rest) if rest.first().is_none_or(|b| matches!(b, b' ' | b':')) => {
            let rest = rest.trim_ascii_start();
            rest.strip_prefix(b":").unwrap_or(rest)
        }
        _ => value,
    }
    .trim_ascii()
}

type Sigmask = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// The C library's `pthread_sigmask`, which sets the kernel's mask (the shim's sets a uthread's).
fn kernel_sigmask() -> Sigmask {
    real!(pthread_sigmask: Sigmask)
}

/// The calling kthread's state that an exec hands to the new image, changed to what the
/// program's thread would hand on, and put back if the exec fails.
struct ForExec {
    affinity: libc::cpu_set_t,
    policy: c_int,
    param: libc::sched_param,
    mask: libc::sigset_t,
    preempt_disposition: Option<libc::sigaction>,
}

impl ForExec {
    fn prepare(launch: &Launch) -> Option<ForExec> {
        if !crate::thread::on_uthread() {
            return None;
        }
        // SAFETY: plain data, filled in below; zeroes are valid for each.
        let mut saved = unsafe {
            ForExec {
                affinity: core::mem::zeroed(),
                policy: 0,
                param: core::mem::zeroed(),
                mask: core::mem::zeroed(),
                preempt_disposition: None,
            }
        };
        let mask = crate::sigmask::current_uthread_mask();
        // SAFETY: this thread's own scheduling and signal mask, with locals of the right
        // types; a failure leaves the thread as it was, which an exec can live with.
        unsafe {
            libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut saved.affinity);
            libc::sched_getparam(0, &mut saved.param);
            saved.policy = libc::sched_getscheduler(0);
            libc::sched_setscheduler(0, launch.policy, &launch.param);
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &launch.affinity);
            kernel_sigmask()(libc::SIG_SETMASK, &mask, &mut saved.mask);
        }
        // Handled signals go back to their defaults across an exec; an ignored one stays
        // ignored. The kernel has the runtime's handler for the preemption signal, so the
        // program's SIG_IGN is the kernel's only for the moment of the exec (a kick sent in
        // that moment to another kthread is lost; the process is about to end anyway).
        if crate::disposition::program_ignores_preempt_signal() {
            saved.preempt_disposition =
                crate::disposition::set_kernel_disposition(corral::PREEMPT_SIGNAL, libc::SIG_IGN);
        }
        Some(saved)
    }

    fn undo(self) {
        if let Some(before) = self.preempt_disposition {
            crate::disposition::restore_kernel_disposition(corral::PREEMPT_SIGNAL, &before);
        }
        // SAFETY: as in `prepare`, with the values saved there.
        unsafe {
            kernel_sigmask()(libc::SIG_SETMASK, &self.mask, core::ptr::null_mut());
            libc::sched_setscheduler(0, self.policy, &self.param);
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.affinity);
        }
    }
}

/// Runs `exec` with `envp`, or with a Corral environment made from it when the new image is
/// to run under Corral. Returns only if the exec failed, with errno as the exec left it.
///
/// # Safety
/// `envp` is as for `execve`; `exec` is an exec function given its other arguments.
unsafe fn exec_with(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let Some(launch) = launch_for_exec() else {
        return exec(envp);
    };
    // SAFETY: the caller's environment array.
    let env = unsafe { Environment::new(launch, envp) };
    let saved = ForExec::prepare(launch);
    let rc = exec(env.as_ptr());
    // SAFETY: this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    if let Some(saved) = saved {
        saved.undo();
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    rc
}

fn current_environ() -> *const *const c_char {
    // SAFETY: a copy of the pointer glibc keeps; the program's own exec call reads it too.
    unsafe { environ }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execve: Execve);
    // SAFETY: the caller's arguments, forwarded.
    unsafe { exec_with(envp, |env| f(path, argv, env)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: forwarded, with the process's environment as execv passes it.
    unsafe { execve(path, argv, current_environ()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execvpe: Execve);
    // SAFETY: the caller's arguments, forwarded; glibc's execvpe searches PATH.
    unsafe { exec_with(envp, |env| f(file, argv, env)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: forwarded, with the process's environment as execvp passes it.
    unsafe { execvpe(file, argv, current_environ()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(fexecve: Fexecve);
    // SAFETY: the caller's arguments, forwarded.
    unsafe { exec_with(envp, |env| f(fd, argv, env)) }
}

/// A spawned process is a child: only `--children corral` changes its environment.
///
/// # Safety
/// As `posix_spawn`.
unsafe fn spawn_with(
    envp: *const *const c_char,
    spawn: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    match LAUNCH.get() {
        Some(launch) if CHILDREN_TOO.load(Ordering::Relaxed) => {
            // SAFETY: the caller's environment array.
            let env = unsafe { Environment::new(launch, envp) };
            spawn(env.as_ptr())
        }
        _ => spawn(envp),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(posix_spawn: PosixSpawn);
    let _mask = crate::spawn::ProgramMask::apply();
    // SAFETY: the caller's arguments, forwarded.
    unsafe { spawn_with(envp, |env| f(pid, path, actions, attr, argv, env)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(posix_spawnp: PosixSpawn);
    let _mask = crate::spawn::ProgramMask::apply();
    // SAFETY: the caller's arguments, forwarded.
    unsafe { spawn_with(envp, |env| f(pid, file, actions, attr, argv, env)) }
}

/// The arguments of a variadic exec function after its first: five the entry point saved from
/// registers, then the caller's stack (the x86-64 System V convention for pointers).
struct VarArgs {
    registers: *const *const c_char,
    stack: *const *const c_char,
    next: usize,
}

impl VarArgs {
    fn new(registers: *const *const c_char, stack: *const *const c_char) -> VarArgs {
        VarArgs {
            registers,
            stack,
            next: 0,
        }
    }

    /// # Safety
    /// The caller passed at least `self.next + 1` arguments after the first.
    unsafe fn next(&mut self) -> *const c_char {
        let i = self.next;
        self.next += 1;
        // SAFETY: within the five saved registers, or the caller's stack arguments.
        unsafe {
            if i < 5 {
                *self.registers.add(i)
            } else {
                *self.stack.add(i - 5)
            }
        }
    }

    /// The argument list up to its null pointer, which ends the returned vector too.
    ///
    /// # Safety
    /// The caller's list ends with a null pointer.
    unsafe fn list(&mut self) -> Vec<*const c_char> {
        let mut argv = Vec::new();
        loop {
            // SAFETY: the list is not over until its null pointer.
            let arg = unsafe { self.next() };
            argv.push(arg);
            if arg.is_null() {
                return argv;
            }
        }
    }
}

/// Saves the five register arguments after the first below the return address and calls
/// `$gather(first, registers, stack arguments)`, returning what it returns.
macro_rules! variadic_entry {
    ($gather:ident) => {
        core::arch::naked_asm!(
            // At entry the return address is at rsp and the stack arguments above it; 40
            // bytes for the registers keep rsp 16-byte aligned at the call.
            "sub rsp, 40",
            "mov [rsp], rsi",
            "mov [rsp + 8], rdx",
            "mov [rsp + 16], rcx",
            "mov [rsp + 24], r8",
            "mov [rsp + 32], r9",
            "mov rsi, rsp",
            "lea rdx, [rsp + 48]",
            "call {gather}",
            "add rsp, 40",
            "ret",
            gather = sym $gather,
        )
    };
}

/// `execl(path, arg0, ..., NULL)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execl() {
    variadic_entry!(execl_gathered)
}

/// `execlp(file, arg0, ..., NULL)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execlp() {
    variadic_entry!(execlp_gathered)
}

/// `execle(path, arg0, ..., NULL, envp)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execle() {
    variadic_entry!(execle_gathered)
}

extern "C" fn execl_gathered(
    path: *const c_char,
    registers: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    // SAFETY: execl's caller passed a null-terminated list.
    let argv = unsafe { VarArgs::new(registers, stack).list() };
    // SAFETY: forwarded.
    unsafe { execv(path, argv.as_ptr()) }
}

extern "C" fn execlp_gathered(
    file: *const c_char,
    registers: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    // SAFETY: execlp's caller passed a null-terminated list.
    let argv = unsafe { VarArgs::new(registers, stack).list() };
    // SAFETY: forwarded.
    unsafe { execvp(file, argv.as_ptr()) }
}

extern "C" fn execle_gathered(
    path: *const c_char,
    registers: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    let mut args = VarArgs::new(registers, stack);
    // SAFETY: execle's caller passed a null-terminated list, then the environment.
    let (argv, envp) = unsafe {
        let argv = args.list();
        (argv, args.next() as *const *const c_char)
    };
    // SAFETY: forwarded.
    unsafe { execve(path, argv.as_ptr(), envp) }
}
