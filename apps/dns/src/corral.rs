//! The Corral backend: each UDP datagram is answered in a uthread of its own, straight from
//! the runtime's receive path, and a uthread serves each TCP connection, reached through
//! iokerneld (or, standalone, only from inside the runtime).

use std::net::{Shutdown, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use ::corral::net::{TcpListener, UdpReply, UdpSpawner};

use crate::linux::TCP_IDLE;
use crate::{Server, UDP_BUF};

/// Binds UDP and TCP on `addr` on the calling uthread's runtime, then serves forever.
pub fn serve(server: Arc<Server>, addr: SocketAddrV4) -> std::io::Result<()> {
    let _udp = bind_udp(server.clone(), addr)?;
    let listener = TcpListener::bind(addr)?;
    loop {
        let Ok((stream, _peer)) = listener.accept() else {
            continue;
        };
        let server = server.clone();
        // A uthread that fails to start drops the stream with its closure, closing it.
        let _ = ::corral::Builder::new().spawn_detached(move || {
            let _ = stream.set_nodelay(true);
            let _ = stream.set_read_timeout(Some(TCP_IDLE));
            let _ = server.serve_tcp(&stream);
            let _ = stream.shutdown(Shutdown::Both);
        });
    }
}

/// Answers each datagram on `addr` in a uthread of its own; dropping the spawner closes the
/// port.
pub fn bind_udp(server: Arc<Server>, addr: SocketAddrV4) -> std::io::Result<UdpSpawner> {
    UdpSpawner::bind(addr, move |datagram, _from, reply: UdpReply| {
        let mut out = [0u8; UDP_BUF];
        let len = server.answer_datagram(&datagram, &mut out);
        if len > 0 && reply.send(&out[..len]).is_err() {
            server.counters.send_errors.fetch_add(1, Relaxed);
        }
    })
}

/// The runtime's own counts of what reached its stack and what it dropped there (by reason,
/// the nonzero ones), in the counters' `name=value` style: with iokerneld's per-runtime drops,
/// they account for every datagram that never became a query.
pub fn stack_line(rt: &::corral::Runtime) -> String {
    let Some(stats) = rt.net_stats() else {
        return "stack=none".into();
    };
    let mut line = format!(
        "stack_rx_packets={} stack_udp_rx={} stack_udp_tx={} stack_drops={}",
        stats.rx_packets,
        stats.udp_rx_datagrams,
        stats.udp_tx_datagrams,
        stats.total_drops()
    );
    for (reason, n) in stats.drops.iter().filter(|(_, n)| *n > 0) {
        line.push_str(&format!(" stack_drop_{reason}={n}"));
    }
    line
}
