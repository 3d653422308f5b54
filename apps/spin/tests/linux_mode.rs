//! The Linux-socket spin server answers a well-formed request with its own bytes and ignores a
//! malformed one.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

use corral_loadgen::wire::{Message, ServerStamps};

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_request_is_served_and_echoed() {
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let addr = format!("127.0.0.1:{port}");
    let _server = Kill(
        Command::new(env!("CARGO_BIN_EXE_spin"))
            .args(["--runtime", "linux", "--addr", &addr])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut request = [0u8; 64];
    Message {
        id: 42,
        scheduled_send_ns: 5,
        service_ns: 10_000,
        client: 1,
        sent_ns: 0,
    }
    .encode(&mut request)
    .unwrap();
    let mut buf = [0u8; 128];
    // The server needs a moment to calibrate and bind; retry until it answers.
    let mut answered = None;
    for _ in 0..100 {
        client.send_to(b"garbage", &addr).unwrap();
        client.send_to(&request, &addr).unwrap();
        if let Ok(n) = client.recv(&mut buf) {
            answered = Some(n);
            break;
        }
    }
    let n = answered.expect("the spin server never answered");
    // The echo is the request with the server's stamps filled in.
    assert_eq!(n, request.len());
    assert_eq!(
        Message::decode(&buf[..n]).unwrap(),
        Message::decode(&request).unwrap()
    );
    let s = ServerStamps::read(&buf[..n]).expect("the server stamps its answers");
    assert!(
        s.received_ns <= s.start_ns && s.start_ns < s.end_ns,
        "{s:?}"
    );
}
