//! Measuring a run: latency, loss, duplicates, offered and achieved rate, and how closely the
//! generator kept to its schedule.
//!
//! Latency is measured from a request's *scheduled* send time, not from when it was actually
//! sent. A generator that falls behind (or a server that pushes back on it) therefore shows up as
//! higher latency instead of silently sending fewer requests during the slow period — there is no
//! coordinated omission. Adherence to the schedule is tracked separately, so a reader can tell a
//! slow server from a slow generator.
//!
//! The recorder comes in two halves so that a sender and a receiver on different threads each
//! own one without sharing anything while the run is on: [`SendRecorder`] and
//! [`ResponseRecorder`]; [`summarize`] combines them. [`Recorder`] holds both for a generator
//! that sends and receives on one thread. Neither half allocates per request: every table is
//! sized from [`ScheduleConfig::request_bound`] when it is made.

use std::fmt;

use hdrhistogram::{Counter, Histogram};
use serde::{Deserialize, Serialize};

use crate::schedule::{NS_PER_SEC, ScheduleConfig};
use crate::split::{Split, Unsplit};
use crate::tail::{TailKeeper, TailReport};

/// Smallest value the histograms tell apart from zero, in ns.
pub const HIST_LOW_NS: u64 = 1;
/// Largest value the histograms hold, in ns (10 s); larger values are recorded as this.
pub const HIST_HIGH_NS: u64 = 10_000_000_000;
/// Significant decimal digits the histograms keep.
pub const HIST_SIGFIGS: u8 = 3;

/// A histogram of nanosecond values from 1 ns to 10 s at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIGS)
        .expect("constant histogram bounds are valid")
}

/// Percentiles of a histogram, in nanoseconds. Each percentile is the highest value that the
/// histogram's bucket holding it stands for (so within 0.1% above the true value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Percentiles {
    pub fn of<T: Counter>(h: &Histogram<T>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            min_ns: h.min(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// The sending half: how late each send was against its schedule.
#[derive(Clone, Debug)]
pub struct SendRecorder {
    lateness: Histogram<u64>,
    sent: u64,
    errors: u64,
    last_actual_ns: u64,
}

impl Default for SendRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl SendRecorder {
    pub fn new() -> Self {
        SendRecorder {
            lateness: new_histogram(),
            sent: 0,
            errors: 0,
            last_actual_ns: 0,
        }
    }

    /// A request due at `scheduled_ns` went out at `actual_ns` (same clock).
    #[inline]
    pub fn record_sent(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.note_attempt(scheduled_ns, actual_ns);
        self.sent += 1;
    }

    /// A request due at `scheduled_ns` was attempted at `actual_ns` but could not be sent. It
    /// counts toward schedule adherence (the attempt was made then) but not as sent.
    #[inline]
    pub fn record_send_error(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.note_attempt(scheduled_ns, actual_ns);
        self.errors += 1;
    }

    #[inline]
    fn note_attempt(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.lateness
            .saturating_record(actual_ns.saturating_sub(scheduled_ns));
        self.last_actual_ns = self.last_actual_ns.max(actual_ns);
    }

    /// Adds another sender's attempts (a generator's other thread, same schedule clock).
    pub fn merge(&mut self, other: &SendRecorder) {
        self.lateness
            .add(&other.lateness)
            .expect("histograms of the same bounds add");
        self.sent += other.sent;
        self.errors += other.errors;
        self.last_actual_ns = self.last_actual_ns.max(other.last_actual_ns);
    }

    pub fn sent(&self) -> u64 {
        self.sent
    }

    pub fn send_errors(&self) -> u64 {
        self.errors
    }

    /// Latest actual send (or attempt) time seen.
    pub fn last_actual_ns(&self) -> u64 {
        self.last_actual_ns
    }

    pub fn lateness(&self) -> &Histogram<u64> {
        &self.lateness
    }
}

/// What [`ResponseRecorder::record_response`] made of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The first response to a request, in time; its latency was recorded.
    Matched { latency_ns: u64 },
    /// Another response to a request that already had one.
    Duplicate,
    /// An id this run never scheduled.
    Unknown,
    /// Arrived after the deadline: the request counts as lost.
    Late,
}

/// The receiving half: matches responses to requests by id and records latency.
#[derive(Clone, Debug)]
pub struct ResponseRecorder {
    latency: Histogram<u64>,
    first_id: u64,
    bound: u64,
    /// One bit per schedulable id: set once that request has been answered.
    answered: Vec<u64>,
    deadline_ns: u64,
    received: u64,
    matched: u64,
    duplicates: u64,
    unknown: u64,
    malformed: u64,
    late: u64,
    last_match_ns: u64,
    /// The slowest matched requests' splits.
    tail: TailKeeper,
}

impl ResponseRecorder {
    /// Accepts ids `first_id .. first_id + bound`; size it with
    /// [`ResponseRecorder::for_schedule`] to cover every request a schedule can make. Takes
    /// `bound / 8` bytes, and 48 bytes per hundred for the slowest requests' splits.
    pub fn new(first_id: u64, bound: u64) -> Self {
        let words = usize::try_from(bound.div_ceil(64)).expect("id table fits in memory");
        ResponseRecorder {
            latency: new_histogram(),
            first_id,
            bound,
            answered: vec![0; words],
            deadline_ns: u64::MAX,
            received: 0,
            matched: 0,
            duplicates: 0,
            unknown: 0,
            malformed: 0,
            late: 0,
            last_match_ns: 0,
            tail: TailKeeper::for_requests(bound),
        }
    }

    pub fn for_schedule(cfg: &ScheduleConfig) -> Self {
        Self::new(cfg.first_id, cfg.request_bound())
    }

    /// Responses received after `deadline_ns` count as late and their requests as lost. Set it
    /// to the end of the schedule plus a grace period.
    pub fn set_deadline(&mut self, deadline_ns: u64) {
        self.deadline_ns = deadline_ns;
    }

    /// A response to request `id`, which was scheduled at `scheduled_ns` (as echoed back), was
    /// received at `recv_ns` (same clock as the schedule).
    #[inline]
    pub fn record_response(&mut self, id: u64, scheduled_ns: u64, recv_ns: u64) -> Outcome {
        self.received += 1;
        let idx = id.wrapping_sub(self.first_id);
        if id < self.first_id || idx >= self.bound {
            self.unknown += 1;
            return Outcome::Unknown;
        }
        if recv_ns > self.deadline_ns {
            self.late += 1;
            return Outcome::Late;
        }
        // idx < bound, and the table has bound bits.
        let word = &mut self.answered[(idx / 64) as usize];
        let bit = 1u64 << (idx % 64);
        if *word & bit != 0 {
            self.duplicates += 1;
            return Outcome::Duplicate;
        }
        *word |= bit;
        self.matched += 1;
        self.last_match_ns = self.last_match_ns.max(recv_ns);
        let latency_ns = recv_ns.saturating_sub(scheduled_ns);
        self.latency.saturating_record(latency_ns);
        Outcome::Matched { latency_ns }
    }

    /// The split of a request [`record_response`](Self::record_response) just matched, with
    /// the latency it returned.
    #[inline]
    pub fn record_split(&mut self, latency_ns: u64, split: Split) {
        self.tail.offer(latency_ns, split);
    }

    /// A request just matched whose latency cannot be split, and why.
    #[inline]
    pub fn record_unsplit(&mut self, why: Unsplit) {
        self.tail.note_unsplit(why);
    }

    /// The slowest requests' splits so far.
    pub fn tail(&self) -> TailReport {
        self.tail.report()
    }

    /// A response that belongs to another run (its request was sent before this run
    /// started): counted as unknown, whatever its id.
    #[inline]
    pub fn record_stale(&mut self) {
        self.received += 1;
        self.unknown += 1;
    }

    /// Bytes that arrived but did not decode as a response.
    #[inline]
    pub fn record_malformed(&mut self) {
        self.received += 1;
        self.malformed += 1;
    }

    /// Whether request `id` has had a response in time.
    pub fn is_answered(&self, id: u64) -> bool {
        let idx = id.wrapping_sub(self.first_id);
        id >= self.first_id
            && idx < self.bound
            && self.answered[(idx / 64) as usize] & (1 << (idx % 64)) != 0
    }

    /// Adds another receiver's responses to requests of the same schedule (a generator's
    /// other thread). The deadline stays this one's.
    pub fn merge(&mut self, other: &ResponseRecorder) {
        assert_eq!(
            (self.first_id, self.bound),
            (other.first_id, other.bound),
            "recorders of one schedule"
        );
        self.latency
            .add(&other.latency)
            .expect("histograms of the same bounds add");
        for (a, b) in self.answered.iter_mut().zip(&other.answered) {
            *a |= *b;
        }
        self.received += other.received;
        self.matched += other.matched;
        self.duplicates += other.duplicates;
        self.unknown += other.unknown;
        self.malformed += other.malformed;
        self.late += other.late;
        self.last_match_ns = self.last_match_ns.max(other.last_match_ns);
        self.tail.merge(&other.tail);
    }

    pub fn matched(&self) -> u64 {
        self.matched
    }

    pub fn latency(&self) -> &Histogram<u64> {
        &self.latency
    }
}

/// Both halves, for a generator that sends and receives on one thread.
#[derive(Clone, Debug)]
pub struct Recorder {
    pub send: SendRecorder,
    pub responses: ResponseRecorder,
}

impl Recorder {
    pub fn for_schedule(cfg: &ScheduleConfig) -> Self {
        Recorder {
            send: SendRecorder::new(),
            responses: ResponseRecorder::for_schedule(cfg),
        }
    }

    pub fn summary(&self, run: &RunInfo, policy: &AdherencePolicy) -> Summary {
        summarize(run, &self.send, &self.responses, policy)
    }
}

/// What the run was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub target_rps: f64,
    pub duration_ns: u64,
    /// Requests the schedule produced (all of which were due within the duration).
    pub scheduled: u64,
}

impl RunInfo {
    /// A run of `schedule` that produced `scheduled` requests.
    pub fn of(schedule: &ScheduleConfig, scheduled: u64) -> RunInfo {
        RunInfo {
            target_rps: schedule.rate_rps,
            duration_ns: schedule.duration_ns,
            scheduled,
        }
    }
}

/// When a generator is judged to have fallen behind its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdherencePolicy {
    /// Fell behind if the p99 of send lateness exceeds this.
    pub max_p99_lateness_ns: u64,
    /// Fell behind if requests went out at less than this fraction of the offered rate.
    pub min_send_ratio: f64,
}

impl Default for AdherencePolicy {
    /// p99 lateness above 10 µs, or sending at under 99% of the offered rate.
    fn default() -> Self {
        AdherencePolicy {
            max_p99_lateness_ns: 10_000,
            min_send_ratio: 0.99,
        }
    }
}

/// The results of a run. Rates are per second; times are nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub target_rps: f64,
    pub duration_s: f64,
    /// Requests the schedule produced.
    pub scheduled: u64,
    /// `scheduled / duration`: the rate this particular schedule asked for (a Poisson
    /// schedule's count is random around the target).
    pub offered_rps: f64,
    /// Requests put on the wire.
    pub sent: u64,
    pub send_errors: u64,
    /// Attempts (sent or failed) over the time from the start to the later of the schedule's
    /// end and the last attempt.
    pub sent_rps: f64,
    /// Everything that arrived, valid or not.
    pub received: u64,
    /// Requests answered in time (the first response to each).
    pub matched: u64,
    pub duplicates: u64,
    /// Responses to ids this run never scheduled, or to an earlier run's requests.
    pub unknown: u64,
    pub malformed: u64,
    /// Responses that arrived after the deadline.
    pub late: u64,
    /// Sent requests with no response by the deadline.
    pub lost: u64,
    /// Matched responses over the time from the start to the later of the schedule's end and
    /// the last match.
    pub achieved_rps: f64,
    /// From scheduled send time to receipt.
    pub latency: Percentiles,
    /// From scheduled to actual send time.
    pub lateness: Percentiles,
    pub fell_behind: bool,
    /// Why the generator is judged to have fallen behind, when it did.
    pub fell_behind_reason: Option<String>,
    /// Where the time of the slowest requests went.
    #[serde(default)]
    pub tail: TailReport,
}

/// Combines both halves into a summary.
pub fn summarize(
    run: &RunInfo,
    send: &SendRecorder,
    resp: &ResponseRecorder,
    policy: &AdherencePolicy,
) -> Summary {
    let secs = |ns: u64| ns as f64 / NS_PER_SEC;
    let duration_s = secs(run.duration_ns);
    let per_s = |n: u64, end_ns: u64| {
        let window = secs(end_ns.max(run.duration_ns));
        if window > 0.0 { n as f64 / window } else { 0.0 }
    };
    let offered_rps = if duration_s > 0.0 {
        run.scheduled as f64 / duration_s
    } else {
        0.0
    };
    let attempts = send.sent + send.errors;
    let sent_rps = per_s(attempts, send.last_actual_ns);
    let lateness = Percentiles::of(&send.lateness);

    let mut reasons = Vec::new();
    if lateness.p99_ns > policy.max_p99_lateness_ns {
        reasons.push(format!(
            "p99 send lateness {} ns > {} ns",
            lateness.p99_ns, policy.max_p99_lateness_ns
        ));
    }
    if sent_rps < policy.min_send_ratio * offered_rps {
        reasons.push(format!(
            "sent {sent_rps:.0}/s < {:.0}% of offered {offered_rps:.0}/s",
            policy.min_send_ratio * 100.0
        ));
    }
    Summary {
        target_rps: run.target_rps,
        duration_s,
        scheduled: run.scheduled,
        offered_rps,
        sent: send.sent,
        send_errors: send.errors,
        sent_rps,
        received: resp.received,
        matched: resp.matched,
        duplicates: resp.duplicates,
        unknown: resp.unknown,
        malformed: resp.malformed,
        late: resp.late,
        lost: send.sent.saturating_sub(resp.matched),
        achieved_rps: per_s(resp.matched, resp.last_match_ns),
        latency: Percentiles::of(&resp.latency),
        lateness,
        fell_behind: !reasons.is_empty(),
        fell_behind_reason: if reasons.is_empty() {
            None
        } else {
            Some(reasons.join("; "))
        },
        tail: resp.tail(),
    }
}

/// Nanoseconds in a short human unit, for one-line summaries.
pub fn human_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.3}s", ns as f64 / 1e9),
    }
}

impl fmt::Display for Summary {
    /// One line: offered and achieved rate, latency percentiles, losses and the verdict.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offered {:.0}/s achieved {:.0}/s | p50 {} p99 {} p99.9 {} max {} | lost {}/{} dup {} unknown {} malformed {} | send lateness p99 {} | fell_behind {}",
            self.offered_rps,
            self.achieved_rps,
            human_ns(self.latency.p50_ns),
            human_ns(self.latency.p99_ns),
            human_ns(self.latency.p999_ns),
            human_ns(self.latency.max_ns),
            self.lost,
            self.sent,
            self.duplicates,
            self.unknown,
            self.malformed,
            human_ns(self.lateness.p99_ns),
            match &self.fell_behind_reason {
                Some(r) => format!("yes ({r})"),
                None => "no".into(),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Arrivals, ScheduleConfig, ServiceDist};
    use std::time::Duration;

    fn within(actual: u64, expected: u64, rel: f64) -> bool {
        (actual as f64 - expected as f64).abs() <= expected as f64 * rel
    }

    #[test]
    fn percentiles_of_a_known_uniform_input() {
        let mut h = new_histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 1000);
        // HDR at 3 significant digits reports within 0.1% (the bucket's highest value).
        assert!(within(p.p50_ns, 500_000, 0.001), "{p:?}");
        assert!(within(p.p90_ns, 900_000, 0.001), "{p:?}");
        assert!(within(p.p99_ns, 990_000, 0.001), "{p:?}");
        assert!(within(p.p999_ns, 999_000, 0.001), "{p:?}");
        assert!(within(p.max_ns, 1_000_000, 0.001), "{p:?}");
        assert!(within(p.min_ns, 1_000, 0.001), "{p:?}");
        assert!((p.mean_ns / 500_500.0 - 1.0).abs() < 0.001, "{p:?}");
        assert_eq!(Percentiles::of(&new_histogram()), Percentiles::default());
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut h = new_histogram();
        h.saturating_record(0);
        h.saturating_record(u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(within(h.max(), HIST_HIGH_NS, 0.001));
    }

    #[test]
    fn latency_is_measured_from_the_scheduled_time_and_includes_lateness() {
        // Constant 1000/s for 1 s; every request goes out 50 us late and the server takes
        // 20 us. Latency must be 70 us, not the 20 us seen from the actual send.
        let cfg = ScheduleConfig::new(1_000.0, Duration::from_secs(1))
            .arrivals(Arrivals::Constant)
            .service(ServiceDist::Constant { ns: 20_000 });
        let mut rec = Recorder::for_schedule(&cfg);
        let mut n = 0;
        for r in cfg.iter() {
            let actual = r.send_ns + 50_000;
            rec.send.record_sent(r.send_ns, actual);
            let out = rec
                .responses
                .record_response(r.id, r.send_ns, actual + r.service_ns as u64);
            assert_eq!(out, Outcome::Matched { latency_ns: 70_000 });
            n += 1;
        }
        let s = rec.summary(&RunInfo::of(&cfg, n), &AdherencePolicy::default());
        assert!(within(s.latency.p50_ns, 70_000, 0.001), "{s:?}");
        assert!(within(s.latency.max_ns, 70_000, 0.001), "{s:?}");
        assert!(within(s.lateness.p99_ns, 50_000, 0.001), "{s:?}");
        assert_eq!((s.matched, s.lost, s.sent), (1000, 0, 1000));
        // 50 us late is over the 10 us p99 bound.
        assert!(s.fell_behind);
        assert!(s.fell_behind_reason.unwrap().contains("lateness"));
    }

    #[test]
    fn on_time_sending_is_not_falling_behind() {
        let cfg = ScheduleConfig::new(10_000.0, Duration::from_secs(1)).seed(4);
        let mut rec = Recorder::for_schedule(&cfg);
        let mut n = 0;
        for r in cfg.iter() {
            rec.send.record_sent(r.send_ns, r.send_ns + 300);
            rec.responses
                .record_response(r.id, r.send_ns, r.send_ns + 10_000);
            n += 1;
        }
        let s = rec.summary(&RunInfo::of(&cfg, n), &AdherencePolicy::default());
        assert!(!s.fell_behind, "{s:?}");
        assert!((s.sent_rps / s.offered_rps - 1.0).abs() < 1e-9);
        assert!((s.achieved_rps / s.offered_rps - 1.0).abs() < 1e-9);
        assert!((s.offered_rps / 10_000.0 - 1.0).abs() < 0.03);
    }

    #[test]
    fn a_generator_that_cannot_keep_up_is_flagged_by_its_send_rate() {
        // Sends can only go out every 2 us but the schedule asks for one every 1 us: every
        // send is late, by more and more, and the sends take twice the duration.
        let cfg = ScheduleConfig::new(1_000_000.0, Duration::from_millis(10))
            .arrivals(Arrivals::Constant);
        let mut send = SendRecorder::new();
        let mut n = 0u64;
        for r in cfg.iter() {
            send.record_sent(r.send_ns, n * 2_000);
            n += 1;
        }
        let resp = ResponseRecorder::for_schedule(&cfg);
        let s = summarize(
            &RunInfo::of(&cfg, n),
            &send,
            &resp,
            &AdherencePolicy::default(),
        );
        assert!(s.fell_behind);
        let reason = s.fell_behind_reason.unwrap();
        assert!(reason.contains("offered"), "{reason}");
        assert!(
            (s.sent_rps / 500_000.0 - 1.0).abs() < 0.01,
            "{}",
            s.sent_rps
        );
        // Nothing came back: everything sent is lost.
        assert_eq!(s.lost, n);
    }

    #[test]
    fn losses_duplicates_unknown_late_and_malformed_are_counted() {
        let cfg = ScheduleConfig::new(1_000.0, Duration::from_secs(1))
            .arrivals(Arrivals::Constant)
            .first_id(500);
        let mut rec = Recorder::for_schedule(&cfg);
        rec.responses.set_deadline(1_100_000_000);
        let mut n = 0;
        for r in cfg.iter() {
            rec.send.record_sent(r.send_ns, r.send_ns);
            n += 1;
            match r.id % 10 {
                // Lost: never answered.
                0 => {}
                // Answered twice.
                1 => {
                    let t = r.send_ns + 1_000;
                    assert!(matches!(
                        rec.responses.record_response(r.id, r.send_ns, t),
                        Outcome::Matched { .. }
                    ));
                    assert_eq!(
                        rec.responses.record_response(r.id, r.send_ns, t + 1),
                        Outcome::Duplicate
                    );
                }
                _ => {
                    rec.responses
                        .record_response(r.id, r.send_ns, r.send_ns + 1_000);
                }
            }
        }
        assert_eq!(rec.responses.record_response(499, 0, 1), Outcome::Unknown);
        assert_eq!(
            rec.responses.record_response(500 + 1000, 0, 1),
            Outcome::Unknown
        );
        assert_eq!(
            rec.responses.record_response(u64::MAX, 0, 1),
            Outcome::Unknown
        );
        rec.responses.record_malformed();
        // A response for a lost request, after the deadline: still lost.
        assert_eq!(
            rec.responses
                .record_response(510, 10_000_000, 1_200_000_000),
            Outcome::Late
        );
        assert!(!rec.responses.is_answered(510));
        assert!(rec.responses.is_answered(511));

        let s = rec.summary(&RunInfo::of(&cfg, n), &AdherencePolicy::default());
        assert_eq!(s.sent, 1000);
        assert_eq!(s.lost, 100);
        assert_eq!(s.matched, 900);
        assert_eq!(s.duplicates, 100);
        assert_eq!(s.unknown, 3);
        assert_eq!(s.malformed, 1);
        assert_eq!(s.late, 1);
        assert_eq!(s.received, 900 + 100 + 3 + 1 + 1);
        assert_eq!(s.latency.count, 900);
        let json = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        let line = s.to_string();
        assert!(line.contains("lost 100/1000"), "{line}");
    }

    #[test]
    fn send_errors_count_as_attempts_but_not_as_sent() {
        let mut send = SendRecorder::new();
        send.record_sent(0, 10);
        send.record_send_error(100, 150);
        assert_eq!((send.sent(), send.send_errors()), (1, 1));
        assert_eq!(send.lateness().len(), 2);
        assert_eq!(send.last_actual_ns(), 150);
    }

    #[test]
    fn halves_from_several_threads_merge() {
        let cfg = ScheduleConfig::new(1_000.0, Duration::from_secs(1)).arrivals(Arrivals::Constant);
        let mut one = Recorder::for_schedule(&cfg);
        let mut parts = [Recorder::for_schedule(&cfg), Recorder::for_schedule(&cfg)];
        let mut n = 0;
        for r in cfg.iter() {
            n += 1;
            let part = &mut parts[(r.id % 2) as usize];
            for rec in [&mut one, part] {
                rec.send.record_sent(r.send_ns, r.send_ns + r.id);
                if r.id % 5 != 0 {
                    rec.responses
                        .record_response(r.id, r.send_ns, r.send_ns + 1_000 + r.id);
                }
            }
        }
        let [mut a, b] = parts;
        a.send.merge(&b.send);
        a.responses.merge(&b.responses);
        let info = RunInfo::of(&cfg, n);
        let policy = AdherencePolicy::default();
        assert_eq!(a.summary(&info, &policy), one.summary(&info, &policy));
        assert!(a.responses.is_answered(7) && !a.responses.is_answered(10));
    }

    #[test]
    fn human_units() {
        assert_eq!(human_ns(999), "999ns");
        assert_eq!(human_ns(12_345), "12.3us");
        assert_eq!(human_ns(1_500_000), "1.50ms");
        assert_eq!(human_ns(2_000_000_000), "2.000s");
    }
}
