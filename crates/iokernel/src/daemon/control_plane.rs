//! The control socket, polled from the busy loop: accepting connections, registering runtimes,
//! answering statistics requests, starting traffic generator runs, and noticing hang-ups.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use corral_abi::control::{Registration, Reply, Request};
use corral_abi::transport::server::RegistrationFds;
use corral_abi::{RingKind, RingPositions};
use log::{info, warn};
use rustix::event::epoll;

use super::{
    Conn, Daemon, Ingress, Kthread, LISTENER_TOKEN, MAX_CONNECTIONS, NetCounters, Runtime,
    RuntimeCounters, RxBuffers, encode_runtime_id,
};
use crate::alloc::RuntimeSpec;
use crate::control::{self, Received, send_reply};
use crate::sys::Mapping;

/// Messages read from one connection per poll, so that a chatty client cannot stall the loop.
const MESSAGES_PER_POLL: usize = 8;

/// Sends a reply that may be long (statistics, a run's results). A whole message must fit in
/// the socket's send buffer, which with many runtimes or windows the text outgrows.
pub(super) fn send_text_reply(fd: BorrowedFd<'_>, reply: &Reply) -> std::io::Result<()> {
    let text = match reply {
        Reply::Stats { json } | Reply::Gen { json } => json.len(),
        Reply::Error { message } => message.len(),
        Reply::Registered { .. } => 0,
    };
    let room = 2 * text + 4096;
    if room > 200 << 10 {
        let _ = rustix::net::sockopt::set_socket_send_buffer_size_force(fd, room)
            .or_else(|_| rustix::net::sockopt::set_socket_send_buffer_size(fd, room));
    }
    send_reply(fd, reply)
}

impl Daemon {
    /// Handles whatever happened on the control socket since the last poll, without waiting.
    pub(super) fn poll_control(&mut self) {
        self.events.clear();
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if let Err(e) = epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&zero),
        ) {
            if e != rustix::io::Errno::INTR {
                warn!("epoll_wait on the control socket failed: {e}");
            }
            return;
        }
        for i in 0..self.events.len() {
            let event = self.events[i];
            let token = event.data.u64();
            let flags = event.flags;
            if token == LISTENER_TOKEN {
                self.accept_all();
                continue;
            }
            let index = (token & u64::from(u32::MAX)) as usize;
            let generation = (token >> 32) as u32;
            if flags.contains(epoll::EventFlags::IN) {
                self.read_conn(index, generation);
            }
            let hung_up =
                epoll::EventFlags::HUP | epoll::EventFlags::RDHUP | epoll::EventFlags::ERR;
            if flags.intersects(hung_up) && self.conn(index, generation).is_some() {
                self.hang_up(index, "connection closed");
            }
        }
    }

    fn conn(&self, index: usize, generation: u32) -> Option<&Conn> {
        self.conns
            .get(index)?
            .as_ref()
            .filter(|c| c.generation == generation)
    }

    fn accept_all(&mut self) {
        loop {
            let fd = match control::accept(self.listener.as_fd()) {
                Ok(Some(fd)) => fd,
                Ok(None) => return,
                Err(e) => {
                    warn!("accept on the control socket failed: {e}");
                    return;
                }
            };
            let open = self.conns.len() - self.free_conns.len();
            if open >= MAX_CONNECTIONS {
                warn!("refusing a control connection: {MAX_CONNECTIONS} already open");
                continue;
            }
            let pid = match control::peer_pid(fd.as_fd()) {
                Ok(pid) => pid,
                Err(e) => {
                    warn!("refusing a control connection: SO_PEERCRED failed: {e}");
                    continue;
                }
            };
            self.conn_generation = self.conn_generation.wrapping_add(1);
            let generation = self.conn_generation;
            let index = match self.free_conns.pop() {
                Some(index) => index,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let token = index as u64 | u64::from(generation) << 32;
            if let Err(e) = epoll::add(
                &self.epoll,
                &fd,
                epoll::EventData::new_u64(token),
                epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            ) {
                warn!("refusing a control connection: epoll_ctl failed: {e}");
                self.free_conns.push(index);
                continue;
            }
            self.conns[index] = Some(Conn {
                fd,
                generation,
                pid,
                runtime: None,
            });
        }
    }

    fn read_conn(&mut self, index: usize, generation: u32) {
        for _ in 0..MESSAGES_PER_POLL {
            let Some(conn) = self
                .conns
                .get(index)
                .and_then(Option::as_ref)
                .filter(|c| c.generation == generation)
            else {
                return;
            };
            let received = control::recv_message(conn.fd.as_fd(), &mut self.recv);
            match received {
                Ok(Received::Nothing) => return,
                Ok(Received::Closed) => {
                    self.hang_up(index, "connection closed");
                    return;
                }
                Ok(Received::Message { len, fds }) => {
                    let request = Request::decode(&self.recv.data()[..len], fds.len());
                    self.request(index, request, fds);
                }
                Err(e) => {
                    let message = e.to_string();
                    self.refuse(index, message);
                }
            }
        }
    }

    /// Answers a request that did not make sense: a registered runtime keeps its connection,
    /// anyone else loses it.
    fn refuse(&mut self, index: usize, message: String) {
        let Some(conn) = self.conns[index].as_ref() else {
            return;
        };
        let registered = conn.runtime.is_some();
        if !registered {
            self.sched.counters.refused_registrations += 1;
            self.sched.counters.last_refusal = Some(message.clone());
            info!("refused a request from pid {}: {message}", conn.pid);
        }
        let _ = send_reply(conn.fd.as_fd(), &Reply::Error { message });
        if !registered {
            self.close_conn(index);
        }
    }

    fn request(
        &mut self,
        index: usize,
        request: Result<Request, corral_abi::control::ControlError>,
        fds: Vec<OwnedFd>,
    ) {
        match request {
            Err(e) => self.refuse(index, e.to_string()),
            Ok(Request::Stats) => {
                let json = self.stats_json();
                if let Some(conn) = self.conns[index].as_ref()
                    && let Err(e) = send_text_reply(conn.fd.as_fd(), &Reply::Stats { json })
                {
                    warn!("cannot send statistics to pid {}: {e}", conn.pid);
                }
            }
            Ok(Request::Gen { json }) => self.gen_request(index, &json),
            Ok(Request::Register(registration)) => {
                if let Some(id) = self.conns[index].as_ref().and_then(|c| c.runtime) {
                    let message = format!("this connection already registered {id}");
                    self.refuse(index, message);
                    return;
                }
                match self.register(index, registration, fds) {
                    Ok(()) => {}
                    Err(message) => self.refuse(index, message),
                }
            }
        }
    }

    /// Checks and registers a runtime; the error is the reason sent back.
    fn register(
        &mut self,
        index: usize,
        reg: Registration,
        fds: Vec<OwnedFd>,
    ) -> Result<(), String> {
        let pid = self.conns[index].as_ref().map(|c| c.pid).unwrap_or(0);
        if let Some(net) = reg.net
            && let Some((what, slot)) = self.switch.tables.conflict(net.mac, net.ipv4)
        {
            let owner = self.runtimes[slot]
                .as_deref()
                .map(Runtime::label)
                .unwrap_or_else(|| format!("slot {slot}"));
            let [a, b, c, d] = net.ipv4;
            let m = net.mac;
            return Err(format!(
                "{what} already registered by {owner}: the registration asks for MAC \
                 {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} and IPv4 address {a}.{b}.{c}.{d}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ));
        }
        for (i, &tid) in reg.tids.iter().enumerate() {
            if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
                return Err(format!(
                    "invalid tids[{i}] = {tid}: not a thread of the registering process {pid}"
                ));
            }
            if let Some(&owner) = self.tids.get(&tid) {
                let label = self
                    .runtime(owner)
                    .map(Runtime::label)
                    .unwrap_or_else(|| owner.to_string());
                return Err(format!(
                    "invalid tids[{i}] = {tid}: already registered by {label}"
                ));
            }
        }

        let RegistrationFds {
            region: region_fd,
            region_len,
            eventfds,
        } = RegistrationFds::check(fds, reg.kthreads()).map_err(|e| e.to_string())?;
        let mapping = Mapping::new(&region_fd, region_len)
            .map_err(|e| format!("descriptor 0 (the region): mmap failed: {e}"))?;
        // The mapping keeps the memory; the descriptor is no longer needed.
        drop(region_fd);
        // SAFETY: every view made from this region is stored in the same `Runtime` as the
        // mapping, in a field dropped before it, and never handed out.
        let raw = unsafe { mapping.raw_unbounded() };
        let region = raw.attach().map_err(|e| format!("region header: {e}"))?;
        let layout = region.layout();
        if layout.kthreads() as usize != reg.kthreads() {
            return Err(format!(
                "region header: kthreads = {} but the registration has {} kthreads",
                layout.kthreads(),
                reg.kthreads()
            ));
        }

        let spec = RuntimeSpec {
            guaranteed_cores: reg.guaranteed_cores,
            max_cores: reg.max_cores,
            kthreads: reg.kthreads() as u16,
            run_queue_capacity: reg.run_queue_capacity,
            ingress_capacity: layout.ring_slots(RingKind::Ingress),
        };
        let now = self.sched.now();
        let id = self
            .sched
            .alloc
            .register(spec, now)
            .map_err(|e| e.to_string())?;

        let ingress_slots = layout.ring_slots(RingKind::Ingress) as usize;
        let mut kthreads = Vec::with_capacity(eventfds.len());
        for (i, (eventfd, &tid)) in eventfds.into_iter().zip(&reg.tids).enumerate() {
            let view = region
                .kthread(i as u32)
                .expect("the layout has as many kthreads as the registration");
            kthreads.push(Kthread {
                tid,
                eventfd,
                view,
                positions: view.positions(),
                ingress: Ingress::new(view.ingress_producer()),
                commands: view.egress_command_consumer(),
                packets: view.egress_packet_consumer(),
                rx_buffers: RxBuffers::new(ingress_slots),
                last_rx_position: 0,
                active: false,
                linger: false,
                pinned: None,
                idle_policy: false,
                preempt_sent_at: None,
            });
        }
        let shared_last = kthreads
            .first()
            .map(|k| k.positions.shared_queue())
            .unwrap_or(RingPositions::default());
        let runtime = Runtime {
            id,
            name: reg.name.clone(),
            pid,
            conn: index,
            timer_deadline: u64::MAX,
            shared_last,
            doomed: false,
            counters: RuntimeCounters::default(),
            handover: super::Handover::new(),
            net: reg.net,
            net_counters: NetCounters::default(),
            active: Vec::with_capacity(kthreads.len()),
            tx_poll: Vec::with_capacity(kthreads.len()),
            core_requested: false,
            kthreads,
            region,
            mapping,
        };
        let slot = id.slot() as usize;
        if self.runtimes.len() <= slot {
            self.runtimes.resize_with(slot + 1, || None);
        }
        for &tid in &reg.tids {
            self.tids.insert(tid, id);
        }
        info!(
            "registered {}: {} kthreads, {} guaranteed and {} max cores, {} spinning, {} bytes, {}",
            runtime.label(),
            reg.kthreads(),
            reg.guaranteed_cores,
            reg.max_cores,
            reg.spinning_kthreads,
            runtime.mapping.len(),
            match reg.net {
                Some(net) => format!(
                    "IPv4 {} MAC {:02x?}",
                    std::net::Ipv4Addr::from(net.ipv4),
                    net.mac
                ),
                None => "no network".to_owned(),
            }
        );
        if let Some(net) = reg.net {
            self.switch.tables.insert(net.mac, net.ipv4, slot);
        }
        self.runtimes[slot] = Some(Box::new(runtime));
        self.sched.counters.registrations += 1;
        let conn = self.conns[index].as_mut().expect("the connection is open");
        conn.runtime = Some(id);
        let reply = Reply::Registered {
            runtime_id: encode_runtime_id(id),
        };
        if let Err(e) = send_reply(conn.fd.as_fd(), &reply) {
            self.doom(id, format!("cannot send the registration reply: {e}"));
            return Ok(());
        }
        if reg.spinning_kthreads > 0 {
            let now = self.sched.now();
            if let Err(e) = self.sched.alloc.grant_guaranteed(
                id,
                reg.spinning_kthreads,
                now,
                &mut self.sched.decisions,
            ) {
                self.doom(
                    id,
                    format!("cannot grant its spinning kthreads' cores: {e}"),
                );
            }
        }
        Ok(())
    }

    /// The peer closed its connection: a registered runtime is gone.
    fn hang_up(&mut self, index: usize, reason: &str) {
        let Some(conn) = self.conns.get(index).and_then(Option::as_ref) else {
            return;
        };
        match conn.runtime {
            Some(id) => self.evict(id, reason, false),
            None => self.close_conn(index),
        }
    }

    /// Closes a connection (its runtime, if any, must already be gone).
    pub(super) fn close_conn(&mut self, index: usize) {
        if let Some(conn) = self.conns.get(index).and_then(Option::as_ref)
            && self
                .gen_run
                .as_ref()
                .is_some_and(|run| run.is_conn(index, conn.generation))
        {
            self.abandon_gen("the connection that asked for it closed");
        }
        if let Some(conn) = self.conns.get_mut(index).and_then(Option::take) {
            let _ = epoll::delete(&self.epoll, &conn.fd);
            self.free_conns.push(index);
            if let Some(id) = conn.runtime
                && self.runtime(id).is_some()
            {
                // Never happens through the paths above; keep the tables consistent anyway.
                self.doom(id, "its connection was closed".into());
            }
        }
    }
}
