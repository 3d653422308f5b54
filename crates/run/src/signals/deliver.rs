//! Delivering a signal on the uthread that takes it: its handler runs on that uthread, with the
//! uthread's mask widened by the handler's as the kernel would, or its default action is taken
//! for the process.

use core::ffi::c_void;

use corral_sigroute::{Disposition, SigSet};

use super::state::{Record, STATE};
use super::{from_sigset, set_kernel_mask, to_sigset};
use crate::disposition;

type InfoHandler = extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void);
type PlainHandler = extern "C" fn(i32);

/// The program's action for `sig` and what kind it is.
pub fn action_of(sig: i32) -> (Disposition, libc::sigaction) {
    let action = disposition::program_action(sig);
    let kind = match action.sa_sigaction {
        libc::SIG_IGN => Disposition::Ignore,
        libc::SIG_DFL => Disposition::Default,
        _ => Disposition::Handler,
    };
    (kind, action)
}

/// Runs every signal deliverable to the calling uthread (`rec` is its record) until none is;
/// returns whether a handler ran.
pub fn deliver_pending(rec: &Record) -> bool {
    let mut handled = false;
    while rec.deliverable() {
        let info = {
            let mut st = STATE.lock();
            let Some(i) = st.index_of(rec) else { break };
            let open = SigSet::FULL.minus(rec.mask());
            st.take(i, open)
        };
        let Some(info) = info else { break };
        handled |= act(rec, info);
    }
    handled
}

/// What the program's disposition says to do with `info`, on the calling uthread (whose record
/// is `rec`); returns whether a handler ran.
fn act(rec: &Record, mut info: libc::siginfo_t) -> bool {
    let sig = info.si_signo;
    let (kind, action) = action_of(sig);
    match kind {
        Disposition::Ignore => false,
        Disposition::Default => {
            if corral_sigroute::default_action(sig).acts() {
                act_by_default(sig);
            }
            false
        }
        Disposition::Handler => {
            run_handler(rec, &mut info, &action);
            true
        }
    }
}

fn run_handler(rec: &Record, info: &mut libc::siginfo_t, action: &libc::sigaction) {
    let sig = info.si_signo;
    let before = rec.mask();
    let mut during = before.union(from_sigset(&action.sa_mask));
    if action.sa_flags & libc::SA_NODEFER == 0 {
        during = during.with(sig);
    }
    rec.set_mask(during);
    if action.sa_flags & libc::SA_RESETHAND != 0 {
        disposition::reset_program_action(sig);
    }
    // Handlers that look at their context get the mask they interrupted; nothing else in it
    // is the uthread's (it was not interrupted by the kernel), so the rest stays zero.
    // SAFETY: plain data; zeroes are valid.
    let mut context: libc::ucontext_t = unsafe { core::mem::zeroed() };
    context.uc_sigmask = to_sigset(before);
    if action.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed it with this signature.
        let f: InfoHandler = unsafe { core::mem::transmute(action.sa_sigaction) };
        f(sig, info, (&raw mut context).cast());
    } else {
        // SAFETY: the program installed it with this signature.
        let f: PlainHandler = unsafe { core::mem::transmute(action.sa_sigaction) };
        f(sig);
    }
    rec.set_mask(before);
}

/// Takes `sig`'s default action (terminate, dump core, stop) for the whole process: the
/// kernel's disposition made the default, the signal sent to this OS thread with it unblocked
/// for that moment. A stopped process continues here once continued.
pub fn act_by_default(sig: i32) {
    // On a kthread, the uthread must not move between the unblock and the send.
    let _stay = corral::preempt::PreemptGuard::new();
    disposition::make_kernel_default(sig);
    let before = set_kernel_mask(libc::SIG_UNBLOCK, SigSet::EMPTY.with(sig));
    // SAFETY: tgkill to our own thread.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig) };
    set_kernel_mask(libc::SIG_SETMASK, before);
}
