//! What the end-to-end tests share beyond `corral_xdp::testnet`.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

pub use corral_xdp::testnet::VethPair;

/// A fresh pair with `queues` queues on each end.
pub fn pair(queues: u32) -> VethPair {
    VethPair::create(queues).expect("a veth pair into a fresh namespace")
}

/// From inside the pair's namespace: whether a TCP connection to `to` opens within `timeout`.
pub fn connects(net: &VethPair, to: SocketAddr, timeout: Duration) -> bool {
    net.inside(|| TcpStream::connect_timeout(&to, timeout).is_ok())
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every millisecond until it holds or `timeout` passes; how long it took.
pub fn within(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
