//! Setup: laying out the region and registering with iokerneld, all
//! through corral-abi's transport, which iokerneld shares.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use corral_abi::control::{NetIdentity, Registration, Reply};
use corral_abi::transport::{self, RegionFile};
use corral_abi::{Command, FRAME_CAPACITY, RegionBuilder, Slot};

use super::Kthread;
use super::packets::{KTHREAD_PACKET_BYTES, PacketPool, RX_BUFFERS, TX_BUFFERS};
use super::{IokKthread, IokShared};
use crate::config::{Config, IokernelSettings};
use crate::primitives::WakeWord;
use crate::sched::runqueue::RUNQ_CAPACITY;
use crate::sync::spin::{RawSpinLock, SpinLock};

/// Slots in each kthread's egress command ring: room for every receive buffer to be posted at
/// once, plus parks and timer reports.
const COMMAND_SLOTS: u32 = 512;
/// Slots in each ingress ring: every posted receive buffer and every transmit completion can
/// be outstanding together with grants and preemption requests, so iokerneld never finds the
/// ring full because of us.
const INGRESS_SLOTS: u32 = 512;
/// Slots in each egress packet ring: at least the frames one kthread may have in flight.
const EGRESS_PACKET_SLOTS: u32 = 256;
const _: () = assert!(RX_BUFFERS + TX_BUFFERS + 64 <= INGRESS_SLOTS);
const _: () = assert!(RX_BUFFERS + 64 <= COMMAND_SLOTS && TX_BUFFERS <= EGRESS_PACKET_SLOTS);
/// How long to wait for iokerneld's answer to a registration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Lays out the region for a runtime of `config.kthreads` kthreads.
pub(crate) fn prepare(config: &Config) -> io::Result<(IokShared, Vec<IokKthread>, OwnedFd)> {
    let crate::config::Mode::Iokernel(settings) = &config.mode else {
        unreachable!("prepare is only called in iokerneld mode");
    };
    let packet_bytes = if config.net.is_some() {
        config.kthreads as u64 * KTHREAD_PACKET_BYTES
    } else {
        0
    };
    let builder = RegionBuilder::new(config.kthreads as u32)
        .ingress_slots(INGRESS_SLOTS)
        .egress_command_slots(COMMAND_SLOTS)
        .egress_packet_slots(EGRESS_PACKET_SLOTS)
        .packet_area_size(packet_bytes);
    let file = RegionFile::create(&builder)?;
    // The mapping is never unmapped: kthreads, which are leaked, point into it.
    let mapping = file.mapping.leak();
    let region = mapping.raw().attach().map_err(io::Error::other)?;

    let with_net = packet_bytes != 0;
    let mut kthreads = Vec::with_capacity(config.kthreads);
    for index in 0..config.kthreads {
        let view = region.kthread(index as u32).expect("laid out above");
        let mut commands = view.egress_command_producer();
        let mut tx_free = Vec::new();
        if with_net {
            // Post every receive buffer before registering, so that iokerneld has somewhere
            // to put the first frames even before this kthread first runs. The ring is fresh
            // and large enough for all of them.
            for i in 0..RX_BUFFERS {
                let offset = PacketPool::buffer_offset(index, i);
                commands
                    .try_push(Slot::packet(
                        Command::RxBufferPost,
                        offset,
                        FRAME_CAPACITY as u32,
                    ))
                    .expect("the command ring holds every receive buffer");
            }
            tx_free = (RX_BUFFERS..RX_BUFFERS + TX_BUFFERS)
                .map(|i| PacketPool::buffer_offset(index, i))
                .collect();
        }
        kthreads.push(IokKthread {
            wake_word: WakeWord::in_region(view.wake_word()),
            ingress_lock: RawSpinLock::new(),
            ingress: UnsafeCell::new(view.ingress_consumer()),
            commands_lock: RawSpinLock::new(),
            commands: UnsafeCell::new(commands),
            egress: UnsafeCell::new(view.egress_packet_producer()),
            rx_repost: SpinLock::new(Vec::with_capacity(RX_BUFFERS as usize)),
            tx_free: SpinLock::new(tx_free),
            tx_inflight: AtomicU32::new(0),
            positions: view.positions(),
            wake_decision: view.wake_decision(),
            wake_sent: view.wake_sent(),
            preempt_seen: view.preempt_seen(),
            timer_deadline: view.timer_deadline(),
            kicks: AtomicU64::new(0),
            cedes_before_running: AtomicU64::new(0),
            cede_word: view.cede_word(),
            cede_seen: AtomicU32::new(view.cede_word().load(Ordering::Relaxed)),
            preempt_requested: AtomicBool::new(false),
            cpu: AtomicU32::new(u32::MAX),
            grants: AtomicU64::new(0),
            spurious_wakes: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
        });
    }
    let packets = with_net.then(|| {
        let area = region.packet_area();
        let start = NonNull::new(mapping.as_ptr()).expect("a mapping is never at address 0");
        // SAFETY: the packet area lies inside the mapping (validated by attach).
        let base = unsafe { start.add(area.offset as usize) };
        PacketPool::new(area, base, config.kthreads)
    });
    let reported =
        super::reported::Reporter::new(region.kthread(0).expect("laid out above").reported());
    let shared = IokShared {
        region,
        connection: Mutex::new(None),
        active: super::last_parker::ActiveKthreads::new(),
        spinning: settings.spinning_kthreads,
        runtime_id: AtomicU64::new(0),
        packets,
        reported,
    };
    Ok((shared, kthreads, file.memfd))
}

/// Registers with iokerneld once every kthread has reported its thread id.
pub(crate) fn register(
    shared: &IokShared,
    kthreads: &[&'static Kthread],
    settings: &IokernelSettings,
    net: Option<&crate::net::NetConfig>,
    memfd: OwnedFd,
) -> io::Result<()> {
    let deadline = Instant::now() + REGISTER_TIMEOUT;
    let tids: Vec<i32> = kthreads
        .iter()
        .map(|k| {
            loop {
                let tid = k.tid.load(Ordering::Acquire) as i32;
                if tid != 0 {
                    break Ok(tid);
                }
                if Instant::now() > deadline {
                    break Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "corral: a kthread did not start",
                    ));
                }
                std::thread::yield_now();
            }
        })
        .collect::<io::Result<_>>()?;
    let registration = Registration {
        name: settings.name.clone(),
        guaranteed_cores: settings.guaranteed_cores as u16,
        max_cores: kthreads.len() as u16,
        spinning_kthreads: settings.spinning_kthreads as u16,
        run_queue_capacity: RUNQ_CAPACITY as u32,
        preemption: settings.preemption,
        tids,
        net: net.map(|n| NetIdentity {
            mac: n.effective_mac().0,
            ipv4: n.ip.octets(),
        }),
    };
    let sent = transport::client::register(
        &settings.socket,
        registration,
        memfd.as_fd(),
        REGISTER_TIMEOUT,
    );
    drop(memfd);
    let (socket, reply) = sent.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "corral: registering with iokerneld at {} failed: {e} (is iokerneld running?)",
                settings.socket.display()
            ),
        )
    })?;
    match reply {
        Reply::Registered { runtime_id } => {
            shared.runtime_id.store(runtime_id, Ordering::Relaxed);
            *shared.connection.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket);
            Ok(())
        }
        Reply::Error { message } => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("corral: iokerneld refused the registration: {message}"),
        )),
        other => Err(io::Error::other(format!(
            "corral: unexpected answer from iokerneld: {other:?}"
        ))),
    }
}
