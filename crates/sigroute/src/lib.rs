//! Where a signal goes in a process whose threads are uthreads.
//!
//! The kernel picks the thread that takes a process-directed signal among OS threads, by their
//! kernel masks. Under `corral-run` the OS threads are kthreads shared by many uthreads, each
//! with its own mask, so the kernel's choice is meaningless: the shim takes every such signal
//! itself and decides here, by POSIX's rules, which uthread gets it. The functions are pure:
//! they read a snapshot of the uthreads' masks and waits and answer with a [`Route`]; the shim
//! carries it out.
//!
//! POSIX's rules, as Linux applies them:
//! - a thread waiting for the signal in `sigwait`, `sigwaitinfo` or `sigtimedwait` accepts it,
//!   whatever its disposition;
//! - an ignored signal is discarded, and so is one whose default action is to ignore it, unless
//!   every thread blocks it (a blocked signal is never ignored: it stays pending, for a later
//!   `sigwait`, `sigpending` or change of disposition);
//! - otherwise the signal is delivered to a thread that does not block it, preferring one
//!   suspended in `sigsuspend` or `pause`, then the main thread; a default action (terminate,
//!   dump core, stop) acts on the whole process;
//! - if every thread blocks it, it stays pending for the process, delivered to the first thread
//!   that unblocks it or accepted by the first that waits for it.
//!
//! A signal sent to one thread (`pthread_kill`, `raise`) follows the same rules with that thread
//! alone, and stays pending on it while it blocks the signal.

/// The highest signal number on Linux x86-64.
pub const MAX_SIGNAL: i32 = 64;

/// A set of signals 1..=64, signal `n` at bit `n - 1` (the kernel's layout).
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct SigSet(pub u64);

impl SigSet {
    pub const EMPTY: SigSet = SigSet(0);
    pub const FULL: SigSet = SigSet(u64::MAX);

    /// Whether `sig` is a signal number this set can hold.
    pub fn valid(sig: i32) -> bool {
        (1..=MAX_SIGNAL).contains(&sig)
    }

    fn bit(sig: i32) -> u64 {
        debug_assert!(Self::valid(sig), "signal {sig} out of range");
        1u64 << (sig - 1)
    }

    pub fn of(signals: &[i32]) -> SigSet {
        signals.iter().fold(SigSet::EMPTY, |s, &sig| s.with(sig))
    }

    pub fn contains(self, sig: i32) -> bool {
        Self::valid(sig) && self.0 & Self::bit(sig) != 0
    }

    #[must_use]
    pub fn with(self, sig: i32) -> SigSet {
        SigSet(self.0 | Self::bit(sig))
    }

    #[must_use]
    pub fn without(self, sig: i32) -> SigSet {
        SigSet(self.0 & !Self::bit(sig))
    }

    #[must_use]
    pub fn union(self, other: SigSet) -> SigSet {
        SigSet(self.0 | other.0)
    }

    #[must_use]
    pub fn intersect(self, other: SigSet) -> SigSet {
        SigSet(self.0 & other.0)
    }

    #[must_use]
    pub fn minus(self, other: SigSet) -> SigSet {
        SigSet(self.0 & !other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The lowest-numbered signal in the set: the one Linux delivers first.
    pub fn lowest(self) -> Option<i32> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as i32 + 1)
    }

    pub fn iter(self) -> impl Iterator<Item = i32> {
        (1..=MAX_SIGNAL).filter(move |&s| self.contains(s))
    }
}

impl core::fmt::Debug for SigSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// What a signal does by default (`signal(7)`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DefaultAction {
    Terminate,
    CoreDump,
    Stop,
    /// Resumes a stopped process; the kernel does that when the signal is sent.
    Continue,
    Ignore,
}

impl DefaultAction {
    /// Whether taking the default action does something to the process.
    pub fn acts(self) -> bool {
        matches!(
            self,
            DefaultAction::Terminate | DefaultAction::CoreDump | DefaultAction::Stop
        )
    }
}

pub fn default_action(sig: i32) -> DefaultAction {
    match sig {
        libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH => DefaultAction::Ignore,
        libc::SIGCONT => DefaultAction::Continue,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => DefaultAction::Stop,
        libc::SIGQUIT
        | libc::SIGILL
        | libc::SIGTRAP
        | libc::SIGABRT
        | libc::SIGBUS
        | libc::SIGFPE
        | libc::SIGSEGV
        | libc::SIGXCPU
        | libc::SIGXFSZ
        | libc::SIGSYS => DefaultAction::CoreDump,
        _ => DefaultAction::Terminate,
    }
}

/// The program's disposition of a signal, as `sigaction` set it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Disposition {
    Ignore,
    Default,
    Handler,
}

/// What a thread is doing, as far as signals care.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Waiting {
    /// Running, runnable, or blocked in something other than a signal wait.
    No,
    /// In `sigwait`, `sigwaitinfo` or `sigtimedwait` for this set.
    ForSignals(SigSet),
    /// In `sigsuspend` or `pause`: its mask is the one it suspended with.
    Suspended,
}

/// A uthread as the router sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Thread {
    pub mask: SigSet,
    pub waiting: Waiting,
}

/// Where a signal goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Route {
    /// The thread at this index waits for it in the `sigwait` family and takes it.
    Accept(usize),
    /// Nobody sees it.
    Discard,
    /// Its default action, on the whole process.
    ActByDefault,
    /// The handler runs on the thread at this index.
    Handle(usize),
    /// Every thread blocks it: pending for the process.
    PendForProcess,
    /// The one thread it was sent to blocks it: pending on that thread.
    PendForThread,
}

fn discarded(sig: i32, disposition: Disposition) -> bool {
    match disposition {
        Disposition::Ignore => true,
        Disposition::Default => !default_action(sig).acts(),
        Disposition::Handler => false,
    }
}

/// Where a signal sent to the process goes. `main` is the index of the main thread, if it is
/// among `threads`.
pub fn route_to_process(
    sig: i32,
    disposition: Disposition,
    threads: &[Thread],
    main: Option<usize>,
) -> Route {
    if let Some(i) = threads
        .iter()
        .position(|t| matches!(t.waiting, Waiting::ForSignals(set) if set.contains(sig)))
    {
        return Route::Accept(i);
    }
    let open = |t: &Thread| !t.mask.contains(sig);
    if !threads.iter().any(open) {
        // Even an ignored one: a blocked signal is never ignored, since its disposition may
        // change before it is unblocked (and a `sigwait` may come for it).
        return Route::PendForProcess;
    }
    if discarded(sig, disposition) {
        return Route::Discard;
    }
    if disposition == Disposition::Default {
        return Route::ActByDefault;
    }
    let suspended = threads
        .iter()
        .position(|t| open(t) && t.waiting == Waiting::Suspended);
    let main = main.filter(|&m| threads.get(m).is_some_and(open));
    let first = threads.iter().position(open);
    match suspended.or(main).or(first) {
        Some(i) => Route::Handle(i),
        None => Route::PendForProcess,
    }
}

/// Where a signal sent to one thread goes.
pub fn route_to_thread(sig: i32, disposition: Disposition, thread: &Thread) -> Route {
    if matches!(thread.waiting, Waiting::ForSignals(set) if set.contains(sig)) {
        return Route::Accept(0);
    }
    if thread.mask.contains(sig) {
        return Route::PendForThread;
    }
    if discarded(sig, disposition) {
        return Route::Discard;
    }
    match disposition {
        Disposition::Default => Route::ActByDefault,
        _ => Route::Handle(0),
    }
}

/// Where a pending signal comes from when a thread takes it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    Thread,
    Process,
}

/// The pending signal a thread takes next among those in `wanted`: its own before the
/// process's, the lowest number first in each (as Linux dequeues them).
pub fn next_pending(
    thread_pending: SigSet,
    process_pending: SigSet,
    wanted: SigSet,
) -> Option<(i32, Source)> {
    if let Some(sig) = thread_pending.intersect(wanted).lowest() {
        return Some((sig, Source::Thread));
    }
    process_pending
        .intersect(wanted)
        .lowest()
        .map(|sig| (sig, Source::Process))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn running(mask: &[i32]) -> Thread {
        Thread {
            mask: SigSet::of(mask),
            waiting: Waiting::No,
        }
    }

    #[test]
    fn sets_hold_every_signal_at_the_kernels_bit() {
        assert_eq!(SigSet::of(&[1]).0, 1);
        assert_eq!(SigSet::of(&[64]).0, 1 << 63);
        assert!(!SigSet::FULL.contains(0));
        assert!(!SigSet::FULL.contains(65));
        assert_eq!(SigSet::of(&[10, 3, 40]).lowest(), Some(3));
        assert_eq!(SigSet::EMPTY.lowest(), None);
        assert_eq!(
            SigSet::of(&[2, 5, 64]).iter().collect::<Vec<_>>(),
            [2, 5, 64]
        );
    }

    #[test]
    fn a_sigwaiter_accepts_before_anyone_handles_even_an_ignored_signal() {
        let threads = [
            running(&[]),
            Thread {
                mask: SigSet::of(&[libc::SIGUSR2]),
                waiting: Waiting::ForSignals(SigSet::of(&[libc::SIGUSR2])),
            },
        ];
        for d in [
            Disposition::Handler,
            Disposition::Default,
            Disposition::Ignore,
        ] {
            assert_eq!(
                route_to_process(libc::SIGUSR2, d, &threads, Some(0)),
                Route::Accept(1)
            );
        }
    }

    #[test]
    fn lbzip2s_muxer_wakes_main_in_sigsuspend() {
        // Every thread blocks SIGUSR2; main suspends with it unblocked.
        let usr2 = libc::SIGUSR2;
        let threads = [
            running(&[usr2]),
            Thread {
                mask: SigSet::EMPTY,
                waiting: Waiting::Suspended,
            },
            running(&[usr2]),
        ];
        assert_eq!(
            route_to_process(usr2, Disposition::Handler, &threads, Some(1)),
            Route::Handle(1)
        );
    }

    #[test]
    fn a_handler_prefers_a_suspended_thread_then_main_then_the_first_open_one() {
        let sig = libc::SIGTERM;
        let suspended = Thread {
            mask: SigSet::EMPTY,
            waiting: Waiting::Suspended,
        };
        let threads = [running(&[sig]), running(&[]), running(&[]), suspended];
        assert_eq!(
            route_to_process(sig, Disposition::Handler, &threads, Some(2)),
            Route::Handle(3)
        );
        assert_eq!(
            route_to_process(sig, Disposition::Handler, &threads[..3], Some(2)),
            Route::Handle(2)
        );
        assert_eq!(
            route_to_process(sig, Disposition::Handler, &threads[..3], Some(0)),
            Route::Handle(1)
        );
        // A thread suspended with the signal blocked is not a candidate.
        let blocked_suspended = Thread {
            mask: SigSet::of(&[sig]),
            waiting: Waiting::Suspended,
        };
        assert_eq!(
            route_to_process(
                sig,
                Disposition::Handler,
                &[blocked_suspended, running(&[])],
                None
            ),
            Route::Handle(1)
        );
    }

    #[test]
    fn a_signal_every_thread_blocks_stays_pending_for_the_process() {
        let sig = libc::SIGINT;
        let threads = [running(&[sig]), running(&[sig])];
        assert_eq!(
            route_to_process(sig, Disposition::Handler, &threads, Some(0)),
            Route::PendForProcess
        );
        assert_eq!(
            route_to_process(sig, Disposition::Default, &threads, Some(0)),
            Route::PendForProcess
        );
        // Default-ignored but blocked everywhere: kept for a later sigwait.
        assert_eq!(
            route_to_process(
                libc::SIGCHLD,
                Disposition::Default,
                &[running(&[libc::SIGCHLD])],
                None
            ),
            Route::PendForProcess
        );
        // Ignored but blocked everywhere: kept too (a shell's background job inherits SIGINT
        // ignored, and may still sigwait for it).
        assert_eq!(
            route_to_process(sig, Disposition::Ignore, &threads, Some(0)),
            Route::PendForProcess
        );
        assert_eq!(
            route_to_process(sig, Disposition::Handler, &[], None),
            Route::PendForProcess
        );
    }

    #[test]
    fn default_actions_act_on_the_process_and_ignores_discard() {
        let threads = [running(&[])];
        assert_eq!(
            route_to_process(libc::SIGTERM, Disposition::Default, &threads, None),
            Route::ActByDefault
        );
        assert_eq!(
            route_to_process(libc::SIGTSTP, Disposition::Default, &threads, None),
            Route::ActByDefault
        );
        for sig in [libc::SIGCHLD, libc::SIGWINCH, libc::SIGURG, libc::SIGCONT] {
            assert_eq!(
                route_to_process(sig, Disposition::Default, &threads, None),
                Route::Discard,
                "signal {sig}"
            );
        }
        assert_eq!(
            route_to_process(libc::SIGTERM, Disposition::Ignore, &threads, None),
            Route::Discard
        );
    }

    #[test]
    fn a_thread_directed_signal_waits_on_its_thread_while_blocked() {
        let sig = libc::SIGUSR1;
        assert_eq!(
            route_to_thread(sig, Disposition::Handler, &running(&[sig])),
            Route::PendForThread
        );
        assert_eq!(
            route_to_thread(sig, Disposition::Ignore, &running(&[sig])),
            Route::PendForThread
        );
        assert_eq!(
            route_to_thread(sig, Disposition::Handler, &running(&[])),
            Route::Handle(0)
        );
        assert_eq!(
            route_to_thread(sig, Disposition::Default, &running(&[])),
            Route::ActByDefault
        );
        assert_eq!(
            route_to_thread(sig, Disposition::Ignore, &running(&[])),
            Route::Discard
        );
        // pbzip2: its signal thread waits in sigwait for the SIGUSR1 main sends it.
        let waiter = Thread {
            mask: SigSet::of(&[sig]),
            waiting: Waiting::ForSignals(SigSet::of(&[libc::SIGINT, sig])),
        };
        assert_eq!(
            route_to_thread(sig, Disposition::Default, &waiter),
            Route::Accept(0)
        );
    }

    #[test]
    fn a_thread_takes_its_own_pending_signals_before_the_processs() {
        let mine = SigSet::of(&[20]);
        let process = SigSet::of(&[3]);
        assert_eq!(
            next_pending(mine, process, SigSet::FULL),
            Some((20, Source::Thread))
        );
        assert_eq!(
            next_pending(mine, process, SigSet::FULL.without(20)),
            Some((3, Source::Process))
        );
        assert_eq!(next_pending(mine, process, SigSet::of(&[4])), None);
    }

    fn arb_thread() -> impl Strategy<Value = Thread> {
        (any::<u64>(), 0..3u8, any::<u64>()).prop_map(|(mask, w, set)| Thread {
            mask: SigSet(mask),
            waiting: match w {
                0 => Waiting::No,
                1 => Waiting::ForSignals(SigSet(set)),
                _ => Waiting::Suspended,
            },
        })
    }

    fn arb_disposition() -> impl Strategy<Value = Disposition> {
        prop_oneof![
            Just(Disposition::Ignore),
            Just(Disposition::Default),
            Just(Disposition::Handler)
        ]
    }

    proptest! {
        /// Whatever the snapshot: a signal is never handled by a thread that blocks it, never
        /// pending while a thread could take it, and never lost while every thread blocks it.
        #[test]
        fn routes_respect_masks_and_waits(
            sig in 1..=MAX_SIGNAL,
            d in arb_disposition(),
            threads in proptest::collection::vec(arb_thread(), 0..6),
            main in proptest::option::of(0usize..6),
        ) {
            let route = route_to_process(sig, d, &threads, main);
            let waiter = threads.iter().position(
                |t| matches!(t.waiting, Waiting::ForSignals(s) if s.contains(sig)));
            let open = threads.iter().any(|t| !t.mask.contains(sig));
            match route {
                Route::Accept(i) => prop_assert_eq!(Some(i), waiter),
                Route::Handle(i) => {
                    prop_assert!(waiter.is_none());
                    prop_assert_eq!(d, Disposition::Handler);
                    prop_assert!(!threads[i].mask.contains(sig));
                }
                Route::PendForProcess => {
                    prop_assert!(waiter.is_none());
                    prop_assert!(!open);
                }
                Route::ActByDefault => {
                    prop_assert!(open && waiter.is_none());
                    prop_assert_eq!(d, Disposition::Default);
                    prop_assert!(default_action(sig).acts());
                }
                Route::Discard => {
                    prop_assert!(waiter.is_none() && open);
                    prop_assert!(d == Disposition::Ignore
                        || (d == Disposition::Default && !default_action(sig).acts()));
                }
                Route::PendForThread => prop_assert!(false, "a process signal pended on a thread"),
            }
        }

        #[test]
        fn the_next_pending_signal_is_wanted_and_pending(
            mine in any::<u64>(), process in any::<u64>(), wanted in any::<u64>()
        ) {
            match next_pending(SigSet(mine), SigSet(process), SigSet(wanted)) {
                Some((sig, Source::Thread)) => {
                    prop_assert!(SigSet(mine & wanted).contains(sig));
                    prop_assert_eq!(SigSet(mine & wanted).lowest(), Some(sig));
                }
                Some((sig, Source::Process)) => {
                    prop_assert_eq!(mine & wanted, 0);
                    prop_assert_eq!(SigSet(process & wanted).lowest(), Some(sig));
                }
                None => prop_assert_eq!((mine | process) & wanted, 0),
            }
        }
    }
}
