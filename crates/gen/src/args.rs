//! `iokerneld gen`'s arguments: a run spec as command-line flags.

use std::path::PathBuf;

use clap::Args;

/// `iokerneld gen`'s arguments.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Control socket to connect to [default: the `socket` setting].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// The service to load: IP:PORT of a server on a registered runtime (a UDP spin server, a
    /// memcached server over TCP, or an authoritative DNS server, per --protocol).
    #[arg(long, value_name = "IP:PORT")]
    pub target: String,

    /// Target rate in requests per second (with --duration; or use --phase).
    #[arg(long, value_name = "RPS", required_unless_present = "phase")]
    pub rate: Option<f64>,

    /// Seconds of requests (with --rate).
    #[arg(long, value_name = "SECONDS", required_unless_present = "phase")]
    pub duration: Option<f64>,

    /// A phase of RPS requests per second for SECONDS, such as 20000@1.5; repeat for phases
    /// played back to back (request ids continue). Replaces --rate and --duration.
    #[arg(
        long = "phase",
        value_name = "RPS@SECONDS",
        value_parser = parse_phase,
        conflicts_with_all = ["rate", "duration"]
    )]
    pub phase: Vec<crate::run::PhaseSpec>,

    /// Service time each request asks for: `exp:10us`, `const:10us`, `bimodal` (90% 5us / 10%
    /// 55us) or `bimodal:SHORT:LONG:LONG_FRACTION`.
    #[arg(long, value_name = "DIST", default_value = "exp:10us")]
    pub service: corral_loadgen::ServiceDist,

    /// Gaps between requests: `poisson` or `constant`.
    #[arg(long, value_name = "KIND", default_value = "poisson")]
    pub arrivals: corral_loadgen::Arrivals,

    /// Simulated clients; client C sends from UDP port 40000 + C % 1024 (with
    /// `--protocol memcache-tcp`: TCP connections, connection C from port 40000 + C, key K
    /// over connection K % N; with `--protocol dns`: at most 256, each with a DNS ID space of
    /// its own).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub clients: u32,

    /// Seed of the schedule.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,

    /// Bytes of each request's UDP payload (64 to 1472).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub payload: usize,

    /// Milliseconds after the last send (or the end of the last phase, if later) that
    /// responses still count.
    #[arg(long, value_name = "MS", default_value_t = 100.0)]
    pub grace_ms: f64,

    /// Also report latency per window of this many milliseconds of scheduled send time.
    #[arg(long, value_name = "MS")]
    pub window_ms: Option<f64>,

    /// The generator fell behind if its p99 send lateness exceeds this many microseconds.
    #[arg(long, value_name = "US", default_value_t = 10.0)]
    pub max_p99_lateness_us: f64,

    /// The generator fell behind if it sent at less than this fraction of the offered rate.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.99)]
    pub min_send_ratio: f64,

    /// What the requests are: `spin` (UDP, echoed by a spin server), `memcache-tcp`
    /// (memcached gets and sets over one TCP connection per client, replies checked) or `dns`
    /// (DNS queries over UDP from --queries, each reply matched by client port and DNS ID and
    /// checked against its question; --service and --payload are not used).
    #[arg(long, value_name = "PROTOCOL", default_value = "spin")]
    pub protocol: crate::run::Protocol,

    /// The queries of `--protocol dns` (boxed, as `kv`).
    #[command(flatten)]
    pub dns: Box<DnsArgs>,

    /// The key-value workload of `--protocol memcache-tcp` (boxed: the flags are many and
    /// large, and every other run leaves them at their defaults).
    #[command(flatten)]
    pub kv: Box<KvArgs>,

    /// Write the JSON results to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `iokerneld gen`'s DNS flags.
#[derive(Debug, Args)]
pub struct DnsArgs {
    /// DNS: the queries, in dnsperf's format (`NAME TYPE` per line), asked in order, round and
    /// round. Read here and sent in the run's spec, which holds at most 64 KiB.
    #[arg(long, value_name = "FILE")]
    pub queries: Option<PathBuf>,

    /// DNS: EDNS UDP payload size the queries offer (no OPT record if absent).
    #[arg(long, value_name = "BYTES")]
    pub edns: Option<u16>,
}

/// `iokerneld gen`'s key-value workload flags.
#[derive(Debug, Args)]
pub struct KvArgs {
    /// memcached: keys in the key space.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub keys: u64,

    /// memcached: key sizes: `fixed:N`, `uniform:[MIN:]MAX`, `gev:LOC:SCALE:SHAPE`,
    /// `gpareto:LOC:SCALE:SHAPE`, `fb_key` (mutilate's ETC key sizes).
    #[arg(long, value_name = "DIST", default_value = "fixed:30")]
    pub key_size: corral_loadgen::kv::SizeDist,

    /// memcached: value sizes, in the same forms, or `fb_value` (mutilate's ETC value sizes).
    #[arg(long, value_name = "DIST", default_value = "fixed:200")]
    pub value_size: corral_loadgen::kv::SizeDist,

    /// memcached: largest value; larger draws are clamped.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_value: u32,

    /// memcached: fraction of requests that are gets (the rest are sets).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub get_fraction: f64,

    /// memcached: key popularity, `uniform` or `zipf:S`.
    #[arg(long, value_name = "KIND", default_value = "uniform")]
    pub popularity: corral_loadgen::kv::Popularity,

    /// memcached: do not set every key before the schedule starts (gets of keys not yet set
    /// then miss).
    #[arg(long)]
    pub no_preload: bool,
}

/// The refusal of a query file too large for a run's spec (`spec_len`: the JSON it made, if
/// it was read).
fn too_big(path: &std::path::Path, size: u64, spec_len: Option<usize>) -> String {
    let most = corral_abi::control::MAX_GEN_SPEC_LEN;
    let made = spec_len.map_or(String::new(), |len| {
        format!(" (with them the spec is {len} bytes)")
    });
    format!(
        "{}: {size} bytes of queries do not fit in a run's spec, which holds at most {most} \
         bytes of JSON{made}: use fewer queries",
        path.display()
    )
}

/// `RPS@SECONDS`.
fn parse_phase(text: &str) -> Result<crate::run::PhaseSpec, String> {
    let (rate, seconds) = text
        .split_once('@')
        .ok_or_else(|| format!("{text:?}: expected RPS@SECONDS, such as 20000@1.5"))?;
    let number = |s: &str, what: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| format!("{text:?}: {s:?} is not a number of {what}"))
    };
    Ok(crate::run::PhaseSpec {
        rate_rps: number(rate, "requests per second")?,
        duration_s: number(seconds, "seconds")?,
    })
}

impl GenArgs {
    /// The run spec these arguments ask for, checked (with `--protocol dns`, the query file
    /// read into it); the error names the flag, the field or the file.
    pub fn spec(&self) -> Result<crate::run::GenSpec, String> {
        let dns = self.dns()?;
        let mut spec = self.spec_without_queries().map_err(|e| e.to_string())?;
        let Some((path, size, dns)) = dns else {
            spec.validate().map_err(|e| e.to_string())?;
            return Ok(spec);
        };
        spec.dns = Some(dns);
        let len = spec.to_json().len();
        let most = corral_abi::control::MAX_GEN_SPEC_LEN;
        if len > most {
            return Err(too_big(&path, size, Some(len)));
        }
        spec.validate().map_err(|e| match e.field.as_str() {
            "dns.queries" => format!("{}: {}", path.display(), e.value),
            _ => e.to_string(),
        })?;
        Ok(spec)
    }

    /// The query file of `--protocol dns`: its path, its size, and its text with `--edns`.
    fn dns(&self) -> Result<Option<(PathBuf, u64, crate::run::DnsSpec)>, String> {
        if self.protocol != crate::run::Protocol::Dns {
            return match (&self.dns.queries, self.dns.edns) {
                (None, None) => Ok(None),
                _ => Err(format!(
                    "--queries and --edns are for --protocol dns, not {}",
                    self.protocol
                )),
            };
        }
        let path = self
            .dns
            .queries
            .clone()
            .ok_or("--protocol dns needs --queries FILE")?;
        let read = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
        let size = std::fs::metadata(&path).map_err(read)?.len();
        // Only a file that can fit is read.
        if size > corral_abi::control::MAX_GEN_SPEC_LEN as u64 {
            return Err(too_big(&path, size, None));
        }
        let queries = std::fs::read_to_string(&path).map_err(read)?;
        let dns = crate::run::DnsSpec {
            queries,
            edns: self.dns.edns,
        };
        Ok(Some((path, size, dns)))
    }

    /// The spec of every flag but `--queries` and `--edns`, not yet validated.
    fn spec_without_queries(&self) -> Result<crate::run::GenSpec, crate::run::GenSpecError> {
        let phases = if self.phase.is_empty() {
            vec![crate::run::PhaseSpec {
                rate_rps: self.rate.unwrap_or(0.0),
                duration_s: self.duration.unwrap_or(0.0),
            }]
        } else {
            self.phase.clone()
        };
        let lateness_ns = self.max_p99_lateness_us * 1e3;
        if !(lateness_ns.is_finite() && lateness_ns >= 0.0) {
            return Err(crate::run::GenSpecError {
                field: "max-p99-lateness-us".into(),
                value: self.max_p99_lateness_us.to_string(),
                expected: "a non-negative number of microseconds".into(),
            });
        }
        let spec = crate::run::GenSpec {
            target: self.target.clone(),
            phases,
            arrivals: self.arrivals,
            service: self.service,
            clients: self.clients,
            seed: self.seed,
            payload: self.payload,
            grace_ms: self.grace_ms,
            window_ms: self.window_ms,
            policy: corral_loadgen::AdherencePolicy {
                max_p99_lateness_ns: lateness_ns.round() as u64,
                min_send_ratio: self.min_send_ratio,
            },
            protocol: self.protocol,
            kv: corral_loadgen::kv::KvWorkload {
                keys: self.kv.keys,
                key_size: self.kv.key_size,
                value_size: self.kv.value_size,
                max_value: self.kv.max_value,
                get_fraction: self.kv.get_fraction,
                popularity: self.kv.popularity,
                seed: self.seed,
            },
            preload: !self.kv.no_preload,
            dns: None,
        };
        Ok(spec)
    }
}
