//! Runs of the `gen` backend as jobs of the control socket: a `Request::Gen` starts one (at
//! most one at a time), the loop plays it (the backend does that inside the receive and
//! transmit paths), and when it has ended [`Nic::poll_job`] hands back the results, which the
//! daemon sends on the connection that asked for it. A client that hangs up first abandons its
//! run.
//!
//! Nothing here waits. Ending a run is spread over control polls: the latency windows are
//! reported a time budget at a time, since thousands of them take milliseconds.

use std::io;

use corral_abi::control::{HEADER_LEN, MAX_REPLY_LEN, Reply};
use corral_iokernel::nic::{Activity, DaemonView, FrameBatch, Nic, NicCounters};
use log::info;

use crate::nic::{FinishedRun, Gen};
use crate::run::{DaemonDiff, GenResult, GenSpec};

/// Loop time spent reporting latency windows per control poll.
const REPORT_BUDGET_NS: u64 = 20_000;

/// The `gen` NIC backend: the traffic generator, and the run it plays for a control client.
pub struct GenBackend {
    generator: Gen,
    run: Option<Box<RunOwner>>,
}

/// The run in progress and who asked for it.
struct RunOwner {
    pid: i32,
    spec: GenSpec,
    before: Activity,
    /// Once the run has ended: the run being reported, and the counters at its end.
    finishing: Option<(FinishedRun, Activity)>,
}

impl GenBackend {
    /// A generator at `ip/prefix`, idle.
    pub fn new(ip: std::net::Ipv4Addr, prefix: u8) -> Self {
        GenBackend {
            generator: Gen::new(ip, prefix),
            run: None,
        }
    }

    fn start(&mut self, json: &str, pid: i32, daemon: &dyn DaemonView) -> Result<(), String> {
        let gen_ip = self.generator.ip();
        if let Some(owner) = &self.run {
            return Err(format!(
                "a gen run is already in progress (loading {} for pid {}): one run at a time",
                owner.spec.target, owner.pid
            ));
        }
        let spec = GenSpec::from_json(json).map_err(|e| e.to_string())?;
        let target = spec.target_addr().map_err(|e| e.to_string())?;
        let ip = *target.ip();
        if ip == gen_ip {
            return Err(format!(
                "invalid target = {target}: {ip} is the generator's own address (host_ip)"
            ));
        }
        let mac = daemon
            .mac_of(ip)
            .ok_or_else(|| format!("invalid target = {target}: no registered runtime owns {ip}"))?;
        let before = daemon.activity();
        self.generator.start(&spec, mac)?;
        info!(
            "gen: run for pid {pid} started: {} phase(s) over {:.3} s against {target} \
             (MAC {:02x?}), protocol {}: {}, {} ms grace",
            spec.phases.len(),
            spec.duration_ns() as f64 / 1e9,
            mac,
            spec.protocol,
            spec.workload(),
            spec.grace_ms
        );
        self.run = Some(Box::new(RunOwner {
            pid,
            spec,
            before,
            finishing: None,
        }));
        Ok(())
    }

    /// Moves the run in progress along: takes it from the generator once it has ended,
    /// reports its windows a budget at a time, then returns the results.
    fn poll(&mut self, now: u64, daemon: &dyn DaemonView) -> Option<Reply> {
        let owner = self.run.as_deref_mut()?;
        match owner.finishing.as_mut() {
            None => {
                let run = self.generator.take_finished(now)?;
                owner.finishing = Some((run, daemon.activity()));
                None
            }
            Some((run, _)) => {
                if run.report_windows(REPORT_BUDGET_NS) {
                    self.complete()
                } else {
                    None
                }
            }
        }
    }

    /// The results of the run whose windows are all reported.
    fn complete(&mut self) -> Option<Reply> {
        let RunOwner {
            pid,
            spec,
            before,
            finishing,
        } = *self.run.take()?;
        let (run, after) = finishing?;
        let target = run.target();
        if let Some(why) = run.failure() {
            info!("gen: run for pid {pid} against {target} given up: {why}");
            return Some(Reply::Error {
                message: why.to_owned(),
            });
        }
        let kv = run.kv_report();
        let dns = run.dns_counts();
        let (summary, windows, gen_cost) = run.finish(&spec.policy);
        let span_s = after.at_ns.saturating_sub(before.at_ns) as f64 / 1e9;
        let reallocations = after.reallocations.saturating_sub(before.reallocations);
        let daemon = DaemonDiff {
            interval_us: after.interval_us,
            wakes: after.wakes.saturating_sub(before.wakes),
            preemptions: after.preemptions.saturating_sub(before.preemptions),
            reallocations,
            reallocations_per_s: if span_s > 0.0 {
                reallocations as f64 / span_s
            } else {
                0.0
            },
            parks: after.parks.saturating_sub(before.parks),
            loop_stalls: after.loop_stalls.saturating_sub(before.loop_stalls),
            loop_stall_ns: after.loop_stall_ns.saturating_sub(before.loop_stall_ns),
        };
        info!(
            "gen: run for pid {pid} against {target} done: {summary}; the generator cost \
             {:.1} ns per request",
            gen_cost.ns_per_request
        );
        let result = GenResult {
            spec,
            summary,
            windows,
            daemon,
            gen_cost,
            kv,
            dns,
        };
        Some(match serde_json::to_string(&result) {
            Ok(json) if json.len() <= MAX_REPLY_LEN - HEADER_LEN => Reply::Gen { json },
            Ok(json) => Reply::Error {
                message: format!(
                    "the results are {} bytes of JSON, more than a reply holds ({}): ask for \
                     wider windows",
                    json.len(),
                    MAX_REPLY_LEN - HEADER_LEN
                ),
            },
            Err(e) => Reply::Error {
                message: format!("cannot encode the results: {e}"),
            },
        })
    }
}

impl Nic for GenBackend {
    fn name(&self) -> &'static str {
        self.generator.name()
    }

    fn describe(&self) -> String {
        self.generator.describe()
    }

    fn recv_burst(&mut self, out: &mut FrameBatch) -> usize {
        self.generator.recv_burst(out)
    }

    fn recv_burst_at(&mut self, out: &mut FrameBatch, now: u64) -> usize {
        self.generator.recv_burst_at(out, now)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.generator.send(frame)
    }

    fn counters(&self) -> NicCounters {
        self.generator.counters()
    }

    fn idle_poll_interval_ns(&self) -> u64 {
        self.generator.idle_poll_interval_ns()
    }

    fn start_job(&mut self, json: &str, pid: i32, daemon: &dyn DaemonView) -> Result<(), String> {
        self.start(json, pid, daemon)
    }

    fn poll_job(&mut self, now: u64, daemon: &dyn DaemonView) -> Option<Reply> {
        self.poll(now, daemon)
    }

    fn abandon_job(&mut self, why: &str) {
        let Some(owner) = self.run.take() else {
            return;
        };
        self.generator.abandon();
        info!(
            "gen: run for pid {} against {} abandoned: {why}",
            owner.pid, owner.spec.target
        );
    }
}
