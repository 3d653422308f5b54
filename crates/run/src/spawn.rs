//! Children started from a uthread start with the program's signal mask. A child inherits the
//! kernel mask of the thread that starts it, and a kthread's blocks what the shim routes (see
//! [`crate::signals`]); so while `posix_spawn` or `popen` starts a child the kthread's mask is
//! the calling uthread's ([`ProgramMask`]), and `system` is the shim's own, over the shim's
//! `posix_spawn`, since glibc's reads the kthread's mask for the child and then waits for it
//! with the kthread's mask changed. An `exec` does the same itself (see [`crate::exec`]), and
//! the child of a `fork` takes the uthread's mask in an `atfork` handler.

use core::ffi::{c_char, c_int};

use corral::SpinLock;
use corral_sigroute::SigSet;

use crate::real::real;
use crate::signals::{self, to_sigset};

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// While it lives, the calling kthread's kernel mask is the calling uthread's, and the uthread
/// stays on this kthread.
pub struct ProgramMask {
    before: SigSet,
    _stay: corral::preempt::PreemptGuard,
}

impl ProgramMask {
    /// `None` where there is nothing to change (not a uthread, or signals not routed).
    pub fn apply() -> Option<ProgramMask> {
        if !crate::thread::on_uthread() || !signals::active() {
            return None;
        }
        let mask = signals::current_mask()?;
        let stay = corral::preempt::PreemptGuard::new();
        Some(ProgramMask {
            before: signals::set_kernel_mask(libc::SIG_SETMASK, mask),
            _stay: stay,
        })
    }
}

impl Drop for ProgramMask {
    fn drop(&mut self) {
        signals::set_kernel_mask(libc::SIG_SETMASK, self.before);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let f = real!(popen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE);
    let _mask = ProgramMask::apply();
    // SAFETY: forwarded.
    unsafe { f(command, mode) }
}

/// What `system` changes in the caller while a command runs, shared by concurrent calls: the
/// count of calls running and the actions for SIGINT and SIGQUIT before the first.
static SHELLS: SpinLock<(u32, Option<[libc::sigaction; 2]>)> = SpinLock::new((0, None));
const SHELL_IGNORES: [i32; 2] = [libc::SIGINT, libc::SIGQUIT];

/// POSIX's `system`: SIGINT and SIGQUIT ignored and SIGCHLD blocked in the caller while the
/// command runs; the child has the caller's mask, and those two at their defaults unless the
/// caller ignored them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    if signals::current_mask().is_none() || !crate::thread::on_uthread() {
        let f = real!(system: unsafe extern "C" fn(*const c_char) -> c_int);
        // SAFETY: forwarded.
        return unsafe { f(command) };
    }
    if command.is_null() {
        // Whether a shell is there, as glibc answers it.
        // SAFETY: a NUL-terminated command.
        return c_int::from(unsafe { system(c"exit 0".as_ptr()) } == 0);
    }
    let before = ignore_for_shell();
    let mask = signals::current_mask().unwrap_or(SigSet::EMPTY);
    let status = run_shell(command, mask, &before);
    restore_after_shell();
    status
}

/// Ignores SIGINT and SIGQUIT for the first concurrent call; returns the actions before it.
fn ignore_for_shell() -> [libc::sigaction; 2] {
    let mut shells = SHELLS.lock();
    shells.0 += 1;
    if let Some(before) = shells.1 {
        return before;
    }
    // SAFETY: sigaction is plain data; zeroes are valid (SIG_DFL, no flags).
    let mut before: [libc::sigaction; 2] = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut ignore: libc::sigaction = unsafe { core::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    for (sig, old) in SHELL_IGNORES.iter().zip(before.iter_mut()) {
        // SAFETY: valid actions.
        unsafe { crate::disposition::real_sigaction()(*sig, &ignore, old) };
    }
    shells.1 = Some(before);
    before
}

fn restore_after_shell() {
    let mut shells = SHELLS.lock();
    shells.0 -= 1;
    if shells.0 > 0 {
        return;
    }
    if let Some(before) = shells.1.take() {
        for (sig, old) in SHELL_IGNORES.iter().zip(before.iter()) {
            // SAFETY: actions the kernel reported.
            unsafe { crate::disposition::real_sigaction()(*sig, old, core::ptr::null_mut()) };
        }
    }
}

/// Runs `sh -c command` and waits for it, with SIGCHLD blocked in the calling uthread.
fn run_shell(command: *const c_char, mask: SigSet, before: &[libc::sigaction; 2]) -> c_int {
    let mut old: libc::sigset_t = to_sigset(SigSet::EMPTY);
    let chld = to_sigset(SigSet::of(&[libc::SIGCHLD]));
    // SAFETY: the shim's own pthread_sigmask on this uthread, with sets we own.
    unsafe { crate::sigmask::pthread_sigmask(libc::SIG_BLOCK, &chld, &mut old) };
    let mut defaults = SigSet::EMPTY;
    for (sig, old) in SHELL_IGNORES.iter().zip(before.iter()) {
        if old.sa_sigaction != libc::SIG_IGN {
            defaults = defaults.with(*sig);
        }
    }
    let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), command, core::ptr::null()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: an attribute object we initialize, use and destroy here; the shim's posix_spawn
    // (which puts the launcher's variables in the environment with --children corral) with
    // NUL-terminated strings and arrays; the process's environment.
    let spawned = unsafe {
        let mut attr: libc::posix_spawnattr_t = core::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawnattr_setsigmask(&mut attr, &to_sigset(mask));
        libc::posix_spawnattr_setsigdefault(&mut attr, &to_sigset(defaults));
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
        );
        let rc = crate::exec::posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            core::ptr::null(),
            &attr,
            argv.as_ptr(),
            environ,
        );
        libc::posix_spawnattr_destroy(&mut attr);
        rc
    };
    let status = if spawned == 0 {
        wait_for_child(pid)
    } else {
        // What a shell that could not run would have returned (exit status 127).
        127 << 8
    };
    // SAFETY: as above.
    unsafe { crate::sigmask::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    status
}

fn wait_for_child(pid: libc::pid_t) -> c_int {
    let mut status: c_int = 0;
    loop {
        // SAFETY: waitpid for our own child with an out-pointer we own.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return status;
        }
        // SAFETY: this thread's errno.
        if rc == -1 && unsafe { *libc::__errno_location() } != libc::EINTR {
            return -1;
        }
    }
}
