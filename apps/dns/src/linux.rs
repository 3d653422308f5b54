//! The Linux-socket backend: `-t` threads answering UDP on one shared socket, and a thread
//! per TCP connection.

use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread;
use std::time::Duration;

use crate::{Server, UDP_BUF};

/// How long a TCP connection may sit idle before the server closes it (RFC 7766 section
/// 6.2.3 asks servers to bound it; a few seconds is the norm).
pub const TCP_IDLE: Duration = Duration::from_secs(10);

/// Accepts connections forever, a thread for each.
pub fn run_tcp(server: Arc<Server>, listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let server = server.clone();
        let _ = thread::Builder::new()
            .name("dns-tcp".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _ = stream.set_nodelay(true);
                let _ = stream.set_read_timeout(Some(TCP_IDLE));
                let _ = server.serve_tcp(&stream);
                let _ = stream.shutdown(std::net::Shutdown::Both);
            });
    }
}

/// Answers datagrams on `threads` threads sharing the socket.
pub fn run_udp(server: Arc<Server>, socket: UdpSocket, threads: usize) {
    let socket = Arc::new(socket);
    let mut handles = Vec::new();
    for _ in 0..threads.max(1) {
        let socket = socket.clone();
        let server = server.clone();
        handles.push(thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut out = [0u8; UDP_BUF];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let len = server.answer_datagram(&buf[..n], &mut out);
                if len > 0 && socket.send_to(&out[..len], peer).is_err() {
                    server.counters.send_errors.fetch_add(1, Relaxed);
                }
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
}
