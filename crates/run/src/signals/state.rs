//! Who may take signals, and what is pending: one [`Record`] per uthread (its mask, what is
//! pending on it, the word its waits sleep on), and under one lock the routing state (each
//! uthread's queue and whether it waits for signals, and the process's own queue).
//!
//! Signals are rare, so one lock serializes every routing decision against every wait that
//! depends on it; the fields read outside it (masks, a set of what is pending) are atomics the
//! owner writes and senders read, checked again under the lock before anyone sleeps.

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use corral::SpinLock;
use corral::futex as rt;
use corral_sigroute::{SigSet, Source, Thread, Waiting};

/// How many realtime signals may be queued on one queue; beyond it `sigqueue` gets EAGAIN, as
/// beyond `RLIMIT_SIGPENDING`.
const MAX_QUEUED: usize = 1024;

/// One uthread's signal state.
pub struct Record {
    /// Its `pthread_t`: the address of its thread control block.
    pub tcb: usize,
    /// Its mask, as `pthread_sigmask` set it: written by the uthread, read by senders.
    mask: AtomicU64,
    /// The set of signals in its queue, kept with the queue, for checks without the lock.
    pending: AtomicU64,
    /// Bumped whenever a signal is routed to it; its signal waits and sleeps wait on it.
    pub word: AtomicU32,
    /// The address of the futex word it sleeps on in the shim (0 while it does not), so a
    /// signal for it can interrupt that wait.
    pub blocked_on: AtomicUsize,
}

impl Record {
    fn new(tcb: usize, mask: SigSet) -> Record {
        Record {
            tcb,
            mask: AtomicU64::new(mask.0),
            pending: AtomicU64::new(0),
            word: AtomicU32::new(0),
            blocked_on: AtomicUsize::new(0),
        }
    }

    pub fn mask(&self) -> SigSet {
        SigSet(self.mask.load(Ordering::SeqCst))
    }

    /// Sets its mask; returns the one before.
    pub fn set_mask(&self, mask: SigSet) -> SigSet {
        SigSet(
            self.mask
                .swap(unblockable_removed(mask).0, Ordering::SeqCst),
        )
    }

    /// Whether a signal is pending that its mask lets through, on it or on the process.
    pub fn deliverable(&self) -> bool {
        let pending = self.pending.load(Ordering::SeqCst) | PROCESS_PENDING.load(Ordering::SeqCst);
        pending & !self.mask.load(Ordering::SeqCst) != 0
    }

    pub fn pending(&self) -> SigSet {
        SigSet(self.pending.load(Ordering::SeqCst))
    }

    /// Sleeps the uthread of this record on its own word until a signal is routed to it (the
    /// word moved from `seen`, which the caller read before its last look at what is pending),
    /// or until `deadline`; at once if a signal is deliverable already.
    pub fn sleep_on_word(&self, seen: u32, deadline: Option<u64>) -> Result<(), rt::NotWoken> {
        self.blocked_on
            .store(self.word.as_ptr() as usize, Ordering::SeqCst);
        let slept = if self.deliverable() {
            Ok(())
        } else {
            rt::wait(&self.word, seen, rt::MATCH_ANY, deadline)
        };
        self.blocked_on.store(0, Ordering::SeqCst);
        slept
    }
}

/// A mask never holds SIGKILL or SIGSTOP, nor the C library's two internal signals.
pub fn unblockable_removed(mask: SigSet) -> SigSet {
    mask.minus(SigSet::of(&[libc::SIGKILL, libc::SIGSTOP, 32, 33]))
}

/// Signals waiting to be taken, oldest first: one of each standard signal (a second one sent
/// while the first waits is merged into it), realtime signals queued.
pub struct Queue {
    infos: Vec<libc::siginfo_t>,
    set: SigSet,
}

impl Queue {
    const fn new() -> Queue {
        Queue {
            infos: Vec::new(),
            set: SigSet::EMPTY,
        }
    }

    pub fn set(&self) -> SigSet {
        self.set
    }

    /// Queues `info`, or merges it into the same standard signal already pending; false only
    /// if it had to be dropped (the queue is full).
    fn push(&mut self, info: libc::siginfo_t) -> bool {
        let sig = info.si_signo;
        let realtime = sig >= 32;
        if self.set.contains(sig) && !realtime {
            return true;
        }
        if self.infos.len() >= MAX_QUEUED {
            return false;
        }
        self.infos.push(info);
        self.set = self.set.with(sig);
        true
    }

    fn take(&mut self, sig: i32) -> Option<libc::siginfo_t> {
        let i = self.infos.iter().position(|i| i.si_signo == sig)?;
        let info = self.infos.remove(i);
        if !self.infos.iter().any(|i| i.si_signo == sig) {
            self.set = self.set.without(sig);
        }
        Some(info)
    }

    fn drain(&mut self, wanted: SigSet) -> Vec<libc::siginfo_t> {
        let (taken, kept): (Vec<_>, Vec<_>) = self
            .infos
            .drain(..)
            .partition(|i| wanted.contains(i.si_signo));
        self.infos = kept;
        self.set = self.set.minus(wanted);
        taken
    }
}

pub struct Slot {
    pub rec: Arc<Record>,
    queue: Queue,
    pub waiting: Waiting,
    /// What a `sigwait` it is in accepted, for it to return.
    pub accepted: Option<libc::siginfo_t>,
    pub main: bool,
}

impl Slot {
    pub fn view(&self) -> Thread {
        Thread {
            mask: self.rec.mask(),
            waiting: self.waiting,
        }
    }

    pub fn push(&mut self, info: libc::siginfo_t) -> bool {
        let queued = self.queue.push(info);
        self.rec.pending.store(self.queue.set().0, Ordering::SeqCst);
        queued
    }
}

pub struct State {
    pub slots: Vec<Slot>,
    process: Queue,
}

// SAFETY: what is not Send in it is `siginfo_t`'s pointer fields: values a sender passed (a
// `sigqueue` value, a fault's address), carried as data and never dereferenced here.
unsafe impl Send for State {}

/// The set of signals in the process's queue, kept with it, for checks without the lock.
static PROCESS_PENDING: AtomicU64 = AtomicU64::new(0);

pub static STATE: SpinLock<State> = SpinLock::new(State {
    slots: Vec::new(),
    process: Queue::new(),
});

impl State {
    pub fn index_of(&self, rec: &Record) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| core::ptr::eq(Arc::as_ptr(&s.rec), rec))
    }

    pub fn by_tcb(&self, tcb: usize) -> Option<usize> {
        self.slots.iter().position(|s| s.rec.tcb == tcb)
    }

    pub fn main_index(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.main)
    }

    pub fn views(&self) -> Vec<Thread> {
        self.slots.iter().map(Slot::view).collect()
    }

    pub fn push_process(&mut self, info: libc::siginfo_t) -> bool {
        let queued = self.process.push(info);
        PROCESS_PENDING.store(self.process.set().0, Ordering::SeqCst);
        queued
    }

    pub fn process_pending(&self) -> SigSet {
        self.process.set()
    }

    /// Takes what slot `i` takes next among `wanted`: its own first, then the process's.
    pub fn take(&mut self, i: usize, wanted: SigSet) -> Option<libc::siginfo_t> {
        let slot = &mut self.slots[i];
        let (sig, source) =
            corral_sigroute::next_pending(slot.queue.set(), self.process.set(), wanted)?;
        let info = match source {
            Source::Thread => {
                let info = slot.queue.take(sig);
                slot.rec.pending.store(slot.queue.set().0, Ordering::SeqCst);
                info
            }
            Source::Process => {
                let info = self.process.take(sig);
                PROCESS_PENDING.store(self.process.set().0, Ordering::SeqCst);
                info
            }
        };
        debug_assert!(info.is_some(), "a pending set out of step with its queue");
        info
    }

    /// Takes every signal of `wanted` pending for the process.
    pub fn drain_process(&mut self, wanted: SigSet) -> Vec<libc::siginfo_t> {
        let taken = self.process.drain(wanted);
        PROCESS_PENDING.store(self.process.set().0, Ordering::SeqCst);
        taken
    }
}

std::thread_local! {
    /// The calling uthread's record (each uthread has its own TLS); null on kthreads' own TLS.
    static CURRENT: Cell<*const Record> = const { Cell::new(core::ptr::null()) };
}

/// The calling uthread's record, if it has one.
pub fn current() -> Option<&'static Record> {
    let p = CURRENT.with(Cell::get);
    // SAFETY: CURRENT points at a record its STATE slot keeps alive; the uthread clears CURRENT
    // before it leaves STATE (`leave`), and only the uthread itself reads its CURRENT.
    unsafe { p.as_ref() }
}

/// Makes a record for a uthread about to start, with `mask`.
pub fn register(tcb: usize, mask: SigSet, main: bool) -> Arc<Record> {
    let rec = Arc::new(Record::new(tcb, unblockable_removed(mask)));
    STATE.lock().slots.push(Slot {
        rec: rec.clone(),
        queue: Queue::new(),
        waiting: Waiting::No,
        accepted: None,
        main,
    });
    rec
}

/// Called by the uthread of `rec` on its own TLS: from now on its signals are its record's.
pub fn enter(rec: &Arc<Record>) {
    CURRENT.with(|c| c.set(Arc::as_ptr(rec)));
}

/// Called by a uthread that ends: what was pending on it is discarded, as for a thread.
pub fn leave() {
    let p = CURRENT.with(|c| c.replace(core::ptr::null()));
    if p.is_null() {
        return;
    }
    let mut st = STATE.lock();
    st.slots.retain(|s| !core::ptr::eq(Arc::as_ptr(&s.rec), p));
}

/// Forgets a record whose uthread never started.
pub fn forget(tcb: usize) {
    STATE.lock().slots.retain(|s| s.rec.tcb != tcb);
}
