//! The runtime's network stack: Ethernet, ARP, IPv4, ICMP echo, UDP and TCP.
//!
//! * [`config`]: the runtime's address ([`NetConfig`], given with [`crate::Config::net`]).
//! * `stack`: protocol processing over frames in memory, independent of where frames come from.
//! * [`socket`](UdpSocket): the UDP API, mirroring `std::net`, and [`UdpSpawner`].
//! * `tcp`: TCP over the sans-I/O engine `corral-tcp`: [`TcpListener`], [`TcpStream`].
//! * Frames reach the stack through iokerneld's rings (see `iokernel.rs`): each kthread drains
//!   its own ingress ring whenever it passes through its scheduler, and steals from other
//!   kthreads' rings when it has no uthread to run.
//!
//! In standalone mode (no iokerneld) there is no device: the runtime reaches only its own
//! address, over an internal loopback, and everything else is counted as `no_link`.

pub(crate) mod config;
pub(crate) mod socket;
pub(crate) mod stack;
pub(crate) mod tcp;

use std::io;
use std::sync::Arc;

pub use config::{GATEWAY_ENV, IP_ENV, MAC_ENV, NETMASK_ENV, NetConfig, STATIC_ARP_ENV};
pub use corral_tcp::{
    CcAlgorithm, ConnStats as TcpConnStats, Keepalive, State as TcpState, TcpConfig, TcpCounters,
    TcpDrop,
};
pub use corral_wire::{DropReason, MacAddr};
pub use socket::{
    RECV_QUEUE_CAPACITY, SPAWNER_IN_FLIGHT_CAPACITY, UdpReply, UdpSocket, UdpSpawner,
};
pub use stack::{ArpStats, MAX_UDP_PAYLOAD, NetStats, SocketStats, StackDrop};
pub use tcp::settings::{
    TCP_ACCEPT_BACKLOG_ENV, TCP_BUFFER_ENV, TCP_MAX_CONNECTIONS_ENV, TCP_NODELAY_ENV,
    TCP_RTO_MIN_US_ENV, TCP_SYN_BACKLOG_ENV, TCP_SYN_COOKIES_ENV, TCP_TIME_WAIT_MS_ENV,
};
pub use tcp::{Incoming, TcpConnInfo, TcpListener, TcpSettings, TcpStats, TcpStream};

use crate::sched::kthread;
use crate::timer::{self, TimerAction};
use stack::{Link, NetStack};

/// The network stack of the calling uthread's runtime.
pub(crate) fn current_stack() -> io::Result<Arc<NetStack>> {
    crate::preempt::disable();
    let net = kthread::current_kthread().and_then(|k| k.shared().net.clone());
    crate::preempt::enable();
    net.ok_or_else(|| io::Error::from_raw_os_error(libc::ENETDOWN))
}

/// The counters of the calling uthread's runtime (as [`crate::Runtime::net_stats`]).
pub fn stats() -> io::Result<NetStats> {
    Ok(current_stack()?.stats())
}

/// Builds the stack of a runtime; `iokerneld`: frames go through iokerneld's rings.
pub(crate) fn new_stack(config: &NetConfig, iokerneld: bool) -> Arc<NetStack> {
    let link: Box<dyn Link> = if iokerneld {
        Box::new(IokLink)
    } else {
        Box::new(NoLink)
    };
    Arc::new(NetStack::new(config.clone(), link))
}

/// Sends through iokerneld from the calling kthread.
struct IokLink;

impl Link for IokLink {
    fn transmit(
        &self,
        may_block: bool,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<(), StackDrop> {
        crate::iokernel::transmit(may_block, build)
    }

    fn arm_timer(&self, deadline: u64) {
        arm_timer(deadline);
    }

    fn steers_by_rss(&self) -> bool {
        true
    }
}

/// Standalone mode: nothing to send on.
struct NoLink;

impl Link for NoLink {
    fn transmit(&self, _: bool, _: &mut dyn FnMut(&mut [u8]) -> usize) -> Result<(), StackDrop> {
        Err(StackDrop::NoLink)
    }

    fn arm_timer(&self, deadline: u64) {
        arm_timer(deadline);
    }
}

/// Makes a runtime timer run the stack's periodic work at `deadline`. Through the runtime's
/// timers (rather than only the scheduler's idle polling) so that a runtime whose kthreads all
/// parked is still woken for ARP retries. Off a kthread (a socket used from a foreign thread)
/// the scheduler's polling in `find_work` picks the deadline up instead.
fn arm_timer(deadline: u64) {
    crate::preempt::disable();
    if let Some(k) = kthread::current_kthread() {
        k.timers.insert(deadline, TimerAction::NetPoll);
        k.shared().timer_added(deadline);
    }
    crate::preempt::enable();
}

/// A `NetPoll` timer fired on the calling kthread.
pub(crate) fn timer_fired() {
    crate::preempt::disable();
    let net = kthread::current_kthread().and_then(|k| k.shared().net.clone());
    crate::preempt::enable();
    if let Some(net) = net {
        net.poll(timer::now_ns());
    }
}

#[cfg(test)]
mod tests;
