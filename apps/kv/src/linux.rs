//! The Linux-socket backend: a thread per TCP connection (memcached's `-c` caps them) and `-t`
//! threads answering UDP datagrams.

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::thread;

use crate::{Server, TOO_MANY_CONNECTIONS};

/// Accepts connections forever.
pub fn run_tcp(server: Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    for conn in listener.incoming() {
        let Ok(mut stream) = conn else { continue };
        let Some(admitted) = server.admit() else {
            let _ = stream.write_all(TOO_MANY_CONNECTIONS);
            continue;
        };
        // A thread that fails to start drops `admitted` with its closure, uncounting it.
        let _ = thread::Builder::new()
            .name("kv-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _ = stream.set_nodelay(true);
                serve_one(admitted.server(), stream);
            });
    }
    Ok(())
}

fn serve_one(server: &Server, stream: TcpStream) {
    let _ = server.serve(&stream);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Answers datagrams on `threads` threads sharing the socket.
pub fn run_udp(server: Arc<Server>, socket: UdpSocket, threads: usize) -> std::io::Result<()> {
    let socket = Arc::new(socket);
    let mut handles = Vec::new();
    for _ in 0..threads.max(1) {
        let socket = socket.clone();
        let server = server.clone();
        handles.push(thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut replies = Vec::new();
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                replies.clear();
                server.answer_datagram(&buf[..n], &mut replies);
                for r in &replies {
                    let _ = socket.send_to(r, peer);
                }
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
