//! Local ports for outgoing connections.
//!
//! iokerneld steers an arriving frame to one of the runtime's *active* kthreads: it hashes the
//! flow's 4-tuple (Toeplitz, the Microsoft key: [`corral_wire::RssHasher`]) and maps the hash
//! onto the active kthreads, in index order, by multiply-shift
//! (`active[(hash * n) >> 32]`, crates/iokernel/src/daemon/net.rs `deliver`). As Shenango
//! does, a connecting uthread picks a local port whose replies hash to the kthread it runs on,
//! as far as the runtime's own view of the active set (its kthreads that are not parked) goes,
//! so that the connection's segments are usually processed where its application runs.
//!
//! The active set changes as iokerneld grants and revokes cores. Then a flow's segments reach
//! another kthread (or several, while stealing moves them), which costs locality only: the
//! per-connection lock and its pending queue make any kthread correct for any segment.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::net::SocketAddrV4;

use corral_tcp::Endpoints;
use corral_wire::RssHasher;

use crate::net::stack::EPHEMERAL_PORTS;
use crate::sched::kthread::{self, KthreadState};

fn span() -> usize {
    usize::from(EPHEMERAL_PORTS.end() - EPHEMERAL_PORTS.start()) + 1
}

fn port_at(start: usize, i: usize) -> u16 {
    EPHEMERAL_PORTS.start() + (start.wrapping_add(i) % span()) as u16
}

/// A free ephemeral port for a listener.
pub(crate) fn free_listen_port(next: &AtomicUsize, taken: impl Fn(u16) -> bool) -> Option<u16> {
    let start = next.fetch_add(1, Relaxed);
    (0..span()).map(|i| port_at(start, i)).find(|&p| !taken(p))
}

/// The calling kthread's position and the active kthreads (by index), as iokerneld would see
/// them; `None` off a kthread or with fewer than two active ones (steering is moot then).
fn steering_view() -> Option<(usize, Vec<u16>)> {
    crate::preempt::disable();
    let view = kthread::current_kthread().map(|k| {
        let active: Vec<u16> = k
            .shared()
            .kthreads
            .iter()
            .filter(|o| {
                matches!(
                    o.state.load(Relaxed),
                    KthreadState::Running | KthreadState::Spinning
                )
            })
            .map(|o| o.index as u16)
            .collect();
        (k.index, active)
    });
    crate::preempt::enable();
    view.filter(|(_, a)| a.len() > 1)
}

/// Which kthread (index) iokerneld steers frames of `ends` (seen from our side) to.
pub(crate) fn steered_to(rss: &RssHasher, ends: &Endpoints, active: &[u16]) -> u16 {
    let hash = rss.hash_ipv4_ports(
        *ends.remote.ip(),
        *ends.local.ip(),
        ends.remote.port(),
        ends.local.port(),
    );
    active[((u64::from(hash) * active.len() as u64) >> 32) as usize]
}

/// Candidate local ports for a connection from `local_ip` to `remote`, best first: ports whose
/// replies iokerneld steers to the calling kthread (when `steer`), then the others, each not in
/// use with `remote` (`in_use`). Calls `take` on each until it returns true.
pub(crate) fn choose(
    next: &AtomicUsize,
    rss: &RssHasher,
    local_ip: std::net::Ipv4Addr,
    remote: SocketAddrV4,
    steer: bool,
    in_use: impl Fn(&Endpoints) -> bool,
    mut take: impl FnMut(u16) -> bool,
) -> bool {
    // Enough tries that a matching port is found with n active kthreads (each port matches
    // with probability 1/n), without scanning the whole range.
    const TRIES_PER_KTHREAD: usize = 32;
    let ends_for = |p: u16| Endpoints {
        local: SocketAddrV4::new(local_ip, p),
        remote,
    };
    let view = if steer { steering_view() } else { None };
    let start = next.load(Relaxed);
    if let Some((me, active)) = view
        && active.contains(&(me as u16))
    {
        let tries = (TRIES_PER_KTHREAD * active.len()).min(span());
        for i in 0..tries {
            let p = port_at(start, i);
            let ends = ends_for(p);
            if steered_to(rss, &ends, &active) == me as u16 && !in_use(&ends) && take(p) {
                next.store(start.wrapping_add(i + 1), Relaxed);
                return true;
            }
        }
    }
    for i in 0..span() {
        let p = port_at(start, i);
        if !in_use(&ends_for(p)) && take(p) {
            next.store(start.wrapping_add(i + 1), Relaxed);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn steering_matches_the_daemons_formula() {
        let rss = RssHasher::default();
        let ends = Endpoints {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 50000),
            remote: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
        };
        // The daemon hashes the arriving frame: source = remote, destination = local.
        let flow = corral_wire::FiveTuple {
            src_ip: *ends.remote.ip(),
            dst_ip: *ends.local.ip(),
            src_port: ends.remote.port(),
            dst_port: ends.local.port(),
            protocol: 6,
        };
        let active = [0u16, 2, 3, 7];
        let want = active[((u64::from(rss.hash_flow(&flow)) * 4) >> 32) as usize];
        assert_eq!(steered_to(&rss, &ends, &active), want);
    }

    #[test]
    fn ports_spread_over_kthreads_and_skip_used_ones() {
        let rss = RssHasher::default();
        let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
        let local = Ipv4Addr::new(10, 0, 0, 2);
        let active = [0u16, 1, 2, 3];
        let mut hits = [0usize; 4];
        for p in EPHEMERAL_PORTS.take(4000) {
            let ends = Endpoints {
                local: SocketAddrV4::new(local, p),
                remote,
            };
            hits[usize::from(steered_to(&rss, &ends, &active))] += 1;
        }
        // Every kthread gets a fair share of ports, so a matching one is found in few tries.
        assert!(hits.iter().all(|&h| h > 600), "{hits:?}");
        let next = AtomicUsize::new(0);
        let first = *EPHEMERAL_PORTS.start();
        let mut got = 0;
        assert!(choose(
            &next,
            &rss,
            local,
            remote,
            false,
            |e| e.local.port() == first,
            |p| {
                got = p;
                true
            }
        ));
        assert_eq!(got, first + 1);
    }
}
