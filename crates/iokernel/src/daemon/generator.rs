//! Runs of the `gen` NIC backend as the daemon sees them: a `Request::Gen` starts one (at most
//! one at a time), the loop plays it (the backend does that inside the receive and transmit
//! paths), and when it has ended the results go back on the connection that asked for it. A
//! client that hangs up first abandons its run.
//!
//! Nothing here waits. Ending a run is spread over control polls: the latency windows are
//! reported a time budget at a time, since thousands of them take milliseconds.

use std::os::fd::AsFd;

use corral_abi::control::{HEADER_LEN, MAX_REPLY_LEN, Reply};
use log::{info, warn};

use super::{Daemon, Sched};
use crate::alloc::CoreId;
use crate::genrun::{DaemonDiff, GenResult, GenSpec};
use crate::nic::FinishedRun;

/// Loop time spent reporting latency windows per control poll.
const REPORT_BUDGET_NS: u64 = 20_000;

/// The run in progress and who asked for it.
pub(super) struct GenOwner {
    /// The requesting connection's slot and generation.
    conn: usize,
    generation: u32,
    pid: i32,
    spec: GenSpec,
    before: Snapshot,
    /// Once the run has ended: the run being reported, and the counters at its end.
    finishing: Option<(FinishedRun, Snapshot)>,
}

impl GenOwner {
    /// Whether the connection in slot `conn` with this generation asked for the run.
    pub(super) fn is_conn(&self, conn: usize, generation: u32) -> bool {
        (self.conn, self.generation) == (conn, generation)
    }
}

/// The daemon's counters that a run reports differences of.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    at_ns: u64,
    wakes: u64,
    preemptions: u64,
    reallocations: u64,
    parks: u64,
    loop_stalls: u64,
    loop_stall_ns: u64,
}

fn snapshot(sched: &mut Sched, cores: usize) -> Snapshot {
    let reallocations = (0..cores)
        .filter_map(|i| sched.alloc.core(CoreId(i as u16)).ok())
        .map(|c| c.stats.reallocations)
        .sum();
    Snapshot {
        at_ns: sched.now(),
        wakes: sched.counters.wakes,
        preemptions: sched.counters.preemptions_signalled,
        reallocations,
        parks: sched.counters.parks,
        loop_stalls: sched.counters.loop_stalls,
        loop_stall_ns: sched.counters.loop_stall_ns,
    }
}

impl Daemon {
    /// Handles a `Request::Gen` from the connection in slot `index`: starts the run, or
    /// answers at once with the reason it cannot be.
    pub(super) fn gen_request(&mut self, index: usize, json: &str) {
        if let Err(message) = self.start_gen(index, json)
            && let Some(conn) = self.conns.get(index).and_then(Option::as_ref)
        {
            info!("refused a gen run asked for by pid {}: {message}", conn.pid);
            // The connection stays open (it may be a runtime's, or the owner of the run in
            // progress); the client closes it.
            if let Err(e) =
                super::control_plane::send_text_reply(conn.fd.as_fd(), &Reply::Error { message })
            {
                warn!("cannot send a gen refusal to pid {}: {e}", conn.pid);
            }
        }
    }

    fn start_gen(&mut self, index: usize, json: &str) -> Result<(), String> {
        let backend = self.switch.nic.as_ref().map_or("none", |n| n.name());
        let Some(gen_ip) = self
            .switch
            .nic
            .as_mut()
            .and_then(|n| n.as_gen())
            .map(|g| g.ip())
        else {
            return Err(format!(
                "this iokerneld's NIC backend is {backend}, not gen: start iokerneld with \
                 --nic gen to play runs"
            ));
        };
        if let Some(owner) = &self.gen_run {
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
        let mac = self
            .switch
            .tables
            .ip_owner(ip.octets())
            .and_then(|slot| self.runtimes.get(slot)?.as_deref())
            .filter(|r| !r.doomed)
            .and_then(|r| r.net)
            .map(|net| net.mac)
            .ok_or_else(|| format!("invalid target = {target}: no registered runtime owns {ip}"))?;
        let (generation, pid) = match self.conns.get(index).and_then(Option::as_ref) {
            Some(conn) => (conn.generation, conn.pid),
            None => return Err("the connection is closed".into()),
        };
        let before = snapshot(&mut self.sched, self.config.managed_cores.len());
        let generator = self
            .switch
            .nic
            .as_mut()
            .and_then(|n| n.as_gen())
            .expect("checked above");
        generator.start(&spec, mac)?;
        info!(
            "gen: run for pid {pid} started: {} phase(s) over {:.3} s against {target} \
             (MAC {:02x?}), {} clients, {}-byte payloads, {} ms grace",
            spec.phases.len(),
            spec.duration_ns() as f64 / 1e9,
            mac,
            spec.clients,
            spec.payload,
            spec.grace_ms
        );
        self.gen_run = Some(Box::new(GenOwner {
            conn: index,
            generation,
            pid,
            spec,
            before,
            finishing: None,
        }));
        Ok(())
    }

    /// Moves the run in progress along: takes it from the generator once it has ended,
    /// reports its windows a budget at a time, then sends the results.
    pub(super) fn poll_gen(&mut self, now: u64) {
        let Some(owner) = self.gen_run.as_deref_mut() else {
            return;
        };
        match owner.finishing.as_mut() {
            None => {
                let Some(run) = self
                    .switch
                    .nic
                    .as_mut()
                    .and_then(|n| n.as_gen())
                    .and_then(|g| g.take_finished(now))
                else {
                    return;
                };
                let after = snapshot(&mut self.sched, self.config.managed_cores.len());
                owner.finishing = Some((run, after));
            }
            Some((run, _)) => {
                if run.report_windows(REPORT_BUDGET_NS) {
                    self.complete_gen();
                }
            }
        }
    }

    /// Sends the results of the run whose windows are all reported.
    fn complete_gen(&mut self) {
        let Some(owner) = self.gen_run.take() else {
            return;
        };
        let GenOwner {
            conn,
            generation,
            pid,
            spec,
            before,
            finishing,
        } = *owner;
        let Some((run, after)) = finishing else {
            return;
        };
        let target = run.target();
        let (summary, windows, gen_cost) = run.finish(&spec.policy);
        let span_s = after.at_ns.saturating_sub(before.at_ns) as f64 / 1e9;
        let reallocations = after.reallocations.saturating_sub(before.reallocations);
        let daemon = DaemonDiff {
            interval_us: self.config.interval_us,
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
        };
        let reply = match serde_json::to_string(&result) {
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
        };
        let Some(conn) = self
            .conns
            .get(conn)
            .and_then(Option::as_ref)
            .filter(|c| c.generation == generation)
        else {
            return;
        };
        if let Err(e) = super::control_plane::send_text_reply(conn.fd.as_fd(), &reply) {
            warn!("cannot send the gen results to pid {pid}: {e}");
            // Without a reply the client would wait for its time-out: tell it why instead (a
            // reply larger than the socket's send buffer may hold, say).
            let message = format!(
                "the run ended but its results could not be sent ({e}): ask for wider windows"
            );
            let _ =
                super::control_plane::send_text_reply(conn.fd.as_fd(), &Reply::Error { message });
        }
    }

    /// Drops the run in progress because `why`.
    pub(super) fn abandon_gen(&mut self, why: &str) {
        let Some(owner) = self.gen_run.take() else {
            return;
        };
        if let Some(generator) = self.switch.nic.as_mut().and_then(|n| n.as_gen()) {
            generator.abandon();
        }
        info!(
            "gen: run for pid {} against {} abandoned: {why}",
            owner.pid, owner.spec.target
        );
    }
}
