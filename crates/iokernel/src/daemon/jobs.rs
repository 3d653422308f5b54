//! Jobs of the NIC backend asked for on the control socket (`Request::Gen`: a traffic
//! generator run). The daemon only routes them: it hands the request to the backend
//! ([`Nic::start_job`](crate::nic::Nic::start_job)), polls the job along, sends its reply to
//! the connection that asked, and abandons it if that connection closes first. What a job
//! learns of the daemon is what [`DaemonView`] shows.

use std::net::Ipv4Addr;

use corral_abi::control::Reply;
use log::{info, warn};

use super::control_plane::ConnRef;
use super::driver::CoreDriver;
use super::net::Tables;
use super::registry::Registry;
use super::{Daemon, LoopCounters};
use crate::nic::{Activity, DaemonView, Nic, refuse_jobs};
use crate::sys::now_ns;
use corral_policy::CoreId;

/// The daemon as a backend's job sees it: borrowed apart from the NIC.
struct View<'a> {
    tables: &'a Tables,
    registry: &'a Registry,
    driver: &'a CoreDriver,
    counters: &'a LoopCounters,
    cores: usize,
    interval_us: u64,
}

impl DaemonView for View<'_> {
    fn mac_of(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.tables
            .ip_owner(ip.octets())
            .and_then(|slot| self.registry.at(slot))
            .filter(|r| !r.evicting)
            .and_then(|r| r.net)
            .map(|net| net.mac)
    }

    fn activity(&self) -> Activity {
        let alloc = self.driver.alloc();
        let reallocations = (0..self.cores)
            .filter_map(|i| alloc.core(CoreId(i as u16)).ok())
            .map(|c| c.stats.reallocations)
            .sum();
        let c = self.driver.counters();
        Activity {
            at_ns: now_ns().max(self.driver.clock()),
            interval_us: self.interval_us,
            wakes: c.wakes,
            preemptions: c.preemptions_signalled,
            reallocations,
            parks: c.parks,
            loop_stalls: self.counters.stalls,
            loop_stall_ns: self.counters.stall_ns,
        }
    }
}

impl Daemon {
    /// The NIC backend, and the rest of the daemon as its job sees it.
    fn nic_and_view(&mut self) -> (Option<&mut (dyn Nic + 'static)>, View<'_>) {
        let (nic, tables) = self.switch.nic_mut();
        let view = View {
            tables,
            registry: &self.registry,
            driver: &self.driver,
            counters: &self.counters,
            cores: self.config.managed_cores.len(),
            interval_us: self.config.interval_us,
        };
        (nic, view)
    }

    /// Handles a `Request::Gen` from `conn`: hands it to the NIC backend, or answers at once
    /// with the reason it cannot be.
    pub(super) fn job_request(&mut self, conn: ConnRef, json: &str) {
        let Some(pid) = self.control.pid(conn) else {
            return;
        };
        let (nic, view) = self.nic_and_view();
        let started = match nic {
            None => Err(refuse_jobs("none")),
            Some(nic) => nic.start_job(json, pid, &view),
        };
        match started {
            Ok(()) => self.control.own_job(conn),
            Err(message) => {
                if self.control.may_log_refusal() {
                    info!("refused a gen run asked for by pid {pid}: {message}");
                }
                // The connection stays open (it may be a runtime's, or the owner of the job in
                // progress); the client closes it.
                if let Err(e) = self.control.reply_text(conn, &Reply::Error { message }) {
                    warn!("cannot send a gen refusal to pid {pid}: {e}");
                }
            }
        }
    }

    /// Moves the job in progress along and sends its reply once it has one.
    pub(super) fn poll_job(&mut self, now: u64) {
        if self.control.job_owner().is_none() {
            return;
        }
        let (nic, view) = self.nic_and_view();
        let Some(reply) = nic.and_then(|n| n.poll_job(now, &view)) else {
            return;
        };
        let Some(conn) = self.control.end_job() else {
            return;
        };
        if let Err(e) = self.control.reply_text(conn, &reply) {
            let pid = self.control.pid(conn).unwrap_or(0);
            warn!("cannot send the gen results to pid {pid}: {e}");
            // Without a reply the client would wait for its time-out: tell it why instead (a
            // reply larger than the socket's send buffer may hold, say).
            let message = format!(
                "the run ended but its results could not be sent ({e}): ask for wider windows"
            );
            let _ = self.control.reply_text(conn, &Reply::Error { message });
        }
    }
}
