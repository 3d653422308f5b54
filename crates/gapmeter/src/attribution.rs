//! What took the CPU during each gap: the kernel's own trace of that CPU (interrupt handlers,
//! softirqs, the APIC vectors' handlers, and the threads switched in while the loop was out),
//! laid over the loop's gaps. Time inside a gap that no traced activity of the guest covers is
//! "unseen": the host took the vCPU (a VM exit, or the vCPU not scheduled), or the entry and
//! exit code around a handler ran, which is untraced and, on a VM, mostly the exit itself.
//!
//! Pure: it reads the text of tracefs's `per_cpu/cpuN/trace` with the `mono` trace clock (the
//! clock the loop reads), so it is tested off the machine.

use std::collections::HashMap;

use serde_json::{Value, json};

/// One gap of the loop: from the last clock read before it to the first after, both
/// `CLOCK_MONOTONIC` nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What a trace line says happened on the CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A handler began: an interrupt (`irq N name`), a softirq, an APIC vector, an NMI.
    Enter(String),
    /// The handler of that name ended.
    Exit(String),
    /// The loop's thread was switched out and this one in.
    SwitchAway(String),
    /// The loop's thread was switched back in.
    SwitchBack,
    /// While the loop was out, another thread was switched in.
    SwitchOther(String),
}

/// A trace event at `at_ns` (`CLOCK_MONOTONIC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub at_ns: u64,
    pub what: What,
}

/// The name an unseen stretch is reported under.
pub const UNSEEN: &str = "unseen (the host, or handler entry and exit)";

/// The tracefs events this reads, as `group/event`.
pub const EVENTS: &[&str] = &[
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq_vectors/local_timer_entry",
    "irq_vectors/local_timer_exit",
    "irq_vectors/reschedule_entry",
    "irq_vectors/reschedule_exit",
    "irq_vectors/call_function_entry",
    "irq_vectors/call_function_exit",
    "irq_vectors/call_function_single_entry",
    "irq_vectors/call_function_single_exit",
    "irq_vectors/irq_work_entry",
    "irq_vectors/irq_work_exit",
    "irq_vectors/spurious_apic_entry",
    "irq_vectors/spurious_apic_exit",
    "irq_vectors/thermal_apic_entry",
    "irq_vectors/thermal_apic_exit",
    "sched/sched_switch",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
];

/// `key=value` from an event's fields; values end at the next space, except `[action=X]`.
fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let start = fields
        .match_indices(key)
        .find(|(i, _)| {
            *i == 0 || fields.as_bytes()[i - 1] == b' ' || fields.as_bytes()[i - 1] == b'['
        })
        .map(|(i, _)| i + key.len())?;
    let rest = fields[start..]
        .strip_prefix('=')
        .or_else(|| fields[start..].strip_prefix(' '))?;
    Some(rest.split([' ', ']']).next().unwrap_or(rest))
}

/// Parses `12105.168071` (seconds, with up to nine decimals) into nanoseconds.
fn parse_timestamp(text: &str) -> Option<u64> {
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = seconds.parse().ok()?;
    let mut nanos: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    for _ in fraction.len()..9 {
        nanos *= 10;
    }
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// Parses one line of tracefs's text output; `None` for comments and events this does not
/// read. `loop_tid` is the loop's thread, which `sched_switch` names.
pub fn parse_line(line: &str, loop_tid: u32) -> Option<TraceEvent> {
    if line.trim_start().starts_with('#') {
        return None;
    }
    // "TASK-PID [CPU] FLAGS TIMESTAMP: EVENT: FIELDS"; the task's name may hold anything, so
    // the fields are found after the CPU's closing bracket.
    let after_cpu = &line[line.find("] ")? + 2..];
    let mut words = after_cpu.splitn(3, ' ');
    let _flags = words.next()?;
    let timestamp = words.next()?.strip_suffix(':')?;
    let rest = words.next()?;
    let (event, fields) = rest
        .split_once(": ")
        .unwrap_or((rest.trim_end_matches(':'), ""));
    let at_ns = parse_timestamp(timestamp)?;
    let what = match event {
        "irq_handler_entry" => What::Enter(format!(
            "irq {} {}",
            field(fields, "irq")?,
            field(fields, "name").unwrap_or("?")
        )),
        // The exit names the IRQ but not the handler: the open entry of that IRQ ends.
        "irq_handler_exit" => What::Exit(format!("irq {} ", field(fields, "irq")?)),
        "softirq_entry" => What::Enter(format!("softirq {}", field(fields, "action")?)),
        // A kworker's turn is split by the work it runs.
        "workqueue_execute_start" => What::Enter(format!("work {}", field(fields, "function")?)),
        "workqueue_execute_end" => What::Exit(format!("work {}", field(fields, "function")?)),
        "softirq_exit" => What::Exit(format!("softirq {}", field(fields, "action")?)),
        "sched_switch" => {
            let prev: u32 = field(fields, "prev_pid")?.parse().ok()?;
            let next: u32 = field(fields, "next_pid")?.parse().ok()?;
            let next_comm = field(fields, "next_comm").unwrap_or("?");
            if prev == loop_tid && next != loop_tid {
                What::SwitchAway(format!("thread {next_comm}"))
            } else if next == loop_tid && prev != loop_tid {
                What::SwitchBack
            } else {
                What::SwitchOther(format!("thread {next_comm}"))
            }
        }
        vector => {
            if let Some(name) = vector.strip_suffix("_entry") {
                What::Enter(format!("vector {name}"))
            } else if let Some(name) = vector.strip_suffix("_exit") {
                What::Exit(format!("vector {name}"))
            } else {
                return None;
            }
        }
    };
    Some(TraceEvent { at_ns, what })
}

/// A stretch of the CPU's time that one traced activity had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start_ns: u64,
    pub end_ns: u64,
    pub cause: String,
}

/// The CPU's traced activities as non-overlapping stretches, the innermost one winning: a
/// handler nested in another thread's turn owns its own time. Events must be in time order.
/// An exit without its entry (entered before the trace began) and an entry without its exit
/// (still running at its end) cover nothing before the trace or after it.
pub fn segments(events: &[TraceEvent]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    let mut handlers: Vec<String> = Vec::new();
    let mut other_thread: Option<String> = None;
    let mut last_ns: Option<u64> = None;
    for event in events {
        if let Some(last) = last_ns
            && event.at_ns > last
            && let Some(cause) = handlers.last().or(other_thread.as_ref())
        {
            match out.last_mut() {
                Some(s) if s.end_ns == last && s.cause == *cause => s.end_ns = event.at_ns,
                _ => out.push(Segment {
                    start_ns: last,
                    end_ns: event.at_ns,
                    cause: cause.clone(),
                }),
            }
        }
        last_ns = Some(last_ns.map_or(event.at_ns, |l| l.max(event.at_ns)));
        match &event.what {
            What::Enter(cause) => handlers.push(cause.clone()),
            What::Exit(cause) => {
                if let Some(i) = handlers.iter().rposition(|h| h.starts_with(cause.as_str())) {
                    handlers.remove(i);
                }
            }
            What::SwitchAway(thread) => other_thread = Some(thread.clone()),
            What::SwitchOther(thread) => {
                if other_thread.is_some() {
                    other_thread = Some(thread.clone());
                }
            }
            What::SwitchBack => other_thread = None,
        }
    }
    out
}

/// Totals for one cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CauseTotal {
    /// Gaps it had some of.
    pub gaps: u64,
    /// Its time inside gaps.
    pub ns: u64,
    /// Long gaps in which it had the most time.
    pub long_gaps_led: u64,
}

/// What took the loop's CPU, over all its gaps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attribution {
    /// By cause, most time first; [`UNSEEN`] among them.
    pub causes: Vec<(String, CauseTotal)>,
    pub gaps: u64,
    pub lost_ns: u64,
    /// The [`LONGEST_SHOWN`] longest gaps, longest first, each with its causes' time, most
    /// first.
    pub longest: Vec<(Gap, Vec<(String, u64)>)>,
}

/// How many of the longest gaps an [`Attribution`] breaks down one by one.
pub const LONGEST_SHOWN: usize = 5;

impl Attribution {
    /// The share of the lost time `cause` had.
    pub fn share(&self, cause: &str) -> f64 {
        let ns = self
            .causes
            .iter()
            .find(|(c, _)| c == cause)
            .map_or(0, |(_, t)| t.ns);
        if self.lost_ns == 0 {
            0.0
        } else {
            ns as f64 / self.lost_ns as f64
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "gaps": self.gaps,
            "lost_ns": self.lost_ns,
            "causes": self.causes.iter().map(|(cause, t)| json!({
                "cause": cause,
                "gaps": t.gaps,
                "ns": t.ns,
                "long_gaps_led": t.long_gaps_led,
            })).collect::<Vec<_>>(),
            "longest": self.longest.iter().map(|(gap, causes)| json!({
                "start_ns": gap.start_ns,
                "ns": gap.end_ns - gap.start_ns,
                "causes": causes.iter().map(|(c, ns)| json!({"cause": c, "ns": ns}))
                    .collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Lays `segments` (in order, not overlapping) over `gaps` (in order): each gap's time goes to
/// the causes that had it, the rest to [`UNSEEN`]. A gap of `long_ns` or more is led by the
/// cause with the most of its time.
pub fn attribute(gaps: &[Gap], segments: &[Segment], long_ns: u64) -> Attribution {
    let mut totals: HashMap<String, CauseTotal> = HashMap::new();
    let mut longest: Vec<(Gap, Vec<(String, u64)>)> = Vec::new();
    let mut first = 0;
    let mut lost_ns = 0;
    for gap in gaps {
        let length = gap.end_ns.saturating_sub(gap.start_ns);
        lost_ns += length;
        while first < segments.len() && segments[first].end_ns <= gap.start_ns {
            first += 1;
        }
        let mut in_gap: HashMap<&str, u64> = HashMap::new();
        for s in segments[first..]
            .iter()
            .take_while(|s| s.start_ns < gap.end_ns)
        {
            let overlap = s
                .end_ns
                .min(gap.end_ns)
                .saturating_sub(s.start_ns.max(gap.start_ns));
            if overlap > 0 {
                *in_gap.entry(&s.cause).or_default() += overlap;
            }
        }
        let seen: u64 = in_gap.values().sum();
        let unseen = length.saturating_sub(seen);
        if unseen > 0 {
            in_gap.insert(UNSEEN, unseen);
        }
        let leader = (length >= long_ns)
            .then(|| {
                in_gap
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                    .map(|(c, _)| c.to_string())
            })
            .flatten();
        let shortest_kept = longest.last().map(|(g, _)| g.end_ns - g.start_ns);
        if longest.len() < LONGEST_SHOWN || shortest_kept.is_some_and(|l| length > l) {
            let mut causes: Vec<(String, u64)> =
                in_gap.iter().map(|(c, ns)| (c.to_string(), *ns)).collect();
            causes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let at = longest.partition_point(|(g, _)| g.end_ns - g.start_ns >= length);
            longest.insert(at, (*gap, causes));
            longest.truncate(LONGEST_SHOWN);
        }
        for (cause, ns) in in_gap {
            let t = totals.entry(cause.to_owned()).or_default();
            t.gaps += 1;
            t.ns += ns;
        }
        if let Some(leader) = leader {
            totals.entry(leader).or_default().long_gaps_led += 1;
        }
    }
    let mut causes: Vec<(String, CauseTotal)> = totals.into_iter().collect();
    causes.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then_with(|| a.0.cmp(&b.0)));
    Attribution {
        causes,
        gaps: gaps.len() as u64,
        lost_ns,
        longest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LOOP: u32 = 4242;

    fn parse(line: &str) -> TraceEvent {
        parse_line(line, LOOP).unwrap_or_else(|| panic!("{line}"))
    }

    #[test]
    fn trace_lines_parse_as_tracefs_writes_them() {
        let e = parse(
            "          <idle>-0       [000] d.h1. 12105.168071: local_timer_entry: vector=236",
        );
        assert_eq!(e.at_ns, 12_105_168_071_000);
        assert_eq!(e.what, What::Enter("vector local_timer".into()));
        let e =
            parse(" corral-gapmeter-4242 [000] d.h1. 12105.168137: local_timer_exit: vector=236");
        assert_eq!(e.what, What::Exit("vector local_timer".into()));
        let e = parse("  a b-c [x]-9   [000] ..s1. 1.000000001: softirq_entry: vec=9 [action=RCU]");
        assert_eq!(e.at_ns, 1_000_000_001);
        assert_eq!(e.what, What::Enter("softirq RCU".into()));
        let e = parse("   x-1 [000] ..s1. 2.5: softirq_exit: vec=9 [action=RCU]");
        assert_eq!(
            (e.at_ns, e.what),
            (2_500_000_000, What::Exit("softirq RCU".into()))
        );
        let e = parse("   x-1 [000] d.h1. 3.000001: irq_handler_entry: irq=24 name=ACPI:Ged");
        assert_eq!(e.what, What::Enter("irq 24 ACPI:Ged".into()));
        let e = parse("   x-1 [000] d.h1. 3.000002: irq_handler_exit: irq=24 ret=handled");
        assert_eq!(e.what, What::Exit("irq 24 ".into()));
        let away = "gm-4242 [000] d..2. 4.0: sched_switch: prev_comm=gm prev_pid=4242 prev_prio=50 \
                    prev_state=R+ ==> next_comm=kworker/0:1 next_pid=77 next_prio=49";
        assert_eq!(
            parse(away).what,
            What::SwitchAway("thread kworker/0:1".into())
        );
        let back = "k-77 [000] d..2. 4.1: sched_switch: prev_comm=kworker/0:1 prev_pid=77 \
                    prev_prio=49 prev_state=I ==> next_comm=gm next_pid=4242 next_prio=50";
        assert_eq!(parse(back).what, What::SwitchBack);
        let other = "k-77 [000] d..2. 4.1: sched_switch: prev_comm=k prev_pid=77 prev_prio=49 \
                     prev_state=I ==> next_comm=sh next_pid=78 next_prio=120";
        assert_eq!(parse(other).what, What::SwitchOther("thread sh".into()));
        let work = "k-77 [000] ..... 5.0: workqueue_execute_start: work struct 00000000a1b2c3d4: \
                    function vmstat_update";
        assert_eq!(parse(work).what, What::Enter("work vmstat_update".into()));
        let done = "k-77 [000] ..... 5.1: workqueue_execute_end: work struct 00000000a1b2c3d4: \
                    function vmstat_update";
        assert_eq!(parse(done).what, What::Exit("work vmstat_update".into()));
        assert_eq!(parse_line("# tracer: nop", LOOP), None);
        assert_eq!(
            parse_line("x-1 [000] d.h1. 3.0: softirq_raise: vec=9", LOOP),
            None
        );
        assert_eq!(
            parse_line("x-1 [000] d.h1. 3.0000000001: local_timer_entry: v", LOOP),
            None
        );
        assert_eq!(parse_line("garbage", LOOP), None);
    }

    fn ev(at_ns: u64, what: What) -> TraceEvent {
        TraceEvent { at_ns, what }
    }

    #[test]
    fn the_innermost_activity_owns_its_time() {
        let events = [
            ev(100, What::SwitchAway("thread sh".into())),
            ev(150, What::Enter("vector local_timer".into())),
            ev(160, What::Enter("softirq RCU".into())),
            ev(170, What::Exit("softirq RCU".into())),
            ev(180, What::Exit("vector local_timer".into())),
            ev(300, What::SwitchOther("thread kworker".into())),
            ev(350, What::SwitchBack),
            ev(400, What::Enter("irq 24 x".into())),
            ev(410, What::Exit("irq 24 ".into())),
        ];
        let s = segments(&events);
        let seg = |a, b, c: &str| Segment {
            start_ns: a,
            end_ns: b,
            cause: c.into(),
        };
        assert_eq!(
            s,
            vec![
                seg(100, 150, "thread sh"),
                seg(150, 160, "vector local_timer"),
                seg(160, 170, "softirq RCU"),
                seg(170, 180, "vector local_timer"),
                seg(180, 300, "thread sh"),
                seg(300, 350, "thread kworker"),
                seg(400, 410, "irq 24 x"),
            ]
        );
        // An exit whose entry the trace missed covers nothing.
        assert!(
            segments(&[
                ev(5, What::Exit("softirq RCU".into())),
                ev(9, What::SwitchBack)
            ])
            .is_empty()
        );
    }

    #[test]
    fn gaps_are_split_among_causes_and_the_rest_is_unseen() {
        let seg = |a, b, c: &str| Segment {
            start_ns: a,
            end_ns: b,
            cause: c.into(),
        };
        let segments = [
            seg(100, 150, "thread sh"),
            seg(150, 160, "vector t"),
            seg(900, 950, "vector t"),
        ];
        let gaps = [
            Gap {
                start_ns: 90,
                end_ns: 170,
            }, // 50 sh, 10 t, 20 unseen
            Gap {
                start_ns: 500,
                end_ns: 800,
            }, // all unseen, long
            Gap {
                start_ns: 890,
                end_ns: 960,
            }, // 50 t, 20 unseen
        ];
        let a = attribute(&gaps, &segments, 100);
        assert_eq!((a.gaps, a.lost_ns), (3, 80 + 300 + 70));
        let get = |c: &str| a.causes.iter().find(|(n, _)| n == c).unwrap().1.clone();
        assert_eq!(
            get(UNSEEN),
            CauseTotal {
                gaps: 3,
                ns: 340,
                long_gaps_led: 1
            }
        );
        assert_eq!(
            get("thread sh"),
            CauseTotal {
                gaps: 1,
                ns: 50,
                long_gaps_led: 0
            }
        );
        assert_eq!(
            get("vector t"),
            CauseTotal {
                gaps: 2,
                ns: 60,
                long_gaps_led: 0
            }
        );
        assert_eq!(a.causes[0].0, UNSEEN, "most time first");
        assert!((a.share(UNSEEN) - 340.0 / 450.0).abs() < 1e-12);
        let longest: Vec<u64> = a
            .longest
            .iter()
            .map(|(g, _)| g.end_ns - g.start_ns)
            .collect();
        assert_eq!(longest, [300, 80, 70]);
        assert_eq!(
            a.longest[1].1,
            [
                ("thread sh".to_string(), 50),
                (UNSEEN.to_string(), 20),
                ("vector t".to_string(), 10)
            ]
        );
        assert_eq!(attribute(&[], &segments, 100).lost_ns, 0);
    }

    proptest! {
        #[test]
        fn parsing_never_panics(line in "[ -~]{0,120}") {
            let _ = parse_line(&line, LOOP);
        }

        #[test]
        fn attributed_time_adds_up_to_the_gaps(
            cuts in proptest::collection::btree_set(0u64..10_000, 0..40),
            gap_cuts in proptest::collection::btree_set(0u64..10_000, 0..40),
        ) {
            let cuts: Vec<u64> = cuts.into_iter().collect();
            let segments: Vec<Segment> = cuts.chunks_exact(2).enumerate().map(|(i, c)| Segment {
                start_ns: c[0], end_ns: c[1], cause: format!("c{}", i % 3),
            }).collect();
            let gap_cuts: Vec<u64> = gap_cuts.into_iter().collect();
            let gaps: Vec<Gap> = gap_cuts.chunks_exact(2)
                .map(|c| Gap { start_ns: c[0], end_ns: c[1] }).collect();
            let a = attribute(&gaps, &segments, 500);
            let total: u64 = a.causes.iter().map(|(_, t)| t.ns).sum();
            prop_assert_eq!(total, a.lost_ns);
            let kept: Vec<u64> = a.longest.iter().map(|(g, _)| g.end_ns - g.start_ns).collect();
            let mut lengths: Vec<u64> = gaps.iter().map(|g| g.end_ns - g.start_ns).collect();
            lengths.sort_unstable_by(|a, b| b.cmp(a));
            lengths.truncate(LONGEST_SHOWN);
            prop_assert_eq!(kept, lengths);
            let led: u64 = a.causes.iter().map(|(_, t)| t.long_gaps_led).sum();
            let long = gaps.iter().filter(|g| g.end_ns - g.start_ns >= 500).count() as u64;
            prop_assert_eq!(led, long);
        }
    }
}
