//! Carrying out where a signal goes: to a waiter, onto a uthread's or the process's queue, or
//! the default action; then making sure the uthread that is to take it notices (a nudge).

use core::sync::atomic::Ordering;

use corral_sigroute::{Route, Waiting};

use super::deliver::{act_by_default, action_of};
use super::state::{Record, STATE};
use super::{dispatch, signal_info};

/// What is left to do once the lock is released.
enum After {
    Nothing,
    Nudge(std::sync::Arc<Record>),
    ActByDefault,
}

/// Routes a signal sent to the process. Returns false if it could not be queued (a full
/// realtime queue).
pub fn to_process(info: libc::siginfo_t) -> bool {
    let sig = info.si_signo;
    let (kind, _) = action_of(sig);
    let mut queued = true;
    let after = {
        let mut st = STATE.lock();
        let views = st.views();
        match corral_sigroute::route_to_process(sig, kind, &views, st.main_index()) {
            Route::Accept(i) => accept(&mut st.slots[i], info),
            Route::Handle(i) => {
                queued = st.slots[i].push(info);
                After::Nudge(st.slots[i].rec.clone())
            }
            Route::PendForProcess => {
                queued = st.push_process(info);
                After::Nothing
            }
            Route::ActByDefault => After::ActByDefault,
            Route::Discard | Route::PendForThread => After::Nothing,
        }
    };
    finish(after, sig);
    queued
}

/// Routes a signal sent to the uthread whose `pthread_t` is `tcb`. `Err(ESRCH)` if there is
/// no such uthread, `Err(EAGAIN)` if its realtime queue is full.
pub fn to_thread(tcb: usize, info: libc::siginfo_t) -> Result<(), i32> {
    let sig = info.si_signo;
    let (kind, _) = action_of(sig);
    let after = {
        let mut st = STATE.lock();
        let i = st.by_tcb(tcb).ok_or(libc::ESRCH)?;
        let slot = &mut st.slots[i];
        match corral_sigroute::route_to_thread(sig, kind, &slot.view()) {
            Route::Accept(_) => accept(slot, info),
            Route::Handle(_) => {
                if !slot.push(info) {
                    return Err(libc::EAGAIN);
                }
                After::Nudge(slot.rec.clone())
            }
            Route::PendForThread => {
                if !slot.push(info) {
                    return Err(libc::EAGAIN);
                }
                After::Nothing
            }
            Route::ActByDefault => After::ActByDefault,
            Route::Discard | Route::PendForProcess => After::Nothing,
        }
    };
    finish(after, sig);
    Ok(())
}

fn accept(slot: &mut super::state::Slot, info: libc::siginfo_t) -> After {
    slot.accepted = Some(info);
    slot.waiting = Waiting::No;
    After::Nudge(slot.rec.clone())
}

fn finish(after: After, sig: i32) {
    match after {
        After::Nothing => {}
        After::Nudge(rec) => nudge(&rec),
        After::ActByDefault => act_by_default(sig),
    }
}

/// Makes the uthread of `rec` notice what was routed to it: a signal wait or sleep it is in
/// returns, any other shim wait it is in returns early (its caller re-checks), and one that
/// runs is interrupted by the kick signal (through the dispatcher, which retries until it
/// has taken it).
pub fn nudge(rec: &Record) {
    // The other half of the check a uthread makes between publishing `blocked_on` and
    // sleeping: either it sees the signal pending, or we see where it sleeps.
    rec.word.fetch_add(1, Ordering::SeqCst);
    let at = rec.blocked_on.load(Ordering::SeqCst);
    if at != 0 {
        corral::futex::wake_uthreads_at(at, usize::MAX);
        if at == rec.word.as_ptr() as usize {
            // A wait on its own word cannot miss the bump above.
            return;
        }
        // A wait on another word may have published where it sleeps and not yet be queued
        // there; the dispatcher's retries catch that.
    }
    if core::ptr::eq(
        super::state::current().map_or(core::ptr::null(), |r| r as *const Record),
        rec,
    ) {
        return;
    }
    dispatch::watch_undelivered();
}

/// A `siginfo_t` as `kill` or `tgkill` from this process makes it.
pub fn sent_by_us(sig: i32, code: i32) -> libc::siginfo_t {
    // SAFETY: getpid and getuid cannot fail.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    signal_info(sig, code, pid, uid, 0)
}
