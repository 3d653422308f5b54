//! The Linux-socket backend: a thread per TCP connection (memcached's `-c` caps them) and `-t`
//! threads answering UDP datagrams.

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;

use crate::Server;

/// Accepts connections forever.
pub fn run_tcp(server: Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    let counters = &server.store.counters;
    for conn in listener.incoming() {
        let mut stream = match conn {
            Ok(s) => s,
            Err(_) => continue,
        };
        if counters.curr_connections.load(Ordering::Relaxed) as usize
            >= server.settings.max_connections
        {
            let _ = stream.write_all(b"ERROR Too many open connections\r\n");
            continue;
        }
        counters.curr_connections.fetch_add(1, Ordering::Relaxed);
        counters.total_connections.fetch_add(1, Ordering::Relaxed);
        let server = server.clone();
        let spawned = thread::Builder::new()
            .name("kv-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _ = stream.set_nodelay(true);
                serve_one(&server, stream);
                server
                    .store
                    .counters
                    .curr_connections
                    .fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            counters.curr_connections.fetch_sub(1, Ordering::Relaxed);
        }
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
