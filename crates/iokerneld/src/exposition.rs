//! The statistics in the Prometheus text exposition format (version 0.0.4), for
//! `iokerneld stats --format prometheus` and the `/metrics` endpoint.
//!
//! Every number of the statistics JSON has a sample here, mapped by hand: names `corral_...` in
//! snake case with the unit last (`_seconds`, `_bytes`, `_frames`) and `_total` on counters;
//! times the JSON gives in microseconds or nanoseconds are written in seconds, exactly (as
//! decimals, not through a float). What varies along one dimension is a label of one family:
//! `runtime` (its name) with `runtime_id` (its id, since two runtimes may share a name),
//! `core` (the CPU), `reason` (why frames were dropped, why a kthread was kicked), `direction`
//! (of a fault injector). Text that identifies something is a label of an `_info` gauge
//! (always 1); the one free-text field, `last_refusal`, stays in the JSON.
//!
//! A runtime's `net.*` counters are its `packets` counters again and are written once. The
//! counters a runtime reports about itself (`reported`) keep the runtime's own names, under
//! `corral_runtime_reported_`: they are untrusted, as in the JSON.

use std::collections::HashMap;
use std::fmt::Write as _;

use corral_iokernel::daemon::{NetStats, RuntimeStats, Stats};

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A sample's value, kept in the unit the statistics have until it is written.
#[derive(Clone, Copy, Debug)]
enum Value {
    Count(u64),
    Float(f64),
    /// Microseconds, written as seconds.
    Micros(u64),
    /// Nanoseconds, written as seconds.
    Nanos(u64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Count(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Count(v as u64)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Count(u64::from(v))
    }
}

impl From<u16> for Value {
    fn from(v: u16) -> Self {
        Value::Count(u64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Count(u64::from(v))
    }
}

/// `whole.fraction` with `digits` fraction digits, trailing zeros (and a bare point) dropped.
fn decimal(out: &mut String, whole: u64, fraction: u64, digits: usize) {
    let _ = write!(out, "{whole}");
    if fraction != 0 {
        let text = format!("{fraction:0digits$}");
        out.push('.');
        out.push_str(text.trim_end_matches('0'));
    }
}

fn write_value(out: &mut String, value: Value) {
    match value {
        Value::Count(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Float(v) if v.is_nan() => out.push_str("NaN"),
        Value::Float(v) if v.is_infinite() => {
            out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        }
        // Rust writes the shortest text that reads back as the same float, never with an
        // exponent.
        Value::Float(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Micros(us) => decimal(out, us / 1_000_000, us % 1_000_000, 6),
        Value::Nanos(ns) => decimal(out, ns / 1_000_000_000, ns % 1_000_000_000, 9),
    }
}

/// Appends `value` as a label value: backslash, double quote and line feed escaped as `\\`,
/// `\"` and `\n`, everything else as it is (runtime names are chosen by whoever registers).
pub fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends `text` as a HELP text: backslash and line feed escaped.
fn escape_help(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `text` as part of a metric name: anything but ASCII letters, digits and `_` becomes `_`.
fn name_part(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

type Labels = Vec<(&'static str, String)>;

struct Family {
    name: String,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Labels, Value)>,
}

/// Families in the order they were first named, each with its samples together, as the format
/// requires.
#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
}

impl Exposition {
    fn add(
        &mut self,
        name: &str,
        kind: Kind,
        help: &'static str,
        labels: Labels,
        value: impl Into<Value>,
    ) {
        let index = match self.by_name.get(name) {
            Some(&index) => index,
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.by_name
                    .insert(name.to_owned(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let family = &mut self.families[index];
        debug_assert_eq!(family.kind, kind, "{name} named with two types");
        family.samples.push((labels, value.into()));
    }

    fn counter(&mut self, name: &str, help: &'static str, labels: Labels, value: impl Into<Value>) {
        debug_assert!(name.ends_with("_total"), "counter {name} without _total");
        self.add(name, Kind::Counter, help, labels, value);
    }

    fn gauge(&mut self, name: &str, help: &'static str, labels: Labels, value: impl Into<Value>) {
        self.add(name, Kind::Gauge, help, labels, value);
    }

    fn render(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        for family in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let _ = write!(out, "# HELP {} ", family.name);
            escape_help(&mut out, family.help);
            let _ = writeln!(out, "\n# TYPE {} {}", family.name, family.kind.name());
            for (labels, value) in &family.samples {
                out.push_str(&family.name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (key, value)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(key);
                        out.push_str("=\"");
                        escape_label_value(&mut out, value);
                        out.push('"');
                    }
                    out.push('}');
                }
                out.push(' ');
                write_value(&mut out, *value);
                out.push('\n');
            }
        }
        out
    }
}

fn with(labels: &Labels, more: &[(&'static str, &str)]) -> Labels {
    let mut all = labels.clone();
    all.extend(more.iter().map(|&(k, v)| (k, v.to_owned())));
    all
}

/// The packet counters kept for the switch as a whole (`prefix` `corral_switch`) and for each
/// runtime (`corral_runtime`). Every drop reason, the switch's own and the steering parse's
/// (two sets with no name in common), is one `reason` of one family.
fn packet_counters(e: &mut Exposition, prefix: &str, labels: &Labels, net: &NetStats) {
    let counters: [(&str, &'static str, u64); 7] = [
        (
            "rx_frames_total",
            "Frames steered to a runtime.",
            net.rx_packets,
        ),
        (
            "rx_bytes_total",
            "Bytes of the frames steered to a runtime.",
            net.rx_bytes,
        ),
        (
            "tx_frames_total",
            "Frames sent on to the NIC or another runtime.",
            net.tx_packets,
        ),
        (
            "tx_bytes_total",
            "Bytes of the frames sent on.",
            net.tx_bytes,
        ),
        (
            "local_switched_frames_total",
            "Frames sent from one runtime to another (or itself) without the NIC.",
            net.local_switched,
        ),
        (
            "rx_buffer_posts_total",
            "Receive buffers posted by runtimes.",
            net.rx_buffer_posts,
        ),
        (
            "rx_backlogged_frames_total",
            "Frames held in a runtime's backlog (its buffers or ring were full) before delivery.",
            net.rx_backlogged,
        ),
    ];
    for (suffix, help, value) in counters {
        e.counter(&format!("{prefix}_{suffix}"), help, labels.clone(), value);
    }
    let dropped = format!("{prefix}_dropped_frames_total");
    for (reason, &value) in net.drops.iter().chain(&net.rx_parse_drops) {
        e.counter(
            &dropped,
            "Frames dropped by the switch, by reason: the switch's own (rx_*, tx_*, \
             nic_send_failed) and the steering parse's (truncated, bad_*, unsupported_*...).",
            with(labels, &[("reason", reason)]),
            value,
        );
    }
}

/// What a runtime reports about itself, under its own names: `tcp.drops.REASON` as the
/// `reason` of one family, the two levels as gauges, the time of the report in seconds.
fn reported(e: &mut Exposition, labels: &Labels, name: &str, value: u64) {
    const HELP: &str = "Counted by the runtime itself (untrusted), by its own name.";
    if let Some(reason) = name.strip_prefix("tcp.drops.") {
        e.counter(
            "corral_runtime_reported_tcp_dropped_segments_total",
            "TCP segments the runtime dropped, by its reason (reported by the runtime, untrusted).",
            with(labels, &[("reason", reason)]),
            value,
        );
        return;
    }
    match name {
        "published_at_ns" => e.gauge(
            "corral_runtime_reported_published_at_seconds",
            "CLOCK_MONOTONIC time of the runtime's last report of its counters.",
            labels.clone(),
            Value::Nanos(value),
        ),
        "tcp.established_now" => e.gauge(
            "corral_runtime_reported_tcp_established_connections",
            "TCP connections established now (reported by the runtime, untrusted).",
            labels.clone(),
            value,
        ),
        "tcp.table_peak" => e.gauge(
            "corral_runtime_reported_tcp_table_peak_connections",
            "Most TCP connections the runtime's table held at once (reported, untrusted).",
            labels.clone(),
            value,
        ),
        "tcp.bytes_in" => e.counter(
            "corral_runtime_reported_tcp_in_bytes_total",
            "TCP payload bytes received (reported by the runtime, untrusted).",
            labels.clone(),
            value,
        ),
        "tcp.bytes_out" => e.counter(
            "corral_runtime_reported_tcp_out_bytes_total",
            "TCP payload bytes sent (reported by the runtime, untrusted).",
            labels.clone(),
            value,
        ),
        other => e.counter(
            &format!("corral_runtime_reported_{}_total", name_part(other)),
            HELP,
            labels.clone(),
            value,
        ),
    }
}

fn runtime(e: &mut Exposition, r: &RuntimeStats) {
    let labels: Labels = vec![
        ("runtime", r.name.clone()),
        ("runtime_id", r.id.to_string()),
    ];
    let mut info = with(
        &labels,
        &[("pid", &r.pid.to_string()), ("preemption", &r.preemption)],
    );
    if let Some(net) = &r.net {
        info.push(("mac", net.mac.clone()));
        info.push(("ipv4", net.ipv4.clone()));
    }
    e.gauge(
        "corral_runtime_info",
        "A registered runtime: its process, how it is preempted, its addresses; always 1.",
        info,
        1u64,
    );
    let l = || labels.clone();
    e.gauge(
        "corral_runtime_kthreads",
        "Kthreads the runtime registered.",
        l(),
        r.kthreads,
    );
    e.gauge(
        "corral_runtime_active_kthreads",
        "Its kthreads that are active now (those frames are steered to).",
        l(),
        r.active_kthreads.len(),
    );
    e.gauge(
        "corral_runtime_guaranteed_cores",
        "Cores the runtime is guaranteed.",
        l(),
        r.guaranteed_cores,
    );
    e.gauge(
        "corral_runtime_max_cores",
        "Most cores the runtime may hold.",
        l(),
        r.max_cores,
    );
    e.gauge(
        "corral_runtime_cores_held",
        "Cores its kthreads run on now, including any being taken back.",
        l(),
        r.cores_held,
    );
    e.gauge(
        "corral_runtime_cores_handing_over",
        "Cores being taken back from the runtime now.",
        l(),
        r.cores_handing_over,
    );
    e.gauge(
        "corral_runtime_waiting",
        "1 if the runtime waits for a core now.",
        l(),
        r.waiting,
    );
    let counters: [(&str, &'static str, u64); 15] = [
        (
            "corral_runtime_grants_total",
            "Cores granted to the runtime.",
            r.grants,
        ),
        (
            "corral_runtime_preemptions_total",
            "Cores taken back from the runtime.",
            r.preemptions_suffered,
        ),
        (
            "corral_runtime_preemption_signals_total",
            "Preemption signals sent to its kthreads.",
            r.preempt_signals,
        ),
        (
            "corral_runtime_preemption_signals_at_once_total",
            "Preemption signals sent with the request for the core, with no grace period.",
            r.preempt_signals_at_once,
        ),
        (
            "corral_runtime_cooperative_cedes_total",
            "Preemptions it answered within the grace period, with no signal.",
            r.cedes_cooperative,
        ),
        (
            "corral_runtime_handover_samples_total",
            "Preemptions timed from signal to handler to park.",
            r.handover.samples,
        ),
        (
            "corral_runtime_handover_unstamped_total",
            "Preemptions whose handler time stamp was missing or out of order.",
            r.handover.unstamped,
        ),
        (
            "corral_runtime_parks_total",
            "Cores its kthreads gave back.",
            r.parks,
        ),
        (
            "corral_runtime_congestion_detections_total",
            "Allocation passes that found the runtime congested.",
            r.congestion_detections,
        ),
        (
            "corral_runtime_timer_wakeups_total",
            "Times its due timer made iokerneld ask for a core for it.",
            r.timer_wakeups,
        ),
        (
            "corral_runtime_cores_taken_in_place_total",
            "Cores taken from its kthreads by waking the taker on top of them (idle class, or \
             after a missed grace period).",
            r.taken_in_place,
        ),
        (
            "corral_runtime_cores_taken_in_place_after_grace_total",
            "Of those, cores taken after its kthread missed the grace period, for a taker that \
             runs above it.",
            r.taken_in_place_after_grace,
        ),
        (
            "corral_runtime_acks_left_waiting_total",
            "Bare TCP ACKs left on its rings without asking for a core (ack_wait_us).",
            r.acks_left_waiting,
        ),
        (
            "corral_runtime_ack_waits_expired_total",
            "Times such ACKs waited ack_wait_us and a core was asked for them.",
            r.ack_waits_expired,
        ),
        (
            "corral_runtime_demotions_total",
            "Its kthreads moved off the managed cores for keeping a core past the timeout.",
            r.demotions,
        ),
    ];
    for (name, help, value) in counters {
        e.counter(name, help, l(), value);
    }
    e.counter(
        "corral_runtime_stale_commands_total",
        "Park or yield commands from its kthreads that held no core.",
        l(),
        r.stale_commands,
    );
    for (reason, value) in [
        ("ingress", r.kicks_ingress),
        ("timer", r.kicks_timer),
        ("run_queue", r.kicks_run_queue),
    ] {
        e.counter(
            "corral_runtime_kicks_total",
            "Signals sent to its kthreads with no request for the core, by reason: an ingress \
             item, an overdue timer or a runnable uthread waiting a whole period.",
            with(&labels, &[("reason", reason)]),
            value,
        );
    }
    e.gauge(
        "corral_runtime_preemption_latency_last_seconds",
        "From a preemption's signal to the kthread's park, the last time.",
        l(),
        Value::Nanos(r.preemption_latency_last_ns),
    );
    e.gauge(
        "corral_runtime_preemption_latency_max_seconds",
        "From a preemption's signal to the kthread's park, the longest.",
        l(),
        Value::Nanos(r.preemption_latency_max_ns),
    );
    for (quantile, signal, park) in [
        ("0.5", r.handover.signal_p50_ns, r.handover.park_p50_ns),
        ("0.99", r.handover.signal_p99_ns, r.handover.park_p99_ns),
    ] {
        e.gauge(
            "corral_runtime_handover_signal_seconds",
            "From iokerneld's preemption signal to the kthread's handler, by quantile (0 \
             with no samples).",
            with(&labels, &[("quantile", quantile)]),
            Value::Nanos(signal),
        );
        e.gauge(
            "corral_runtime_handover_park_seconds",
            "From the kthread's signal handler to iokerneld seeing it park, by quantile (0 \
             with no samples).",
            with(&labels, &[("quantile", quantile)]),
            Value::Nanos(park),
        );
    }
    if let Some(net) = &r.net {
        e.gauge(
            "corral_runtime_rx_buffers_posted",
            "Receive buffers posted and not yet filled, over all its kthreads.",
            l(),
            net.rx_buffers_posted,
        );
        e.gauge(
            "corral_runtime_rx_backlog_frames",
            "Frames held for it in iokerneld's backlog now.",
            l(),
            net.rx_backlog_held,
        );
        e.gauge(
            "corral_runtime_rx_backlog_high_water_frames",
            "The most frames held for it at once.",
            l(),
            net.rx_backlog_high_water,
        );
        e.gauge(
            "corral_runtime_rx_backlog_capacity_frames",
            "The most frames its backlog may hold (rx_backlog_frames).",
            l(),
            net.rx_backlog_capacity,
        );
    }
    packet_counters(e, "corral_runtime", &labels, &r.packets);
    for (name, &value) in r.reported.iter().flatten() {
        reported(e, &labels, name, value);
    }
}

/// `stats` in the text format.
pub fn render(stats: &Stats) -> String {
    let mut e = Exposition::default();
    let g = &stats.global;
    e.gauge(
        "corral_iokerneld_info",
        "iokerneld's process, its own CPU and how grants are handed over; always 1.",
        vec![
            ("pid", g.pid.to_string()),
            ("core", g.core.to_string()),
            ("handover", g.handover.clone()),
        ],
        1u64,
    );
    e.gauge(
        "corral_iokerneld_uptime_seconds",
        "Time since iokerneld started.",
        vec![],
        Value::Float(g.uptime_s),
    );
    e.gauge(
        "corral_managed_cores",
        "CPUs iokerneld hands out to runtimes.",
        vec![],
        g.managed_cores.len(),
    );
    let settings: [(&str, &'static str, u64); 5] = [
        (
            "corral_setting_interval_seconds",
            "Time between allocation passes (interval_us).",
            g.interval_us,
        ),
        (
            "corral_setting_preemption_timeout_seconds",
            "Time a preempted kthread may keep its core before it is demoted \
             (preemption_timeout_us).",
            g.preemption_timeout_us,
        ),
        (
            "corral_setting_cede_grace_seconds",
            "Time a kthread asked for its core may take to park before it is signalled \
             (cede_grace_us).",
            g.cede_grace_us,
        ),
        (
            "corral_setting_share_quantum_seconds",
            "Time a runtime keeps a granted core before one of equal standing may take it \
             (share_quantum_us).",
            g.share_quantum_us,
        ),
        (
            "corral_setting_ack_wait_seconds",
            "Time a bare TCP ACK may wait on the ring of a runtime with no core (ack_wait_us).",
            g.ack_wait_us,
        ),
    ];
    for (name, help, us) in settings {
        e.gauge(name, help, vec![], Value::Micros(us));
    }
    e.gauge(
        "corral_runtimes",
        "Runtimes registered now.",
        vec![],
        g.runtimes_registered,
    );
    e.gauge(
        "corral_idle_cores",
        "Managed cores no runtime holds now.",
        vec![],
        g.idle_cores,
    );
    let counters: [(&str, &'static str, u64); 19] = [
        (
            "corral_allocation_passes_total",
            "Core allocation passes run.",
            g.passes,
        ),
        (
            "corral_iokerneld_loop_iterations_total",
            "Iterations of iokerneld's busy loop.",
            g.loop_iterations,
        ),
        (
            "corral_iokerneld_loop_stalls_total",
            "Loop iterations longer than 50 us (iokerneld lost its CPU).",
            g.loop_stalls,
        ),
        (
            "corral_registrations_total",
            "Runtimes registered since start.",
            g.registrations,
        ),
        (
            "corral_registrations_refused_total",
            "Registrations refused.",
            g.refused_registrations,
        ),
        (
            "corral_refusal_log_lines_suppressed_total",
            "Log lines about refused requests and connections left out by the rate limit.",
            g.refused_messages_suppressed,
        ),
        (
            "corral_evictions_total",
            "Runtimes removed for breaking the contract.",
            g.evictions,
        ),
        (
            "corral_disconnects_total",
            "Runtimes that closed their connection (exited or crashed).",
            g.disconnects,
        ),
        (
            "corral_demotions_total",
            "Kthreads moved off the managed cores for keeping a core past the timeout.",
            g.demotions,
        ),
        (
            "corral_stale_commands_total",
            "Park or yield commands from kthreads that held no core.",
            g.stale_commands,
        ),
        (
            "corral_wakes_total",
            "Kthreads woken to run on a granted core.",
            g.wakes,
        ),
        (
            "corral_preemptions_signalled_total",
            "Preemption signals sent.",
            g.preemptions_signalled,
        ),
        (
            "corral_preemptions_signalled_at_once_total",
            "Preemption signals sent with the request for the core, with no grace period.",
            g.preemptions_signalled_at_once,
        ),
        (
            "corral_cooperative_cedes_total",
            "Preemptions answered within the grace period, with no signal.",
            g.cedes_cooperative,
        ),
        (
            "corral_cores_taken_in_place_total",
            "Cores taken from kthreads by waking the taker on top of them (idle class, or after \
             a missed grace period).",
            g.taken_in_place,
        ),
        (
            "corral_cores_taken_in_place_after_grace_total",
            "Of those, cores taken after the kthread missed the grace period, for a taker that \
             runs above it.",
            g.taken_in_place_after_grace,
        ),
        (
            "corral_timer_wakeups_total",
            "Times a runtime's due timer made iokerneld ask for a core for it.",
            g.timer_wakeups,
        ),
        (
            "corral_kicks_total",
            "Signals sent with no request for the core, to make a kthread run its network \
             work and timers.",
            g.kicks,
        ),
        (
            "corral_parks_total",
            "Cores kthreads gave back (parked, or yielded after a preemption).",
            g.parks,
        ),
    ];
    for (name, help, value) in counters {
        e.counter(name, help, vec![], value);
    }
    e.counter(
        "corral_iokerneld_loop_stall_seconds_total",
        "Time spent in loop iterations longer than 50 us.",
        vec![],
        Value::Nanos(g.loop_stall_ns),
    );
    e.gauge(
        "corral_iokerneld_loop_stall_max_seconds",
        "The longest loop iteration over 50 us.",
        vec![],
        Value::Nanos(g.loop_stall_max_ns),
    );
    for h in &g.handoff {
        let core = || vec![("core", h.cpu.to_string())];
        for (name, help, value) in [
            (
                "corral_handoff_local_wakes_total",
                "Grants the core's helper thread delivered on the core itself.",
                h.local_wakes,
            ),
            (
                "corral_handoff_loop_wakes_total",
                "Grants the loop delivered from its CPU because the helper slept.",
                h.loop_wakes,
            ),
            (
                "corral_handoff_overdue_posts_total",
                "Of the loop's wakes, those because the helper did not get its CPU in time.",
                h.overdue_posts,
            ),
            (
                "corral_handoff_helper_sleeps_total",
                "Times the core's helper went to sleep.",
                h.helper_sleeps,
            ),
            (
                "corral_handoff_helper_yields_total",
                "Times the core's helper yielded its CPU.",
                h.helper_yields,
            ),
        ] {
            e.counter(name, help, core(), value);
        }
        e.gauge(
            "corral_handoff_helper_spin_limit_seconds",
            "How long the core's helper spins now before it sleeps.",
            core(),
            Value::Nanos(h.helper_spin_limit_ns),
        );
    }

    for r in &stats.runtimes {
        runtime(&mut e, r);
    }

    for c in &stats.cores {
        let core = || vec![("core", c.cpu.to_string())];
        let mut states = vec!["idle", "running", "handing_over"];
        if !states.contains(&c.state.as_str()) {
            states.push(&c.state);
        }
        for state in states {
            e.gauge(
                "corral_core_state",
                "1 for the state the managed core is in now (idle, running, handing_over).",
                vec![("core", c.cpu.to_string()), ("state", state.to_owned())],
                state == c.state,
            );
        }
        if let Some(owner) = &c.owner {
            let mut labels = vec![
                ("core", c.cpu.to_string()),
                ("runtime", owner.name.clone()),
                ("runtime_id", owner.id.to_string()),
            ];
            if let Some(kthread) = c.kthread {
                labels.push(("kthread", kthread.to_string()));
            }
            e.gauge(
                "corral_core_owner_info",
                "The runtime and kthread on the managed core now; always 1.",
                labels,
                1u64,
            );
        }
        e.counter(
            "corral_core_grants_total",
            "Grants of the managed core.",
            core(),
            c.grants,
        );
        e.counter(
            "corral_core_reallocations_total",
            "Times the managed core went from one runtime to another.",
            core(),
            c.reallocations,
        );
    }

    packet_counters(&mut e, "corral_switch", &vec![], &stats.net);

    if let Some(nic) = &stats.nic {
        e.gauge(
            "corral_nic_info",
            "The NIC backend and its device; always 1.",
            vec![
                ("backend", nic.backend.clone()),
                ("description", nic.description.clone()),
                ("mode", nic.mode.clone().unwrap_or_default()),
            ],
            1u64,
        );
        let n = &nic.counters;
        for (name, help, value) in [
            (
                "corral_nic_rx_frames_total",
                "Frames received from the NIC.",
                n.rx_frames,
            ),
            (
                "corral_nic_rx_bytes_total",
                "Bytes received from the NIC.",
                n.rx_bytes,
            ),
            (
                "corral_nic_tx_frames_total",
                "Frames sent on the NIC.",
                n.tx_frames,
            ),
            (
                "corral_nic_tx_bytes_total",
                "Bytes sent on the NIC.",
                n.tx_bytes,
            ),
            (
                "corral_nic_rx_errors_total",
                "Receive calls that failed other than for lack of frames.",
                n.rx_errors,
            ),
            (
                "corral_nic_tx_errors_total",
                "Frames the NIC backend refused to send.",
                n.tx_errors,
            ),
            (
                "corral_nic_rx_syscalls_total",
                "System calls made to receive (TAP: one per frame plus one per empty poll; XDP: \
                 wakeups the kernel asked for).",
                n.rx_syscalls,
            ),
            (
                "corral_nic_rx_device_drops_total",
                "Frames for iokerneld the kernel dropped before it read them (TAP: the device's \
                 queue full; XDP: a socket's RX ring full or no receive buffer lent).",
                n.rx_device_drops,
            ),
            (
                "corral_nic_tx_syscalls_total",
                "System calls made to send (TAP: one per frame; XDP: one per flush the kernel \
                 asked for).",
                n.tx_syscalls,
            ),
        ] {
            e.counter(name, help, vec![], value);
        }
        for (queue, &frames) in nic.queue_rx_frames.iter().enumerate() {
            e.counter(
                "corral_nic_queue_rx_frames_total",
                "Frames received per receive queue of the NIC (XDP).",
                vec![("queue", queue.to_string())],
                frames,
            );
        }
    }

    for (direction, faults) in [
        ("rx", &stats.faults.rx),
        ("tx", &stats.faults.tx),
        ("local", &stats.faults.local),
    ] {
        let Some(f) = faults else { continue };
        let d = || vec![("direction", direction.to_owned())];
        e.gauge(
            "corral_faults_info",
            "A direction's fault injector and its settings (--faults); always 1.",
            vec![
                ("direction", direction.to_owned()),
                ("spec", f.spec.clone()),
            ],
            1u64,
        );
        let c = &f.counters;
        for (name, help, value) in [
            (
                "corral_faults_input_frames_total",
                "Frames handed to the fault injector.",
                c.frames,
            ),
            (
                "corral_faults_emitted_frames_total",
                "Frames the fault injector passed on (duplicates and released frames included).",
                c.emitted,
            ),
            (
                "corral_faults_duplicated_frames_total",
                "Extra copies the fault injector made.",
                c.duplicated,
            ),
            (
                "corral_faults_corrupted_frames_total",
                "Frames the fault injector corrupted.",
                c.corrupted,
            ),
            (
                "corral_faults_delayed_frames_total",
                "Frames the fault injector delayed.",
                c.delayed,
            ),
            (
                "corral_faults_reordered_frames_total",
                "Frames the fault injector reordered.",
                c.reordered,
            ),
        ] {
            e.counter(name, help, d(), value);
        }
        for (reason, value) in [("loss", c.dropped), ("hold_overflow", c.hold_overflow)] {
            e.counter(
                "corral_faults_dropped_frames_total",
                "Frames the fault injector dropped, by reason: drawn for loss, or no room to \
                 hold them.",
                vec![
                    ("direction", direction.to_owned()),
                    ("reason", reason.to_owned()),
                ],
                value,
            );
        }
        e.gauge(
            "corral_faults_held_frames",
            "Frames the fault injector holds now (delayed or reordered).",
            d(),
            f.held,
        );
    }

    e.render()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value as Json, json};

    use super::*;

    fn escaped(value: &str) -> String {
        let mut out = String::new();
        escape_label_value(&mut out, value);
        out
    }

    #[test]
    fn label_values_escape_backslash_quote_and_line_feed_only() {
        assert_eq!(escaped("plain name"), "plain name");
        assert_eq!(escaped(r"a\b"), r"a\\b");
        assert_eq!(escaped(r#"say "hi""#), r#"say \"hi\""#);
        assert_eq!(escaped("two\nlines"), r"two\nlines");
        assert_eq!(escaped("\\\"\n"), r#"\\\"\n"#);
        // A trailing backslash must not escape the closing quote.
        assert_eq!(escaped(r"ends\"), r"ends\\");
        // Everything else, tabs, braces, commas and non-ASCII included, is written as it is.
        assert_eq!(
            escaped("tab\t{a=\"1\",b}\u{e9}"),
            "tab\t{a=\\\"1\\\",b}\u{e9}"
        );
    }

    #[test]
    fn help_text_escapes_backslash_and_line_feed() {
        let mut out = String::new();
        escape_help(&mut out, "a \\ \"b\"\nc");
        assert_eq!(out, "a \\\\ \"b\"\\nc");
    }

    #[test]
    fn times_are_written_in_seconds_exactly() {
        let text = |value| {
            let mut out = String::new();
            write_value(&mut out, value);
            out
        };
        assert_eq!(text(Value::Micros(5)), "0.000005");
        assert_eq!(text(Value::Micros(10_000)), "0.01");
        assert_eq!(text(Value::Micros(3_000_000)), "3");
        assert_eq!(text(Value::Nanos(1)), "0.000000001");
        assert_eq!(text(Value::Nanos(1_234_567_890)), "1.23456789");
        assert_eq!(text(Value::Nanos(u64::MAX)), "18446744073.709551615");
        assert_eq!(text(Value::Count(u64::MAX)), "18446744073709551615");
        assert_eq!(text(Value::Float(12.5)), "12.5");
        assert_eq!(text(Value::Float(f64::NAN)), "NaN");
        assert_eq!(text(Value::Float(f64::INFINITY)), "+Inf");
        assert_eq!(text(Value::Float(f64::NEG_INFINITY)), "-Inf");
    }

    /// Statistics with every optional part present: two runtimes (one with addresses and
    /// reported counters), an owned core and an idle one, a NIC, fault injectors.
    fn full_stats() -> Json {
        let drops = |base: u64| {
            let mut map = serde_json::Map::new();
            for (i, d) in corral_iokernel::daemon::NetDrop::ALL.iter().enumerate() {
                map.insert(d.as_str().to_owned(), json!(base + i as u64));
            }
            Json::Object(map)
        };
        let parse_drops = |base: u64| {
            let mut map = serde_json::Map::new();
            for (i, d) in corral_wire::DropReason::ALL.iter().enumerate() {
                map.insert(d.as_str().to_owned(), json!(base + i as u64));
            }
            Json::Object(map)
        };
        let net = |base: u64| {
            json!({
                "rx_packets": base, "rx_bytes": base + 1, "tx_packets": base + 2,
                "tx_bytes": base + 3, "local_switched": base + 4, "rx_buffer_posts": base + 5,
                "rx_backlogged": base + 6, "drops": drops(base + 10), "rx_parse_drops": parse_drops(base + 30),
            })
        };
        let reported: serde_json::Map<String, Json> = corral_abi::REPORTED_COUNTERS
            .iter()
            .map(|name| ((*name).to_owned(), json!(0)))
            .collect();
        let runtime = |id: u64, name: &str, with_net: bool| {
            let base = id * 1000;
            json!({
                "id": id, "name": name, "pid": 40_000 + id, "kthreads": 3, "guaranteed_cores": 1,
                "max_cores": 2, "cores_held": 1, "cores_handing_over": 0, "waiting": true,
                "grants": base + 100, "preemptions_suffered": base + 101,
                "preempt_signals": base + 102, "preemption": "cooperative",
                "preempt_signals_at_once": base + 103, "cedes_cooperative": base + 104,
                "preemption_latency_last_ns": base + 105, "preemption_latency_max_ns": base + 106,
                "handover": {
                    "samples": base + 107, "unstamped": base + 108, "signal_p50_ns": base + 109,
                    "signal_p99_ns": base + 110, "park_p50_ns": base + 111,
                    "park_p99_ns": base + 112,
                },
                "parks": base + 113, "congestion_detections": base + 114,
                "timer_wakeups": base + 115, "kicks_ingress": base + 116,
                "kicks_timer": base + 117, "kicks_run_queue": base + 118,
                "taken_in_place": base + 119, "acks_left_waiting": base + 120,
                "ack_waits_expired": base + 121, "demotions": base + 122,
                "stale_commands": base + 123, "active_kthreads": [0, 2],
                "taken_in_place_after_grace": base + 125,
                "net": if with_net {
                    let mut n = net(base + 200);
                    n["mac"] = json!("02:00:00:00:00:01");
                    n["ipv4"] = json!("10.0.0.1");
                    n["rx_buffers_posted"] = json!(base + 124);
                    n["rx_backlog_held"] = json!(base + 126);
                    n["rx_backlog_high_water"] = json!(base + 127);
                    n["rx_backlog_capacity"] = json!(base + 128);
                    n
                } else {
                    Json::Null
                },
                "packets": net(base + 200),
                "reported": if with_net { Json::Object(reported.clone()) } else { Json::Null },
            })
        };
        let direction = |base: u64| {
            json!({
                "spec": "loss=0.1,seed=7", "frames": base, "emitted": base + 1,
                "dropped": base + 2, "duplicated": base + 3, "corrupted": base + 4,
                "delayed": base + 5, "reordered": base + 6, "hold_overflow": base + 7,
                "held": base + 8,
            })
        };
        json!({
            "global": {
                "pid": 4321, "core": 0, "managed_cores": [1, 2], "interval_us": 5,
                "preemption_timeout_us": 10_000, "uptime_s": 12.5, "passes": 101,
                "loop_iterations": 102, "runtimes_registered": 2, "registrations": 103,
                "refused_registrations": 104, "last_refusal": "name: too long",
                "refused_messages_suppressed": 105, "evictions": 106, "disconnects": 107,
                "demotions": 108, "stale_commands": 109, "wakes": 110,
                "preemptions_signalled": 111, "preemptions_signalled_at_once": 112,
                "cedes_cooperative": 113, "taken_in_place": 114, "handover": "local",
                "cede_grace_us": 115, "share_quantum_us": 1000, "ack_wait_us": 2000,
                "handoff": [{
                    "cpu": 1, "local_wakes": 116, "loop_wakes": 117, "overdue_posts": 118,
                    "helper_sleeps": 119, "helper_yields": 120, "helper_spin_limit_ns": 121,
                }],
                "timer_wakeups": 122, "kicks": 123, "parks": 124, "loop_stalls": 125,
                "loop_stall_ns": 126, "loop_stall_max_ns": 127, "idle_cores": 1,
                "taken_in_place_after_grace": 128,
            },
            "runtimes": [
                runtime(7, "lc \"q\" \\ x", true),
                runtime(8, "batch", false),
            ],
            "cores": [
                {
                    "cpu": 1, "state": "running", "owner": { "id": 7, "name": "lc \"q\" \\ x" },
                    "kthread": 2, "grants": 130, "reallocations": 131,
                },
                {
                    "cpu": 2, "state": "idle", "owner": null, "kthread": null, "grants": 132,
                    "reallocations": 133,
                },
            ],
            "net": net(500),
            "nic": {
                "backend": "tap", "description": "corral0 \"host\" 10.99.0.1/24",
                "rx_frames": 600, "rx_bytes": 601, "tx_frames": 602, "tx_bytes": 603,
                "rx_errors": 604, "tx_errors": 605, "rx_syscalls": 606, "tx_syscalls": 607, "rx_device_drops": 610,
                "mode": "native copy", "queue_rx_frames": [608, 609],
            },
            "faults": { "rx": direction(700), "tx": direction(720), "local": direction(740) },
        })
    }

    /// Gives every number in `json` a value of its own, so that each can be found in the text.
    fn number_uniquely(json: &mut Json, next: &mut u64) {
        match json {
            Json::Number(n) if n.is_u64() => {
                // Small enough for the u16 fields, and never 0, 1 or 2, which other samples
                // (info gauges, core states, list lengths) have.
                *next += 1;
                *json = json!(*next * 7 + 10);
            }
            Json::Array(items) => items.iter_mut().for_each(|j| number_uniquely(j, next)),
            Json::Object(map) => map.values_mut().for_each(|j| number_uniquely(j, next)),
            _ => {}
        }
    }

    /// Every number of `json` with its key, the key of a list's items being the list's.
    fn numbers<'a>(json: &'a Json, key: &'a str, out: &mut Vec<(&'a str, u64)>) {
        match json {
            Json::Number(n) => out.push((key, n.as_u64().unwrap_or(0))),
            Json::Array(items) => items.iter().for_each(|j| numbers(j, key, out)),
            Json::Object(map) => map.iter().for_each(|(k, j)| numbers(j, k, out)),
            _ => {}
        }
    }

    /// Every key of `json`, with its path, to compare two shapes.
    fn keys(json: &Json, path: &str, out: &mut BTreeSet<String>) {
        match json {
            Json::Array(items) => items
                .iter()
                .enumerate()
                .for_each(|(i, j)| keys(j, &format!("{path}[{i}]"), out)),
            Json::Object(map) => map.iter().for_each(|(k, j)| {
                let path = format!("{path}.{k}");
                out.insert(path.clone());
                keys(j, &path, out);
            }),
            _ => {}
        }
    }

    /// The samples of `text`: (name, labels as written, value as written).
    fn samples(text: &str) -> Vec<(&str, &str, &str)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                match series.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}'), value),
                    None => (series, "", value),
                }
            })
            .collect()
    }

    #[test]
    fn every_number_of_the_statistics_has_a_sample() {
        let mut template = full_stats();
        let stats: Stats = serde_json::from_value(template.clone()).unwrap();
        // The template must have every field the statistics have, or a field added later
        // would go unchecked here.
        let (mut want, mut have) = (BTreeSet::new(), BTreeSet::new());
        keys(&template, "", &mut want);
        keys(&serde_json::to_value(&stats).unwrap(), "", &mut have);
        assert_eq!(want, have, "the template lacks fields of Stats");

        let mut next = 0;
        number_uniquely(&mut template, &mut next);
        // The managed cores are the CPUs of `cores`.
        template["global"]["managed_cores"] =
            json!([template["cores"][0]["cpu"], template["cores"][1]["cpu"]]);
        // A runtime's `net` counters are its `packets` counters (the same source).
        template["runtimes"][0]["net"]["drops"] =
            template["runtimes"][0]["packets"]["drops"].clone();
        for key in [
            "rx_packets",
            "rx_bytes",
            "tx_packets",
            "tx_bytes",
            "local_switched",
        ] {
            template["runtimes"][0]["net"][key] = template["runtimes"][0]["packets"][key].clone();
        }
        for key in ["rx_buffer_posts", "rx_backlogged"] {
            template["runtimes"][0]["net"][key] = template["runtimes"][0]["packets"][key].clone();
        }
        template["runtimes"][0]["net"]["rx_parse_drops"] =
            template["runtimes"][0]["packets"]["rx_parse_drops"].clone();
        let stats: Stats = serde_json::from_value(template.clone()).unwrap();
        let text = render(&stats);
        let samples = samples(&text);
        let values: BTreeSet<&str> = samples.iter().map(|s| s.2).collect();
        let labels: String = samples.iter().map(|s| s.1).collect::<Vec<_>>().join(",");

        let mut all = Vec::new();
        numbers(&template, "", &mut all);
        for (key, value) in all {
            let mut shown = String::new();
            let sample_value = if key.ends_with("_ns") {
                write_value(&mut shown, Value::Nanos(value));
                shown
            } else if key.ends_with("_us") {
                write_value(&mut shown, Value::Micros(value));
                shown
            } else {
                value.to_string()
            };
            match key {
                // Identities are labels: `runtime_id`, `pid`, `core`, `kthread`.
                "id" | "pid" | "core" | "cpu" | "kthread" | "managed_cores" => assert!(
                    labels.contains(&format!("=\"{value}\"")),
                    "{key} = {value} is no label value:\n{text}"
                ),
                // Counted, not listed.
                "active_kthreads" => {}
                _ => assert!(
                    values.contains(sample_value.as_str()),
                    "{key} = {value} ({sample_value}) has no sample:\n{text}"
                ),
            }
        }
        assert!(text.contains("corral_runtime_active_kthreads{runtime=\"lc \\\"q\\\" \\\\ x\""));
        assert!(values.contains("12.5"), "uptime");
    }

    #[test]
    fn the_text_is_well_formed() {
        let stats: Stats = serde_json::from_value(full_stats()).unwrap();
        let text = render(&stats);
        let mut families = BTreeSet::new();
        let mut series = BTreeSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(families.insert(name.to_owned()), "{name} twice");
                assert!(name.starts_with("corral_"), "{name}");
                current = name.to_owned();
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(name, current);
                match kind {
                    "counter" => assert!(name.ends_with("_total"), "{name}"),
                    "gauge" => assert!(!name.ends_with("_total"), "{name}"),
                    other => panic!("{name}: type {other}"),
                }
            } else {
                let (name, _) = line.split_once(['{', ' ']).unwrap();
                assert_eq!(name, current, "{line}: not under its family");
                assert!(
                    name.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{name}"
                );
                let (key, _) = line.rsplit_once(' ').unwrap();
                assert!(series.insert(key.to_owned()), "{key} twice");
            }
        }
        // The switch's drop reasons and the steering parse's share one family, so they must
        // share no name.
        let netdrop: BTreeSet<&str> = corral_iokernel::daemon::NetDrop::ALL
            .iter()
            .map(|d| d.as_str())
            .collect();
        let parse: BTreeSet<&str> = corral_wire::DropReason::ALL
            .iter()
            .map(|d| d.as_str())
            .collect();
        assert!(
            netdrop.is_disjoint(&parse),
            "{:?}",
            netdrop.intersection(&parse)
        );
    }
}
