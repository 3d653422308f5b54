//! The Corral backend: the same server on Corral's runtime and its TCP and UDP stacks, reached
//! through iokerneld (or, standalone, only from inside the runtime). A uthread accepts TCP
//! connections and starts a uthread per connection; each UDP datagram is answered in a uthread
//! of its own. The store's shards are taken with [`corral_memcache::ShardWait::Spin`], which
//! yields to other uthreads rather than sleeping the kthread in the kernel.

use std::io::Write;
use std::net::{Shutdown, SocketAddrV4};
use std::sync::Arc;

use ::corral::net::{TcpListener, TcpStream, UdpReply, UdpSpawner};

use crate::{Server, TOO_MANY_CONNECTIONS};

/// Binds the TCP listener (if `tcp` is set) and the UDP port (if `udp` is set) on the calling
/// uthread's runtime, then serves forever.
pub fn serve(
    server: Arc<Server>,
    tcp: Option<SocketAddrV4>,
    udp: Option<SocketAddrV4>,
) -> std::io::Result<()> {
    let _udp = match udp {
        Some(addr) => Some(bind_udp(server.clone(), addr)?),
        None => None,
    };
    match tcp {
        Some(addr) => run_tcp(server, TcpListener::bind(addr)?),
        None => loop {
            ::corral::sleep(std::time::Duration::from_secs(3600));
        },
    }
}

/// Accepts connections forever, a uthread for each; `-c` caps them as on Linux.
pub fn run_tcp(server: Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let Ok((mut stream, _peer)) = listener.accept() else {
            continue;
        };
        let Some(admitted) = server.admit() else {
            let _ = stream.write_all(TOO_MANY_CONNECTIONS);
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        };
        // A uthread that fails to start drops `admitted` and its stream with its closure:
        // the connection closes unserved and stops counting.
        let _ = ::corral::Builder::new().spawn_detached(move || {
            let _ = stream.set_nodelay(true);
            serve_one(admitted.server(), stream);
        });
    }
}

fn serve_one(server: &Server, stream: TcpStream) {
    let _ = server.serve(&stream);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Answers each datagram on `addr` in a uthread of its own; dropping the spawner closes the
/// port.
pub fn bind_udp(server: Arc<Server>, addr: SocketAddrV4) -> std::io::Result<UdpSpawner> {
    UdpSpawner::bind(addr, move |datagram, _from, reply: UdpReply| {
        let mut replies = Vec::new();
        server.answer_datagram(&datagram, &mut replies);
        for r in &replies {
            let _ = reply.send(r);
        }
    })
}
