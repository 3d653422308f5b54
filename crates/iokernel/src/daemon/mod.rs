//! The iokerneld daemon: one busy-polling thread that drains the runtimes' command rings, runs
//! the core allocator every interval, carries out its decisions, and every `control_poll_us`
//! serves the control socket (registrations, statistics, NIC backend jobs, hang-ups).
//!
//! The loop composes four components, each owning its state: the control plane
//! (`control_plane.rs`: the socket and its connections), the registry of runtimes
//! (`registry.rs`), the switch (`net.rs`: steering, rings, NIC) and the core driver
//! (`driver.rs`: the allocator, what feeds it and what carries out its decisions). What needs
//! more than one of them (registering, evicting, answering statistics, a NIC backend's jobs) is
//! done here and in `registration.rs`, `stats.rs` and `jobs.rs`.
//!
//! Everything a runtime wrote is untrusted: a bad command, impossible queue counters or a
//! kthread that cannot be woken evicts that runtime (its threads are moved off the managed
//! cores, its cores reclaimed) and nothing else. All per-runtime state lives in tables that
//! are allocated at registration; a pass and a loop iteration allocate nothing.

mod backlog;
mod control_plane;
mod driver;
pub mod faults;
mod handoff;
mod jobs;
mod kick;
mod log_limit;
mod net;
mod registration;
mod registry;
mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use corral_abi::control::{ControlError, Reply, Request};
use log::warn;

use crate::config::Config;
use crate::sys::now_ns;
use control_plane::{ConnRef, ControlPlane, Incoming};
use corral_policy::{Policy, RuntimeId};
use driver::CoreDriver;
use registry::Registry;

pub use backlog::BACKLOG_SLOT_BYTES;
pub use handoff::HandoffStats;
use net::Switch;
pub use net::{CONTROL_RESERVE, MAX_FRAME, NetDrop, NetStats, TX_BURST};
pub use stats::{
    FaultDirectionStats, FaultStats, GlobalStats, HandoverStats, NicStats, RuntimeNetStats,
    RuntimeStats, Stats,
};

/// The wire form of a runtime id: slot in the low half, generation in the high half.
pub fn encode_runtime_id(id: RuntimeId) -> u64 {
    u64::from(id.slot()) | u64::from(id.generation()) << 32
}

/// Inverse of [`encode_runtime_id`].
pub fn decode_runtime_id(wire: u64) -> RuntimeId {
    RuntimeId::from_parts(wire as u32, (wire >> 32) as u32)
}

/// A loop iteration longer than this is counted as a stall: normal ones take well under a
/// microsecond, so this much means the daemon did not have its CPU.
pub const LOOP_STALL_NS: u64 = 50_000;

/// The loop's own counters.
#[derive(Clone, Copy, Debug, Default)]
struct LoopCounters {
    iterations: u64,
    /// Loop iterations that took longer than [`LOOP_STALL_NS`] (the daemon was descheduled, or
    /// the machine took its CPU away), their total and the longest.
    stalls: u64,
    stall_ns: u64,
    stall_max_ns: u64,
}

/// The daemon: the loop that composes the control plane (the control socket and its
/// connections), the registry of runtimes, the switch (packet steering and the NIC) and the
/// core driver (the allocator, what feeds it and what carries out its decisions). See the
/// module documentation.
pub struct Daemon {
    config: Config,
    control: ControlPlane,
    registry: Registry,
    switch: Switch,
    driver: CoreDriver,
    counters: LoopCounters,
    started: Instant,
}

impl Daemon {
    /// A daemon serving `listener` with `alloc` over `config.managed_cores`, switching packets
    /// between its runtimes and `nic` (`None`: among runtimes only).
    pub fn new(
        config: Config,
        alloc: Box<dyn Policy>,
        listener: std::os::fd::OwnedFd,
        nic: Option<Box<dyn crate::nic::Nic>>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            control: ControlPlane::new(listener)?,
            registry: Registry::default(),
            switch: Switch::new(nic, &config.faults),
            driver: CoreDriver::new(alloc, &config)?,
            counters: LoopCounters::default(),
            config,
            started: Instant::now(),
        })
    }

    /// Busy-polls until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        let interval = self.config.interval_us * 1000;
        let poll = self.config.control_poll_us * 1000;
        let mut next_pass = now_ns() + interval;
        let mut next_poll = 0;
        let mut last = now_ns();
        while !stop.load(Ordering::Relaxed) {
            self.counters.iterations += 1;
            self.driver.drain_commands(&mut self.registry);
            self.execute();
            let now = now_ns();
            self.driver.chase_handovers(&mut self.registry, now);
            let took = now.saturating_sub(last);
            last = now;
            if took > LOOP_STALL_NS {
                let c = &mut self.counters;
                c.stalls += 1;
                c.stall_ns += took;
                c.stall_max_ns = c.stall_max_ns.max(took);
            }
            self.switch
                .drain_backlogs(now, &mut self.registry, &mut self.driver);
            self.switch
                .poll_nic(now, &mut self.registry, &mut self.driver);
            self.switch
                .release_held(now, &mut self.registry, &mut self.driver);
            self.switch
                .drain_tx(now, &mut self.registry, &mut self.driver);
            self.execute();
            if now >= next_pass {
                // Parks that came in since the drain above (this loop may have lost its CPU
                // meanwhile) must be seen before the pass judges a hand-over overdue.
                self.driver.drain_commands(&mut self.registry);
                self.execute();
                self.driver.pass(&mut self.registry);
                self.execute();
                next_pass += interval;
                if next_pass <= now {
                    // Fell behind (descheduled, say): do not run a burst of passes to catch up.
                    next_pass = now + interval;
                }
            }
            if now >= next_poll {
                self.poll_job(now);
                self.poll_control();
                self.execute();
                next_poll = now + poll;
            }
            core::hint::spin_loop();
        }
    }

    /// Carries out the allocator's decisions and pending evictions, including whatever they
    /// lead to, in order.
    fn execute(&mut self) {
        loop {
            if self.driver.carry_out_decisions(&mut self.registry) {
                continue;
            }
            match self.registry.next_eviction() {
                Some((id, reason)) => self.evict(id, &reason, true),
                None => break,
            }
        }
    }

    /// Handles whatever happened on the control socket since the last poll.
    fn poll_control(&mut self) {
        self.control.poll();
        while let Some(incoming) = self.control.next() {
            match incoming {
                Incoming::Request { conn, request, fds } => self.request(conn, request, fds),
                Incoming::Unreadable { conn, message } => self.refuse(conn, message),
                Incoming::HangUp(conn) => self.hang_up(conn, "connection closed"),
            }
        }
    }

    fn request(
        &mut self,
        conn: ConnRef,
        request: Result<Request, ControlError>,
        fds: Vec<std::os::fd::OwnedFd>,
    ) {
        if !self.control.is_open(conn) {
            return;
        }
        match request {
            Err(e) => self.refuse(conn, e.to_string()),
            Ok(Request::Stats) => {
                let json = self.stats_json();
                if let Err(e) = self.control.reply_text(conn, &Reply::Stats { json }) {
                    let pid = self.control.pid(conn).unwrap_or(0);
                    warn!("cannot send statistics to pid {pid}: {e}");
                }
            }
            Ok(Request::Gen { json }) => self.job_request(conn, &json),
            Ok(Request::Register(registration)) => {
                if let Some(id) = self.control.runtime(conn) {
                    let message = format!("this connection already registered {id}");
                    self.refuse(conn, message);
                    return;
                }
                if let Err(message) = self.register(conn, registration, fds) {
                    self.refuse(conn, message);
                }
            }
        }
    }

    /// Answers a request that did not make sense: a registered runtime keeps its connection,
    /// anyone else loses it.
    fn refuse(&mut self, conn: ConnRef, message: String) {
        if self.control.refuse(conn, message) {
            self.close_conn(conn);
        }
    }

    /// The peer closed its connection: a registered runtime is gone.
    fn hang_up(&mut self, conn: ConnRef, reason: &str) {
        if !self.control.is_open(conn) {
            return;
        }
        match self.control.runtime(conn) {
            Some(id) => self.evict(id, reason, false),
            None => self.close_conn(conn),
        }
    }

    /// Closes a connection (its runtime, if any, must already be gone) and abandons the job it
    /// asked for.
    fn close_conn(&mut self, conn: ConnRef) {
        let Some(closed) = self.control.close(conn) else {
            return;
        };
        if closed.owned_job
            && let (Some(nic), _) = self.switch.nic_mut()
        {
            nic.abandon_job("the connection that asked for it closed");
        }
        if let Some(id) = closed.runtime
            && self.registry.get(id).is_some()
        {
            // Never happens through the paths above; keep the tables consistent anyway.
            self.registry
                .mark_for_eviction(id, "its connection was closed".into());
        }
    }

    /// Removes a runtime: its threads leave the managed cores, the allocator reclaims its cores,
    /// its memory is unmapped and its descriptors and connection closed. `misbehaved`: it broke
    /// the contract (as opposed to hanging up), so it is told why and counted as an eviction.
    fn evict(&mut self, id: RuntimeId, reason: &str, misbehaved: bool) {
        let Some(mut tenant) = self.registry.remove(id, misbehaved) else {
            return;
        };
        if misbehaved {
            warn!("evicting {}: {reason}", tenant.label());
            let message = format!("evicted: {reason}");
            let _ = self.control.reply(tenant.conn, &Reply::Error { message });
        } else {
            log::info!("{} left: {reason}", tenant.label());
        }
        if let Some(net) = tenant.net {
            self.switch.detach(net.mac, net.ipv4, id.slot() as usize);
        }
        self.driver.release(&mut tenant);
        let conn = tenant.conn;
        drop(tenant);
        self.close_conn(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_ids_round_trip_through_the_wire_form() {
        for id in [
            RuntimeId::from_parts(0, 0),
            RuntimeId::from_parts(7, 3),
            RuntimeId::from_parts(u32::MAX, u32::MAX),
        ] {
            assert_eq!(decode_runtime_id(encode_runtime_id(id)), id);
        }
        assert_eq!(encode_runtime_id(RuntimeId::from_parts(5, 1)), 5 | 1 << 32);
    }
}
