//! Runs of the `gen` NIC backend: what a run is asked to do ([`GenSpec`], sent as JSON in a
//! `Request::Gen`) and what it reports ([`GenResult`], the JSON of the `Reply::Gen`).
//!
//! A spec is checked field by field and every refusal names the field (`phases[1].rate_rps`,
//! `payload`, ...) and the value, because it travels back to whoever asked for the run. Both
//! `iokerneld gen` (before sending) and the daemon (on receipt) check it.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use corral_loadgen::dns::{DnsCounts, QueryMix};
use corral_loadgen::kv::{KvChecks, KvWorkload};
use corral_loadgen::schedule::ScheduleError;
use corral_loadgen::wire;
use corral_loadgen::{
    AdherencePolicy, Arrivals, Phase, Phases, PhasesError, ServiceDist, Summary, WindowReport,
    WindowedLatency,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most phases in one run: their spec must fit in one control message.
pub const MAX_PHASES: usize = 256;
/// Longest phase, in seconds (a day).
pub const MAX_PHASE_S: f64 = 86_400.0;
/// Most requests one run's schedule may make. The daemon keeps one bit per request to match
/// responses, so this caps that table at 125 MB.
pub const MAX_REQUESTS: u64 = 1_000_000_000;
/// Most latency windows: each takes about 14 KiB while the run is on and about 200 bytes of
/// the reply.
pub const MAX_WINDOWS: u64 = 2_000;
/// Shortest latency window.
pub const MIN_WINDOW_MS: f64 = 0.001;
/// Longest grace period after the last send.
pub const MAX_GRACE_MS: f64 = 60_000.0;
/// Largest payload: a UDP datagram in one 1514-byte frame.
pub const MAX_PAYLOAD: usize = corral_abi::MAX_FRAME - corral_wire::frame::UDP_PAYLOAD_OFFSET;
/// Smallest payload: the request header.
pub const MIN_PAYLOAD: usize = wire::HEADER_LEN;

/// One phase of a run, as in the spec.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    /// Target rate in requests per second.
    pub rate_rps: f64,
    /// Seconds of requests.
    pub duration_s: f64,
}

impl PhaseSpec {
    pub fn duration_ns(&self) -> u64 {
        (self.duration_s * 1e9).round() as u64
    }
}

/// What a run's requests are and how they travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// corral-loadgen's fixed-size request, over UDP, echoed by a spin server (the default).
    #[default]
    #[serde(rename = "spin")]
    Spin,
    /// memcached's text protocol (`get` and `set` per the spec's `kv` workload) over TCP, one
    /// connection per client, every reply checked against its request.
    #[serde(rename = "memcache-tcp")]
    MemcacheTcp,
    /// DNS queries over UDP from the spec's `dns` query mix, each reply matched to its query by
    /// client port and DNS ID and checked against its question.
    #[serde(rename = "dns")]
    Dns,
}

impl Protocol {
    /// Every name, for error messages.
    pub const NAMES: &str = "spin, memcache-tcp or dns";
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Spin => "spin",
            Protocol::MemcacheTcp => "memcache-tcp",
            Protocol::Dns => "dns",
        })
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "spin" => Ok(Protocol::Spin),
            "memcache-tcp" => Ok(Protocol::MemcacheTcp),
            "dns" => Ok(Protocol::Dns),
            _ => Err(format!(
                "unknown protocol {text:?}: expected {}",
                Protocol::NAMES
            )),
        }
    }
}

/// What a run plays. In JSON only `target` and `phases` are required; see the field defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenSpec {
    /// `IP:PORT` of a service on a registered runtime (UDP, or TCP for `memcache-tcp`).
    pub target: String,
    /// Played back to back; request ids continue from one to the next.
    pub phases: Vec<PhaseSpec>,
    /// `poisson` (default) or `constant`.
    pub arrivals: Arrivals,
    /// Service time each request asks for; in JSON either corral-loadgen's form
    /// (`{"kind": "exponential", "mean_ns": 10000}`) or text such as `"exp:10us"` (default).
    pub service: ServiceDist,
    /// Simulated clients (default 64); client `c` sends from UDP port
    /// [`CLIENT_PORT_BASE`](crate::nic::CLIENT_PORT_BASE) + `c % 1024`.
    pub clients: u32,
    /// Seed of the schedule (default 1).
    pub seed: u64,
    /// Bytes of each request's UDP payload, 64 to 1472 (default 64).
    pub payload: usize,
    /// Milliseconds after the later of the last send and the end of the last phase that
    /// responses still count (default 100).
    pub grace_ms: f64,
    /// Width of the latency windows in ms of scheduled time; none if absent.
    pub window_ms: Option<f64>,
    /// When the generator is judged to have fallen behind (default: corral-loadgen's).
    pub policy: AdherencePolicy,
    /// `spin` (default), `memcache-tcp` or `dns`. With `memcache-tcp`, `clients` is the
    /// number of TCP connections (client `c` on port
    /// [`CLIENT_PORT_BASE`](crate::nic::CLIENT_PORT_BASE) + `c`), the requests follow `kv`,
    /// and `service` and `payload` are not used. With `dns`, the requests are the queries of
    /// `dns`, `clients` (at most [`MAX_DNS_CLIENTS`]) are source ports as for spin, each with
    /// its own DNS ID space, and `service` and `payload` are not used.
    #[serde(default)]
    pub protocol: Protocol,
    /// The key-value workload of a `memcache-tcp` run (default: corral-loadgen's
    /// `KvWorkload::new(10000)`).
    #[serde(default = "default_kv")]
    pub kv: KvWorkload,
    /// Whether a `memcache-tcp` run sets every key once before its schedule starts (default
    /// true), so that gets hit; without it gets of keys not yet set are misses.
    #[serde(default = "default_preload")]
    pub preload: bool,
    /// The queries of a `dns` run: required with that protocol, refused with any other.
    /// Absent from the JSON of other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsSpec>,
}

/// What a `dns` run asks: its queries as text (the client reads the file; the daemon never
/// opens a path a client names), asked in order, round and round (request `n` asks line `n`
/// mod the number of queries), and the EDNS payload size its queries offer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsSpec {
    /// dnsperf's query-file format: `NAME TYPE` per line, blank lines and `;` or `#`
    /// comments skipped (`corral_loadgen::dns::QueryMix::parse`).
    pub queries: String,
    /// EDNS UDP payload size offered in an OPT record; no OPT record if absent.
    #[serde(default)]
    pub edns: Option<u16>,
}

impl DnsSpec {
    /// The query mix; the error names the line.
    pub fn mix(&self) -> Result<QueryMix, GenSpecError> {
        QueryMix::parse(&self.queries)
            .map_err(|e| refuse("dns.queries", e, "NAME TYPE per line, in dnsperf's format"))
    }
}

/// Most clients of a `dns` run: each has its own source port and 16-bit DNS ID space, and the
/// generator a table of 65,536 outstanding IDs for it (768 KiB), so 256 take 192 MiB.
pub const MAX_DNS_CLIENTS: u32 = 256;

/// What a spec's `dns` is, for error messages.
const DNS_OBJECT: &str = "{\"queries\": \"NAME TYPE lines\", \"edns\": BYTES or null}";

fn default_kv() -> KvWorkload {
    KvWorkload::new(10_000)
}

fn default_preload() -> bool {
    true
}

/// A refused spec: the field, its value, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenSpecError {
    pub field: String,
    pub value: String,
    pub expected: String,
}

impl fmt::Display for GenSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} = {}: expected {}",
            self.field, self.value, self.expected
        )
    }
}

impl std::error::Error for GenSpecError {}

fn refuse(
    field: impl Into<String>,
    value: impl fmt::Display,
    expected: impl Into<String>,
) -> GenSpecError {
    GenSpecError {
        field: field.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

const FIELDS: [&str; 14] = [
    "target",
    "phases",
    "arrivals",
    "service",
    "clients",
    "seed",
    "payload",
    "grace_ms",
    "window_ms",
    "policy",
    "protocol",
    "kv",
    "preload",
    "dns",
];

/// Reads `object[key]` as a `T`; `None` if absent (or null). The error names `path`.
fn field<T: DeserializeOwned>(
    object: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<T>, GenSpecError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| refuse(path, value, format!("a valid value ({e})"))),
    }
}

fn required<T: DeserializeOwned>(
    object: &Map<String, Value>,
    key: &str,
    expected: &str,
) -> Result<T, GenSpecError> {
    field(object, key, key)?.ok_or_else(|| refuse(key, "nothing", expected))
}

fn unknown_keys(object: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), GenSpecError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(refuse(
            format!("{at}{k}"),
            &object[k],
            format!("no such field (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

impl GenSpec {
    /// What each request is, for the log lines of a run: clients, arrivals and the protocol's
    /// own settings.
    pub fn workload(&self) -> String {
        match self.protocol {
            Protocol::Spin => format!(
                "{} clients, {} service, {} arrivals, {}-byte payloads",
                self.clients, self.service, self.arrivals, self.payload
            ),
            Protocol::Dns => {
                let (queries, edns) = self
                    .dns
                    .as_ref()
                    .map_or((0, None), |d| (d.mix().map_or(0, |m| m.len()), d.edns));
                format!(
                    "DNS from {} client ports, {} arrivals, {queries} queries in turn, {}",
                    self.clients,
                    self.arrivals,
                    edns.map_or("no EDNS".to_owned(), |b| format!("EDNS {b} bytes"))
                )
            }
            Protocol::MemcacheTcp => {
                let kv = &self.kv;
                format!(
                    "memcached over {} TCP connections, {} arrivals, {} keys of {} bytes, values of \
                     {} bytes, {:.0}% gets, {} popularity, {}",
                    self.clients,
                    self.arrivals,
                    kv.keys,
                    kv.key_size,
                    kv.value_size,
                    kv.get_fraction * 100.0,
                    kv.popularity,
                    if self.preload {
                        "every key set first"
                    } else {
                        "no preload"
                    }
                )
            }
        }
    }

    /// `target` with one phase and every other setting at its default.
    pub fn new(target: SocketAddrV4, phases: Vec<PhaseSpec>) -> Self {
        GenSpec {
            target: target.to_string(),
            phases,
            arrivals: Arrivals::Poisson,
            service: ServiceDist::Exponential { mean_ns: 10_000.0 },
            clients: 64,
            seed: 1,
            payload: 64,
            grace_ms: 100.0,
            window_ms: None,
            policy: AdherencePolicy::default(),
            protocol: Protocol::Spin,
            kv: default_kv(),
            preload: default_preload(),
            dns: None,
        }
    }

    /// Parses and checks a spec; the error names the first bad field.
    pub fn from_json(text: &str) -> Result<GenSpec, GenSpecError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            refuse(
                "spec",
                format!("{:?}", text.chars().take(60).collect::<String>()),
                format!("a JSON object ({e})"),
            )
        })?;
        let Value::Object(object) = value else {
            return Err(refuse("spec", value, "a JSON object"));
        };
        unknown_keys(&object, &FIELDS, "")?;
        let target = required(&object, "target", "IP:PORT of the service to load")?;
        let Some(Value::Array(items)) = object.get("phases") else {
            let found = object.get("phases").cloned().unwrap_or(Value::Null);
            return Err(refuse(
                "phases",
                found,
                "an array of {\"rate_rps\": RPS, \"duration_s\": SECONDS}",
            ));
        };
        let mut phases = Vec::with_capacity(items.len().min(MAX_PHASES));
        for (i, item) in items.iter().enumerate().take(MAX_PHASES + 1) {
            let Value::Object(phase) = item else {
                return Err(refuse(
                    format!("phases[{i}]"),
                    item,
                    "{\"rate_rps\": RPS, \"duration_s\": SECONDS}",
                ));
            };
            unknown_keys(phase, &["rate_rps", "duration_s"], &format!("phases[{i}]."))?;
            let number = |key: &str| -> Result<f64, GenSpecError> {
                let path = format!("phases[{i}].{key}");
                field(phase, key, &path)?.ok_or_else(|| refuse(path, "nothing", "a number"))
            };
            phases.push(PhaseSpec {
                rate_rps: number("rate_rps")?,
                duration_s: number("duration_s")?,
            });
        }
        if items.len() > MAX_PHASES {
            return Err(refuse(
                "phases",
                format!("{} phases", items.len()),
                format!("at most {MAX_PHASES}"),
            ));
        }
        let mut spec = GenSpec::new(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), phases);
        spec.target = target;
        match object.get("arrivals") {
            Some(Value::String(text)) => {
                spec.arrivals = text.parse().map_err(|e: ScheduleError| {
                    refuse("arrivals", format!("{text:?}"), e.expected)
                })?;
            }
            _ => spec.arrivals = field(&object, "arrivals", "arrivals")?.unwrap_or(spec.arrivals),
        }
        match object.get("service") {
            Some(Value::String(text)) => {
                spec.service = text.parse().map_err(|e: ScheduleError| {
                    refuse("service", format!("{text:?}"), e.expected)
                })?;
            }
            _ => spec.service = field(&object, "service", "service")?.unwrap_or(spec.service),
        }
        spec.clients = field(&object, "clients", "clients")?.unwrap_or(spec.clients);
        spec.seed = field(&object, "seed", "seed")?.unwrap_or(spec.seed);
        spec.payload = field(&object, "payload", "payload")?.unwrap_or(spec.payload);
        spec.grace_ms = field(&object, "grace_ms", "grace_ms")?.unwrap_or(spec.grace_ms);
        spec.window_ms = field(&object, "window_ms", "window_ms")?;
        spec.policy = field(&object, "policy", "policy")?.unwrap_or(spec.policy);
        match object.get("protocol") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                spec.protocol = text
                    .parse()
                    .map_err(|_| refuse("protocol", format!("{text:?}"), Protocol::NAMES))?;
            }
            Some(other) => return Err(refuse("protocol", other, Protocol::NAMES)),
        }
        spec.kv = field(&object, "kv", "kv")?.unwrap_or(spec.kv);
        spec.preload = field(&object, "preload", "preload")?.unwrap_or(spec.preload);
        match object.get("dns") {
            None | Some(Value::Null) => {}
            Some(Value::Object(dns)) => {
                unknown_keys(dns, &["queries", "edns"], "dns.")?;
                let queries = field(dns, "queries", "dns.queries")?.ok_or_else(|| {
                    refuse(
                        "dns.queries",
                        "nothing",
                        "the queries as text, NAME TYPE per line",
                    )
                })?;
                let edns = field(dns, "edns", "dns.edns")?;
                spec.dns = Some(DnsSpec { queries, edns });
            }
            Some(other) => return Err(refuse("dns", other, DNS_OBJECT)),
        }
        spec.validate()?;
        Ok(spec)
    }

    /// The spec as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a spec always serializes")
    }

    /// Checks every value; the error names the first bad field.
    pub fn validate(&self) -> Result<(), GenSpecError> {
        self.target_addr()?;
        if self.phases.is_empty() || self.phases.len() > MAX_PHASES {
            return Err(refuse(
                "phases",
                format!("{} phases", self.phases.len()),
                format!("1 to {MAX_PHASES} phases"),
            ));
        }
        for (i, p) in self.phases.iter().enumerate() {
            if !(p.rate_rps.is_finite()
                && p.rate_rps > 0.0
                && p.rate_rps <= corral_loadgen::schedule::MAX_RATE_RPS)
            {
                return Err(refuse(
                    format!("phases[{i}].rate_rps"),
                    p.rate_rps,
                    "a rate in (0, 1e9] requests/s",
                ));
            }
            if !(p.duration_s.is_finite() && p.duration_s <= MAX_PHASE_S && p.duration_ns() > 0) {
                return Err(refuse(
                    format!("phases[{i}].duration_s"),
                    p.duration_s,
                    format!("a duration from 1 ns to {MAX_PHASE_S} s"),
                ));
            }
        }
        if self.clients == 0 {
            return Err(refuse("clients", 0, "at least 1"));
        }
        if self.protocol == Protocol::MemcacheTcp {
            let most = crate::tcpfleet::MAX_CONNECTIONS;
            if self.clients as usize > most {
                return Err(refuse(
                    "clients",
                    self.clients,
                    format!("1 to {most} (TCP connections, for protocol memcache-tcp)"),
                ));
            }
            self.kv
                .validate()
                .map_err(|e| refuse(format!("kv.{}", e.key), e.value, e.expected))?;
            if self.window_ms.is_some() {
                return Err(refuse(
                    "window_ms",
                    self.window_ms.unwrap_or_default(),
                    "no latency windows with protocol memcache-tcp",
                ));
            }
        }
        match (&self.dns, self.protocol) {
            (None, Protocol::Dns) => {
                return Err(refuse(
                    "dns",
                    "nothing",
                    format!("the queries of a dns run, {DNS_OBJECT}"),
                ));
            }
            (Some(dns), Protocol::Dns) => {
                dns.mix()?;
                if self.clients > MAX_DNS_CLIENTS {
                    return Err(refuse(
                        "clients",
                        self.clients,
                        format!(
                            "1 to {MAX_DNS_CLIENTS} (source ports, each with a DNS ID space of \
                             its own, for protocol dns)"
                        ),
                    ));
                }
            }
            (Some(_), protocol) => {
                return Err(refuse(
                    "dns",
                    "an object",
                    format!("no dns object with protocol {protocol} (it is for protocol dns)"),
                ));
            }
            (None, _) => {}
        }
        self.service
            .validate()
            .map_err(|e| refuse(e.key, e.value, e.expected))?;
        if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&self.payload) {
            return Err(refuse(
                "payload",
                self.payload,
                format!("{MIN_PAYLOAD} to {MAX_PAYLOAD} bytes (a request header, in one frame)"),
            ));
        }
        if !(self.grace_ms.is_finite() && (0.0..=MAX_GRACE_MS).contains(&self.grace_ms)) {
            return Err(refuse(
                "grace_ms",
                self.grace_ms,
                format!("0 to {MAX_GRACE_MS} ms"),
            ));
        }
        if !(self.policy.min_send_ratio.is_finite()
            && (0.0..=1.0).contains(&self.policy.min_send_ratio))
        {
            return Err(refuse(
                "policy.min_send_ratio",
                self.policy.min_send_ratio,
                "a fraction in [0, 1]",
            ));
        }
        let phases = self.schedule();
        phases.validate().map_err(|e| self.phases_error(e))?;
        let len = self.to_json().len();
        if len > corral_abi::control::MAX_GEN_SPEC_LEN {
            return Err(refuse(
                "spec",
                format!("{len} bytes of JSON"),
                format!(
                    "at most {} bytes (fewer phases or queries)",
                    corral_abi::control::MAX_GEN_SPEC_LEN
                ),
            ));
        }
        let bound = phases.request_bound();
        if bound > MAX_REQUESTS {
            return Err(refuse(
                "phases",
                format!("a schedule of up to {bound} requests"),
                format!("at most {MAX_REQUESTS} requests in one run"),
            ));
        }
        if let Some(ms) = self.window_ms {
            if !(ms.is_finite() && ms >= MIN_WINDOW_MS) {
                return Err(refuse(
                    "window_ms",
                    ms,
                    format!("at least {MIN_WINDOW_MS} ms"),
                ));
            }
            let count =
                WindowedLatency::window_count(self.window_ns().unwrap_or(1), self.duration_ns());
            if count > MAX_WINDOWS {
                return Err(refuse(
                    "window_ms",
                    ms,
                    format!(
                        "windows wide enough that the run has at most {MAX_WINDOWS} (it would have \
                         {count})"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn phases_error(&self, e: PhasesError) -> GenSpecError {
        match e.phase {
            Some(i) => {
                let key = match e.error.key {
                    "rate" => "rate_rps",
                    "duration" => "duration_s",
                    other => other,
                };
                refuse(
                    format!("phases[{i}].{key}"),
                    e.error.value,
                    e.error.expected,
                )
            }
            None => refuse(e.error.key, e.error.value, e.error.expected),
        }
    }

    /// The target address.
    pub fn target_addr(&self) -> Result<SocketAddrV4, GenSpecError> {
        let addr: SocketAddrV4 = self.target.parse().map_err(|_| {
            refuse(
                "target",
                format!("{:?}", self.target),
                "IPv4 address and port such as 10.99.0.2:5000",
            )
        })?;
        let ip = addr.ip();
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || addr.port() == 0 {
            return Err(refuse(
                "target",
                format!("{:?}", self.target),
                "a unicast IPv4 address and a nonzero port",
            ));
        }
        Ok(addr)
    }

    /// The schedule: the phases with the shared settings, ids from 0.
    pub fn schedule(&self) -> Phases {
        Phases {
            phases: self
                .phases
                .iter()
                .map(|p| Phase {
                    rate_rps: p.rate_rps,
                    duration_ns: p.duration_ns(),
                })
                .collect(),
            arrivals: self.arrivals,
            service: self.service,
            clients: self.clients,
            seed: self.seed,
            first_id: 0,
        }
    }

    /// All phases together, in ns.
    pub fn duration_ns(&self) -> u64 {
        self.phases
            .iter()
            .fold(0u64, |t, p| t.saturating_add(p.duration_ns()))
    }

    pub fn grace_ns(&self) -> u64 {
        (self.grace_ms * 1e6).round() as u64
    }

    pub fn window_ns(&self) -> Option<u64> {
        self.window_ms.map(|ms| ((ms * 1e6).round() as u64).max(1))
    }
}

/// What the daemon did while a run was on: differences of its counters between the run's
/// acceptance and its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonDiff {
    /// The allocator's pass interval (a setting, not a difference).
    pub interval_us: u64,
    /// Kthreads woken on a core.
    pub wakes: u64,
    /// Preemption signals sent.
    pub preemptions: u64,
    /// Grants of a core to a different runtime than its previous user, over every core.
    pub reallocations: u64,
    /// `reallocations` over the time between the two snapshots.
    pub reallocations_per_s: f64,
    /// Kthreads that gave back a core (parked, or yielded after a preemption).
    pub parks: u64,
    /// Loop iterations longer than 50 µs, and their total: time the daemon (and so the
    /// generator, and every packet) lost its CPU. A run with many is measuring the machine.
    #[serde(default)]
    pub loop_stalls: u64,
    #[serde(default)]
    pub loop_stall_ns: u64,
}

/// What the generator cost the dataplane loop, measured in the loop with `CLOCK_MONOTONIC` on
/// one burst of requests and one response in eight (the clock read that ends a measurement is
/// itself a cost): building a burst is timed from the loop's clock read before the poll,
/// taking a response from the clock read that timestamps it. A timed stretch of over 50 µs per
/// request or response was interrupted (the loop lost its CPU inside it, which the daemon
/// counts as a loop stall): it is counted in `interrupted_samples` and left out of the means.
/// Shorter interruptions still move the means; the medians are robust to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenCost {
    /// Requests built and handed to the switch.
    pub requests: u64,
    /// `build_ns_per_request + parse_ns_per_response * responses / requests`: what one
    /// request cost the loop, its response included.
    pub ns_per_request: f64,
    /// Frames taken from the transmit path while the run was on (echoes, mostly).
    pub responses: u64,
    /// Estimated time spent building requests: `build_ns_per_request * requests`.
    pub build_ns: u64,
    /// Estimated time spent parsing and recording responses: `parse_ns_per_response *
    /// responses`.
    pub parse_ns: u64,
    /// Building, per request, over the timed bursts (with one clock read per burst). For a
    /// `memcache-tcp` run, every poll with work is a burst (those that only write ACKs or fire
    /// timers too), so this is the fleet's whole sending side per request.
    pub build_ns_per_request: f64,
    /// Parsing, matching and recording, per response, over the timed responses (with the
    /// clock read that timestamps each).
    pub parse_ns_per_response: f64,
    /// As `ns_per_request`, from the medians below: what a request costs when the loop is not
    /// interrupted while it is being timed.
    pub ns_per_request_p50: f64,
    /// Median over the timed bursts of their time per request.
    pub build_ns_per_request_p50: u64,
    /// Median over the timed responses.
    pub parse_ns_per_response_p50: u64,
    /// Receive polls that produced requests.
    pub bursts: u64,
    pub timed_bursts: u64,
    pub timed_responses: u64,
    /// Timed bursts and responses left out of the means as interrupted.
    #[serde(default)]
    pub interrupted_samples: u64,
    /// `build_ns + parse_ns` over the schedule's duration (or the time to its last send or
    /// match, if later): the share of the daemon's core the generator took. Near 1, the
    /// generator (not the server) limited the run.
    #[serde(default)]
    pub busy_fraction: f64,
}

/// The results of a run: the JSON of the `Reply::Gen`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenResult {
    /// The spec as validated, every default filled in.
    pub spec: GenSpec,
    pub summary: Summary,
    /// By scheduled send time; empty without `window_ms`.
    pub windows: Vec<WindowReport>,
    pub daemon: DaemonDiff,
    pub gen_cost: GenCost,
    /// Of a `memcache-tcp` run: the checks of every reply and the connections' counters.
    #[serde(default)]
    pub kv: Option<KvReport>,
    /// Of a `dns` run: the replies by RCODE, those truncated, and the datagrams that answered
    /// no query outstanding (`mismatched`, never latency samples). Absent for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsCounts>,
}

/// What a `memcache-tcp` run's connections did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvReport {
    /// Requests by kind and replies by verdict; wrong ones are not latency samples.
    /// `checks.preloaded` keys were set before the schedule started.
    pub checks: KvChecks,
    /// Wrong replies, unparsable streams and failed connections (`checks.errors()`).
    #[serde(default)]
    pub errors: u64,
    /// Seconds the preload took (0 without one).
    #[serde(default)]
    pub preload_s: f64,
    pub connections: crate::tcpfleet::FleetCounters,
    /// Segments the connections retransmitted: after a timeout, fast (on duplicate ACKs), and
    /// SYNs.
    pub rto_retransmits: u64,
    pub fast_retransmits: u64,
    pub syn_retransmits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str =
        r#"{"target": "10.99.0.2:5000", "phases": [{"rate_rps": 1000, "duration_s": 2}]}"#;

    fn with(extra: &str) -> String {
        format!(
            r#"{{"target": "10.99.0.2:5000", "phases": [{{"rate_rps": 1000, "duration_s": 2}}], {extra}}}"#
        )
    }

    fn error(text: &str) -> GenSpecError {
        GenSpec::from_json(text).unwrap_err()
    }

    #[test]
    fn defaults_fill_a_minimal_spec() {
        let spec = GenSpec::from_json(MINIMAL).unwrap();
        assert_eq!(
            spec.target_addr().unwrap(),
            "10.99.0.2:5000".parse().unwrap()
        );
        assert_eq!(spec.phases.len(), 1);
        assert_eq!(spec.duration_ns(), 2_000_000_000);
        assert_eq!(spec.arrivals, Arrivals::Poisson);
        assert_eq!(spec.service, ServiceDist::Exponential { mean_ns: 10_000.0 });
        assert_eq!((spec.clients, spec.seed, spec.payload), (64, 1, 64));
        assert_eq!(spec.grace_ns(), 100_000_000);
        assert_eq!(spec.window_ns(), None);
        assert_eq!(spec.policy, AdherencePolicy::default());
        assert!(
            spec.preload,
            "a memcache-tcp run sets every key first unless told not to"
        );
        assert!(
            !GenSpec::from_json(&with(r#""preload": false"#))
                .unwrap()
                .preload
        );
        // What is reported reads back as the same spec.
        assert_eq!(GenSpec::from_json(&spec.to_json()).unwrap(), spec);
    }

    #[test]
    fn every_setting_is_read() {
        let text = r#"{"target": "10.1.2.3:7", "phases": [{"rate_rps": 5e5, "duration_s": 0.5},
            {"rate_rps": 1000, "duration_s": 1}], "arrivals": "constant", "service": "bimodal",
            "clients": 3, "seed": 9, "payload": 1472, "grace_ms": 0, "window_ms": 2.5,
            "policy": {"max_p99_lateness_ns": 5000, "min_send_ratio": 0.5}}"#;
        let spec = GenSpec::from_json(text).unwrap();
        assert_eq!(spec.arrivals, Arrivals::Constant);
        assert_eq!(spec.service, ServiceDist::PAPER_BIMODAL);
        assert_eq!((spec.clients, spec.seed, spec.payload), (3, 9, 1472));
        assert_eq!(spec.grace_ns(), 0);
        assert_eq!(spec.window_ns(), Some(2_500_000));
        assert_eq!(spec.policy.max_p99_lateness_ns, 5000);
        assert_eq!(spec.duration_ns(), 1_500_000_000);
        let schedule = spec.schedule();
        assert_eq!(schedule.phases[0].duration_ns, 500_000_000);
        assert_eq!(schedule.request_bound(), 251_000);
        // The structured service form is read too.
        let spec =
            GenSpec::from_json(&with(r#""service": {"kind": "constant", "ns": 2000}"#)).unwrap();
        assert_eq!(spec.service, ServiceDist::Constant { ns: 2000 });
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("[1, 2]", "invalid spec = [1,2]"),
            ("{nope", "invalid spec"),
            (r#"{"phases": []}"#, "invalid target = nothing"),
            (r#"{"target": "10.99.0.2:5000"}"#, "invalid phases = null"),
            (
                r#"{"target": "10.99.0.2:5000", "phases": []}"#,
                "invalid phases = 0 phases",
            ),
            (
                r#"{"target": "10.99.0.2", "phases": [{"rate_rps": 1, "duration_s": 1}]}"#,
                "invalid target = \"10.99.0.2\"",
            ),
            (
                r#"{"target": "10.99.0.2:0", "phases": [{"rate_rps": 1, "duration_s": 1}]}"#,
                "invalid target = \"10.99.0.2:0\"",
            ),
            (
                r#"{"target": "224.0.0.1:5", "phases": [{"rate_rps": 1, "duration_s": 1}]}"#,
                "invalid target",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": 1, "duration_s": 1},
                   {"rate_rps": 0, "duration_s": 1}]}"#,
                "invalid phases[1].rate_rps = 0",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": 1, "duration_s": -1}]}"#,
                "invalid phases[0].duration_s = -1",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": 1}]}"#,
                "invalid phases[0].duration_s = nothing",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": "fast", "duration_s": 1}]}"#,
                "invalid phases[0].rate_rps = \"fast\"",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": 1, "duration_s": 1, "x": 1}]}"#,
                "invalid phases[0].x = 1: expected no such field",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [5]}"#,
                "invalid phases[0] = 5",
            ),
            (&with(r#""clients": 0"#), "invalid clients = 0"),
            (&with(r#""clients": -3"#), "invalid clients = -3"),
            (&with(r#""payload": 35"#), "invalid payload = 35"),
            (&with(r#""payload": 1473"#), "invalid payload = 1473"),
            (&with(r#""grace_ms": -1"#), "invalid grace_ms = -1"),
            (&with(r#""window_ms": 0"#), "invalid window_ms = 0"),
            (
                &with(r#""window_ms": 0.5"#),
                "invalid window_ms = 0.5: expected windows wide enough",
            ),
            (&with(r#""service": "exp:0us""#), "invalid service"),
            (
                &with(r#""service": {"kind": "exponential", "mean_ns": -5}"#),
                "invalid service.mean_ns = -5",
            ),
            (
                &with(r#""arrivals": "bursty""#),
                "invalid arrivals = \"bursty\"",
            ),
            (
                &with(r#""policy": {"max_p99_lateness_ns": 1}"#),
                "invalid policy = {\"max_p99_lateness_ns\":1}: expected a valid value (missing field \
                 `min_send_ratio`)",
            ),
            (
                &with(r#""policy": {"max_p99_lateness_ns": 1, "min_send_ratio": 2}"#),
                "invalid policy.min_send_ratio = 2",
            ),
            (
                &with(r#""rate": 5"#),
                "invalid rate = 5: expected no such field",
            ),
            (
                r#"{"target": "10.0.0.2:5", "phases": [{"rate_rps": 1e9, "duration_s": 86400}]}"#,
                "invalid phases = a schedule of up to",
            ),
        ];
        for (text, expected) in cases {
            let err = error(text).to_string();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
        let too_many: Vec<String> = (0..=MAX_PHASES)
            .map(|_| r#"{"rate_rps": 1, "duration_s": 1}"#.to_owned())
            .collect();
        let text = format!(
            r#"{{"target": "10.0.0.2:5", "phases": [{}]}}"#,
            too_many.join(",")
        );
        assert_eq!(error(&text).field, "phases");
    }

    #[test]
    fn the_longest_spec_fits_in_a_control_message() {
        let mut spec = GenSpec::from_json(MINIMAL).unwrap();
        spec.target = "255.255.255.254:65535".into();
        spec.phases = vec![
            PhaseSpec {
                rate_rps: 1.234_567_890_123_456_7e-5,
                duration_s: 0.300_000_000_000_000_04,
            };
            MAX_PHASES
        ];
        spec.service = ServiceDist::Bimodal {
            short_ns: u32::MAX,
            long_ns: u32::MAX,
            long_fraction: 0.123_456_789_012_345_67,
        };
        spec.window_ms = Some(1_234.567_890_123_456_7);
        spec.grace_ms = 59_999.123_456_789_01;
        spec.seed = u64::MAX;
        spec.validate().unwrap();
        let json = spec.to_json();
        assert!(json.len() <= corral_abi::control::MAX_GEN_SPEC_LEN);
        assert_eq!(GenSpec::from_json(&json).unwrap(), spec);
    }

    /// The results of a run of `spec` with no requests.
    fn no_results(spec: GenSpec) -> GenResult {
        GenResult {
            spec,
            summary: corral_loadgen::recorder::summarize(
                &corral_loadgen::RunInfo {
                    target_rps: 1000.0,
                    duration_ns: 2_000_000_000,
                    scheduled: 0,
                },
                &corral_loadgen::recorder::SendRecorder::new(),
                &corral_loadgen::recorder::ResponseRecorder::new(0, 10),
                &AdherencePolicy::default(),
            ),
            windows: Vec::new(),
            daemon: DaemonDiff::default(),
            gen_cost: GenCost::default(),
            kv: None,
            dns: None,
        }
    }

    #[test]
    fn results_read_back() {
        let spec = GenSpec::from_json(MINIMAL).unwrap();
        let result = GenResult {
            kv: Some(KvReport::default()),
            ..no_results(spec)
        };
        let json = serde_json::to_string(&result).unwrap();
        let value: Value = serde_json::from_str(&json).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["daemon", "gen_cost", "kv", "spec", "summary", "windows"]
        );
        assert_eq!(serde_json::from_str::<GenResult>(&json).unwrap(), result);
        // Results of a spin run, from before the field existed, still read.
        let mut old = value.clone();
        old.as_object_mut().unwrap().remove("kv");
        let read: GenResult = serde_json::from_value(old).unwrap();
        assert_eq!(read.kv, None);
    }

    #[test]
    fn the_protocol_is_spin_unless_memcache_tcp_is_asked_for() {
        assert_eq!(
            GenSpec::from_json(MINIMAL).unwrap().protocol,
            Protocol::Spin
        );
        let spec = GenSpec::from_json(&with(
            r#""protocol": "memcache-tcp", "clients": 128, "kv": {"keys": 500,
            "key_size": {"kind": "fixed", "bytes": 20}, "value_size": {"kind": "uniform",
            "min": 1, "max": 4000}, "max_value": 4000, "get_fraction": 0.5,
            "popularity": {"kind": "uniform"}, "seed": 3}"#,
        ))
        .unwrap();
        assert_eq!(spec.protocol, Protocol::MemcacheTcp);
        assert_eq!(
            (spec.clients, spec.kv.keys, spec.kv.get_fraction),
            (128, 500, 0.5)
        );
        assert_eq!(GenSpec::from_json(&spec.to_json()).unwrap(), spec);
        assert_eq!(
            "memcache-tcp".parse::<Protocol>(),
            Ok(Protocol::MemcacheTcp)
        );
        assert_eq!(Protocol::MemcacheTcp.to_string(), "memcache-tcp");
    }

    #[test]
    fn a_bad_protocol_or_workload_is_refused_with_its_field() {
        for (extra, field, expected) in [
            (
                r#""protocol": "memcache""#,
                "protocol",
                "spin, memcache-tcp or dns",
            ),
            (r#""protocol": 3"#, "protocol", "spin, memcache-tcp or dns"),
            (
                r#""protocol": "memcache-tcp", "clients": 20000"#,
                "clients",
                "TCP connections",
            ),
            (
                r#""protocol": "memcache-tcp", "window_ms": 10"#,
                "window_ms",
                "no latency windows",
            ),
            (
                r#""protocol": "memcache-tcp", "kv": {"keys": 0, "key_size": {"kind": "fixed",
                "bytes": 20}, "value_size": {"kind": "fixed", "bytes": 20}, "max_value": 20,
                "get_fraction": 0.5, "popularity": {"kind": "uniform"}, "seed": 3}"#,
                "kv.keys",
                "",
            ),
        ] {
            let e = error(&with(extra));
            assert_eq!(e.field, field, "{e}");
            assert!(e.expected.contains(expected), "{e}");
        }
        let e = error(&with(r#""protocol": "memcache""#));
        assert_eq!(
            e.to_string(),
            "invalid protocol = \"memcache\": expected spin, memcache-tcp or dns"
        );
    }

    #[test]
    fn a_dns_run_carries_its_queries() {
        let spec = GenSpec::from_json(&with(
            r#""protocol": "dns", "clients": 4, "dns": {"queries":
            "; a comment\nwww.example.com A\nnothing.example.com. AAAA\n", "edns": 1232}"#,
        ))
        .unwrap();
        assert_eq!(spec.protocol, Protocol::Dns);
        let dns = spec.dns.as_ref().unwrap();
        assert_eq!(dns.edns, Some(1232));
        assert_eq!(dns.mix().unwrap().len(), 2);
        assert_eq!(GenSpec::from_json(&spec.to_json()).unwrap(), spec);
        // Without EDNS; `edns` may be null or absent.
        for extra in [
            r#""protocol": "dns", "dns": {"queries": "example.org MX", "edns": null}"#,
            r#""protocol": "dns", "dns": {"queries": "example.org MX"}"#,
        ] {
            let spec = GenSpec::from_json(&with(extra)).unwrap();
            assert_eq!(spec.dns.as_ref().unwrap().edns, None);
            assert_eq!(GenSpec::from_json(&spec.to_json()).unwrap(), spec);
        }
        assert_eq!("dns".parse::<Protocol>(), Ok(Protocol::Dns));
        assert_eq!(Protocol::Dns.to_string(), "dns");
        // Other runs' specs have no `dns`.
        let spin = GenSpec::from_json(MINIMAL).unwrap();
        assert_eq!(spin.dns, None);
        assert!(!spin.to_json().contains("dns"), "{}", spin.to_json());
    }

    #[test]
    fn a_bad_dns_run_is_refused_with_its_field() {
        for (extra, field, expected) in [
            (r#""protocol": "dns""#, "dns", "the queries of a dns run"),
            (
                r#""dns": {"queries": "www.example.com A"}"#,
                "dns",
                "no dns object with protocol spin",
            ),
            (
                r#""protocol": "memcache-tcp", "dns": {"queries": "www.example.com A"}"#,
                "dns",
                "no dns object with protocol memcache-tcp",
            ),
            (
                r#""protocol": "dns", "dns": "www.example.com A""#,
                "dns",
                "queries",
            ),
            (
                r#""protocol": "dns", "dns": {}"#,
                "dns.queries",
                "NAME TYPE",
            ),
            (
                r#""protocol": "dns", "dns": {"queries": 5}"#,
                "dns.queries",
                "a valid value",
            ),
            (
                r#""protocol": "dns", "dns": {"queries": "a.example A", "file": "/etc/x"}"#,
                "dns.file",
                "no such field",
            ),
            (
                r#""protocol": "dns", "dns": {"queries": "a.example A", "edns": 70000}"#,
                "dns.edns",
                "a valid value",
            ),
            (
                r#""protocol": "dns", "dns": {"queries": "; nothing\n"}"#,
                "dns.queries",
                "dnsperf",
            ),
            (
                r#""protocol": "dns", "clients": 257, "dns": {"queries": "a.example A"}"#,
                "clients",
                "1 to 256",
            ),
        ] {
            let e = error(&with(extra));
            assert_eq!(e.field, field, "{extra}: {e}");
            assert!(e.expected.contains(expected), "{extra}: {e}");
        }
        // A bad line is named, with what is wrong with it.
        let e = error(&with(
            r#""protocol": "dns", "dns": {"queries": "www.example.com A\nwww.example.com BOGUS\n"}"#,
        ));
        assert_eq!(
            e.to_string(),
            "invalid dns.queries = line 2: unknown record type \"BOGUS\": expected NAME TYPE \
             per line, in dnsperf's format"
        );
        // Queries that make the spec longer than a control message holds.
        let line = "a-rather-long-label-to-fill-the-spec.example.com AAAA\n";
        let queries = line.repeat(corral_abi::control::MAX_GEN_SPEC_LEN / line.len() + 1);
        let e = error(&with(&format!(
            r#""protocol": "dns", "dns": {{"queries": "{}"}}"#,
            queries.replace('\n', "\\n")
        )));
        assert_eq!(e.field, "spec", "{e}");
        assert!(e.expected.contains("fewer phases or queries"), "{e}");
    }

    #[test]
    fn a_dns_runs_results_carry_the_counts() {
        let spec = GenSpec::from_json(&with(
            r#""protocol": "dns", "dns": {"queries": "www.example.com A"}"#,
        ))
        .unwrap();
        let result = GenResult {
            dns: Some(DnsCounts {
                noerror: 5,
                nxdomain: 4,
                refused: 3,
                servfail: 2,
                other_rcode: 1,
                truncated: 6,
                mismatched: 7,
            }),
            ..no_results(spec)
        };
        let value = serde_json::to_value(&result).unwrap();
        assert_eq!(
            value["dns"],
            serde_json::json!({"noerror": 5, "nxdomain": 4, "refused": 3, "servfail": 2,
                "other_rcode": 1, "truncated": 6, "mismatched": 7})
        );
        assert_eq!(value["spec"]["protocol"], "dns");
        assert_eq!(serde_json::from_value::<GenResult>(value).unwrap(), result);
    }
}
