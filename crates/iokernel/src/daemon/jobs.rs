//! Jobs of the NIC backend asked for on the control socket (`Request::Gen`: a traffic
//! generator run). The daemon only routes them: it hands the request to the backend
//! ([`Nic::start_job`](crate::nic::Nic::start_job)), polls the job along, sends its reply to
//! the connection that asked, and abandons it if that connection closes first. What a job
//! learns of the daemon is what [`DaemonView`] shows.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;

use corral_abi::control::Reply;
use log::{info, warn};

use super::{Daemon, Runtime, Sched, control_plane::send_text_reply, net::Tables};
use crate::alloc::CoreId;
use crate::nic::{Activity, DaemonView, refuse_jobs};
use crate::sys::now_ns;

/// The daemon as a backend's job sees it: borrowed apart from the NIC.
struct View<'a> {
    tables: &'a Tables,
    runtimes: &'a [Option<Box<Runtime>>],
    sched: &'a Sched,
    cores: usize,
    interval_us: u64,
}

impl DaemonView for View<'_> {
    fn mac_of(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.tables
            .ip_owner(ip.octets())
            .and_then(|slot| self.runtimes.get(slot)?.as_deref())
            .filter(|r| !r.doomed)
            .and_then(|r| r.net)
            .map(|net| net.mac)
    }

    fn activity(&self) -> Activity {
        let reallocations = (0..self.cores)
            .filter_map(|i| self.sched.alloc.core(CoreId(i as u16)).ok())
            .map(|c| c.stats.reallocations)
            .sum();
        let c = &self.sched.counters;
        Activity {
            at_ns: now_ns().max(self.sched.clock),
            interval_us: self.interval_us,
            wakes: c.wakes,
            preemptions: c.preemptions_signalled,
            reallocations,
            parks: c.parks,
            loop_stalls: c.loop_stalls,
            loop_stall_ns: c.loop_stall_ns,
        }
    }
}

impl Daemon {
    /// Handles a `Request::Gen` from the connection in slot `index`: hands it to the NIC
    /// backend, or answers at once with the reason it cannot be.
    pub(super) fn job_request(&mut self, index: usize, json: &str) {
        let Some((generation, pid)) = self
            .conns
            .get(index)
            .and_then(Option::as_ref)
            .map(|c| (c.generation, c.pid))
        else {
            return;
        };
        let view = View {
            tables: &self.switch.tables,
            runtimes: &self.runtimes,
            sched: &self.sched,
            cores: self.config.managed_cores.len(),
            interval_us: self.config.interval_us,
        };
        let started = match self.switch.nic.as_mut() {
            None => Err(refuse_jobs("none")),
            Some(nic) => nic.start_job(json, pid, &view),
        };
        match started {
            Ok(()) => self.job_owner = Some((index, generation)),
            Err(message) => {
                let conn = self.conns[index].as_ref().expect("checked above");
                info!("refused a gen run asked for by pid {pid}: {message}");
                // The connection stays open (it may be a runtime's, or the owner of the job in
                // progress); the client closes it.
                if let Err(e) = send_text_reply(conn.fd.as_fd(), &Reply::Error { message }) {
                    warn!("cannot send a gen refusal to pid {pid}: {e}");
                }
            }
        }
    }

    /// Moves the job in progress along and sends its reply once it has one.
    pub(super) fn poll_job(&mut self, now: u64) {
        let Some((index, generation)) = self.job_owner else {
            return;
        };
        let view = View {
            tables: &self.switch.tables,
            runtimes: &self.runtimes,
            sched: &self.sched,
            cores: self.config.managed_cores.len(),
            interval_us: self.config.interval_us,
        };
        let Some(reply) = self
            .switch
            .nic
            .as_mut()
            .and_then(|n| n.poll_job(now, &view))
        else {
            return;
        };
        self.job_owner = None;
        let Some(conn) = self
            .conns
            .get(index)
            .and_then(Option::as_ref)
            .filter(|c| c.generation == generation)
        else {
            return;
        };
        if let Err(e) = send_text_reply(conn.fd.as_fd(), &reply) {
            warn!("cannot send the gen results to pid {}: {e}", conn.pid);
            // Without a reply the client would wait for its time-out: tell it why instead (a
            // reply larger than the socket's send buffer may hold, say).
            let message = format!(
                "the run ended but its results could not be sent ({e}): ask for wider windows"
            );
            let _ = send_text_reply(conn.fd.as_fd(), &Reply::Error { message });
        }
    }

    /// Drops the job in progress because `why`.
    pub(super) fn abandon_job(&mut self, why: &str) {
        if self.job_owner.take().is_some()
            && let Some(nic) = self.switch.nic.as_mut()
        {
            nic.abandon_job(why);
        }
    }
}
