//! Registering a runtime: every check a registration must pass, in order, each refusal naming
//! what was wrong; then the runtime is entered with the allocator, the registry and the switch,
//! and answered.

use std::os::fd::OwnedFd;
use std::path::Path;

use corral_abi::control::{NetIdentity, Registration, Reply};
use corral_abi::transport::server::RegistrationFds;
use corral_abi::{Region, RingKind, RingPositions};
use log::info;

use super::backlog::Backlog;
use super::control_plane::ConnRef;
use super::net::{Ingress, NetCounters, RxBuffers, Switch};
use super::registry::{Handover, Kthread, Registry, Tenant, TenantCounters};
use super::{Daemon, encode_runtime_id};
use crate::sys::Mapping;
use corral_policy::{RuntimeId, RuntimeSpec};

/// A registration's shared memory, mapped and attached.
struct SharedMemory {
    region: Region<'static>,
    mapping: Mapping,
}

impl Daemon {
    /// Checks and registers a runtime; the error is the reason sent back.
    pub(super) fn register(
        &mut self,
        conn: ConnRef,
        reg: Registration,
        fds: Vec<OwnedFd>,
    ) -> Result<(), String> {
        let pid = self.control.pid(conn).unwrap_or(0);
        check_addresses_free(&self.switch, &self.registry, reg.net)?;
        check_threads_are_new(&self.registry, pid, &reg.tids)?;
        let memory = map_shared_memory(&reg, fds)?;
        let spec = RuntimeSpec {
            guaranteed_cores: reg.guaranteed_cores,
            max_cores: reg.max_cores,
            kthreads: reg.kthreads() as u16,
            run_queue_capacity: reg.run_queue_capacity,
            ingress_capacity: memory.region.layout().ring_slots(RingKind::Ingress),
        };
        if let Some(net) = reg.net {
            self.switch.claim(net.mac, net.ipv4)?;
        }
        let id = match self.driver.register(spec) {
            Ok(id) => id,
            Err(e) => {
                if let Some(net) = reg.net {
                    self.switch.unclaim(net.mac, net.ipv4);
                }
                return Err(e);
            }
        };
        // Only a runtime with addresses receives frames to hold.
        let backlog = if reg.net.is_some() {
            self.config.rx_backlog_frames as usize
        } else {
            0
        };
        let tenant = tenant(id, pid, conn, &reg, memory, Backlog::new(backlog));
        log_registration(&tenant, &reg);
        if let Some(net) = reg.net {
            self.switch.attach(net.mac, net.ipv4, id.slot() as usize);
        }
        self.registry.insert(tenant, &reg.tids);
        self.control.set_runtime(conn, id);
        let reply = Reply::Registered {
            runtime_id: encode_runtime_id(id),
        };
        if let Err(e) = self.control.reply(conn, &reply) {
            self.registry
                .mark_for_eviction(id, format!("cannot send the registration reply: {e}"));
            return Ok(());
        }
        if reg.spinning_kthreads > 0
            && let Err(reason) = self.driver.grant_spinning(id, reg.spinning_kthreads)
        {
            self.registry.mark_for_eviction(id, reason);
        }
        Ok(())
    }
}

/// Refuses a MAC or IPv4 address another runtime already receives frames for.
fn check_addresses_free(
    switch: &Switch,
    registry: &Registry,
    net: Option<NetIdentity>,
) -> Result<(), String> {
    let Some(net) = net else {
        return Ok(());
    };
    let Some((what, slot)) = switch.address_owner(net.mac, net.ipv4) else {
        return Ok(());
    };
    let owner = registry
        .at(slot)
        .map(Tenant::label)
        .unwrap_or_else(|| format!("slot {slot}"));
    let [a, b, c, d] = net.ipv4;
    let m = net.mac;
    Err(format!(
        "{what} already registered by {owner}: the registration asks for MAC \
         {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} and IPv4 address {a}.{b}.{c}.{d}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    ))
}

/// Refuses thread ids that are not threads of the registering process, or that another
/// runtime registered.
fn check_threads_are_new(registry: &Registry, pid: i32, tids: &[i32]) -> Result<(), String> {
    for (i, &tid) in tids.iter().enumerate() {
        if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
            return Err(format!(
                "invalid tids[{i}] = {tid}: not a thread of the registering process {pid}"
            ));
        }
        if let Some(owner) = registry.owner_of_thread(tid) {
            let label = registry
                .get(owner)
                .map(Tenant::label)
                .unwrap_or_else(|| owner.to_string());
            return Err(format!(
                "invalid tids[{i}] = {tid}: already registered by {label}"
            ));
        }
    }
    Ok(())
}

/// Maps the region (the one descriptor) after checking that it is a sealed memfd, and checks
/// that its header describes as many kthreads as the registration.
fn map_shared_memory(reg: &Registration, fds: Vec<OwnedFd>) -> Result<SharedMemory, String> {
    let RegistrationFds {
        region: region_fd,
        region_len,
    } = RegistrationFds::check(fds).map_err(|e| e.to_string())?;
    let mapping = Mapping::new(&region_fd, region_len)
        .map_err(|e| format!("descriptor 0 (the region): mmap failed: {e}"))?;
    // The mapping keeps the memory; the descriptor is no longer needed.
    drop(region_fd);
    // SAFETY: every view made from this region is stored in the same `Tenant` as the mapping
    // (see `tenant`), in a field dropped before it, and never handed out.
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
    Ok(SharedMemory { region, mapping })
}

/// The registry's entry for runtime `id`, which has passed every check.
fn tenant(
    id: RuntimeId,
    pid: i32,
    conn: ConnRef,
    reg: &Registration,
    memory: SharedMemory,
    backlog: Backlog,
) -> Tenant {
    let SharedMemory { region, mapping } = memory;
    let ingress_slots = region.layout().ring_slots(RingKind::Ingress) as usize;
    let mut kthreads = Vec::with_capacity(reg.kthreads());
    for (i, &tid) in reg.tids.iter().enumerate() {
        let view = region
            .kthread(i as u32)
            .expect("the layout has as many kthreads as the registration");
        kthreads.push(Kthread {
            tid,
            view,
            positions: view.positions(),
            ingress: Ingress::new(view.ingress_producer()),
            commands: view.egress_command_consumer(),
            packets: view.egress_packet_consumer(),
            rx_buffers: RxBuffers::new(ingress_slots),
            last_rx_position: 0,
            waiting_ack_position: None,
            active: false,
            linger: false,
            pinned: None,
            idle_policy: false,
            preempt_sent_at: None,
            cede_deadline: None,
            cede_rung: view.cede_word().load(std::sync::atomic::Ordering::SeqCst),
            net_watch: Default::default(),
            in_place: false,
        });
    }
    let shared_last = kthreads
        .first()
        .map(|k| k.positions.shared_queue())
        .unwrap_or(RingPositions::default());
    Tenant {
        id,
        name: reg.name.clone(),
        pid,
        preemption: reg.preemption,
        conn,
        timer_deadline: u64::MAX,
        shared_last,
        evicting: false,
        counters: TenantCounters::default(),
        handover: Handover::new(),
        net: reg.net,
        net_counters: NetCounters::default(),
        active: Vec::with_capacity(kthreads.len()),
        tx_poll: Vec::with_capacity(kthreads.len()),
        core_requested: false,
        acks_can_wait: false,
        acks_waiting_since: None,
        backlog,
        kthreads,
        region,
        mapping,
    }
}

fn log_registration(tenant: &Tenant, reg: &Registration) {
    info!(
        "registered {}: {} kthreads, {} guaranteed and {} max cores, {} spinning, preemption \
         {}, {} bytes, {}",
        tenant.label(),
        reg.kthreads(),
        reg.guaranteed_cores,
        reg.max_cores,
        reg.spinning_kthreads,
        reg.preemption.name(),
        tenant.mapping.len(),
        match reg.net {
            Some(net) => format!(
                "IPv4 {} MAC {:02x?}",
                std::net::Ipv4Addr::from(net.ipv4),
                net.mac
            ),
            None => "no network".to_owned(),
        }
    );
}
