//! `--metrics-listen`: the statistics in the Prometheus text format over HTTP, at `/metrics`.
//!
//! A thread of its own, never the busy loop: for each scrape it asks the daemon's control
//! socket for its statistics, as `iokerneld stats` does (the loop answers that request between
//! polls, as it answers any client), and renders them. It serves one connection at a time, and
//! every connection is bounded: the request head must arrive whole within
//! [`REQUEST_DEADLINE`] and fit in [`MAX_REQUEST_HEAD`] bytes, the response must leave within
//! [`WRITE_TIMEOUT`], and one reply is sent per connection. A statistics snapshot is reused for
//! [`SNAPSHOT_REUSE`], so that however often a client asks, the loop builds a few a second at
//! most. A slow or hostile client can only delay other scrapes.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use log::{debug, warn};

use crate::exposition;
use corral_iokernel::daemon::Stats;

/// Longest request head (request line and headers) read; longer ones are answered 431.
pub const MAX_REQUEST_HEAD: usize = 8192;
/// Time a client has to send its whole request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Time a write of the response may block.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a rendered snapshot is served again instead of asking the daemon anew.
pub const SNAPSHOT_REUSE: Duration = Duration::from_millis(250);
/// Time the daemon has to answer a statistics request.
const STATS_TIMEOUT: Duration = Duration::from_secs(5);
/// After the response, the most the server reads (and drops) of what the client still sends,
/// and for how long, so that closing does not reset the connection under the response.
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_millis(200);

/// Where the server thread runs: off iokerneld's own CPU, on the spare CPUs if there are any,
/// else on the managed cores at `SCHED_IDLE`, where it takes only time the runtimes leave.
pub struct Placement {
    pub cpus: Vec<usize>,
    pub idle: bool,
}

/// Binds `address`; an error names it.
pub fn bind(address: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(address).map_err(|e| format!("cannot listen for metrics on {address}: {e}"))
}

/// Starts the server thread on `listener`, asking the daemon on `socket` for statistics.
/// Returns once the thread has placed itself, or why it could not.
pub fn spawn(listener: TcpListener, socket: PathBuf, placement: Placement) -> Result<(), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("corral-metrics".into())
        .spawn(move || {
            let placed = place(&placement);
            let ok = placed.is_ok();
            let _ = ready_tx.send(placed);
            if ok {
                serve(&listener, &mut Snapshots::new(socket));
            }
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    match ready_rx.recv() {
        Ok(result) => result,
        Err(_) => Err("the metrics thread ended before it started".into()),
    }
}

fn place(placement: &Placement) -> Result<(), String> {
    let tid = corral_iokernel::sys::gettid();
    corral_affinity::set_thread_affinity(tid, &placement.cpus).map_err(|e| {
        format!(
            "cannot move the metrics thread to CPUs {}: {e}",
            corral_iokernel::cpus::format_cpu_list(&placement.cpus)
        )
    })?;
    if placement.idle {
        corral_iokernel::sys::set_idle_policy(tid, true)
            .map_err(|e| format!("cannot put the metrics thread under SCHED_IDLE: {e}"))?;
    }
    Ok(())
}

fn serve(listener: &TcpListener, snapshots: &mut Snapshots) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                debug!("metrics: connection from {peer}");
                handle(stream, snapshots);
            }
            Err(e) => {
                // Out of descriptors, say: wait rather than spin on the error.
                warn!("metrics: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Statistics asked of the daemon and rendered, reused for [`SNAPSHOT_REUSE`].
struct Snapshots {
    socket: PathBuf,
    last: Option<(Instant, String)>,
}

impl Snapshots {
    fn new(socket: PathBuf) -> Self {
        Snapshots { socket, last: None }
    }

    fn text(&mut self) -> Result<&str, String> {
        let fresh = self
            .last
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < SNAPSHOT_REUSE);
        if !fresh {
            let json = crate::request_stats(&self.socket, STATS_TIMEOUT)?;
            let stats: Stats = serde_json::from_str(&json)
                .map_err(|e| format!("the daemon's statistics do not parse: {e}"))?;
            self.last = Some((Instant::now(), exposition::render(&stats)));
        }
        Ok(self
            .last
            .as_ref()
            .map(|(_, text)| text.as_str())
            .unwrap_or(""))
    }
}

/// Why no request could be read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// Over [`MAX_REQUEST_HEAD`] bytes without an end.
    TooLarge,
    /// Closed, timed out or failed before the head ended: nothing to answer.
    Gone,
}

/// Reads up to the blank line that ends the request head, within [`REQUEST_DEADLINE`].
fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Gone);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Gone),
        };
        let searched_from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&head[searched_from..]) {
            head.truncate(searched_from + end);
            return Ok(head);
        }
        if head.len() > MAX_REQUEST_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends in `bytes` (after its blank line, CRLF or bare LF), if it does.
fn head_end(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find_map(|i| {
        if bytes[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if bytes[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else if bytes[i..].starts_with(b"\n\r\n") {
            Some(i + 3)
        } else {
            None
        }
    })
}

struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    allow: bool,
    body: String,
}

impl Response {
    fn plain(status: u16, reason: &'static str, body: impl Into<String>) -> Self {
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            allow: false,
            body: body.into(),
        }
    }
}

/// The response to one request head.
fn respond(head: &[u8], snapshots: &mut Snapshots) -> Response {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    let Some((method, target)) = std::str::from_utf8(line).ok().and_then(parse_request_line) else {
        return Response::plain(400, "Bad Request", "not an HTTP/1 request line\n");
    };
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return Response::plain(404, "Not Found", "iokerneld serves /metrics only\n");
    }
    if method != "GET" {
        let mut response =
            Response::plain(405, "Method Not Allowed", "/metrics answers GET only\n");
        response.allow = true;
        return response;
    }
    match snapshots.text() {
        Ok(text) => Response {
            status: 200,
            reason: "OK",
            content_type: exposition::CONTENT_TYPE,
            allow: false,
            body: text.to_owned(),
        },
        Err(e) => Response::plain(503, "Service Unavailable", format!("{e}\n")),
    }
}

/// `METHOD TARGET HTTP/1.x` as (method, target); `None` for anything else.
fn parse_request_line(line: &str) -> Option<(&str, &str)> {
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let version_ok = version
        .strip_prefix("HTTP/1.")
        .is_some_and(|minor| minor.len() == 1 && minor.as_bytes()[0].is_ascii_digit());
    let target_ok = !target.is_empty() && target.bytes().all(|b| b.is_ascii_graphic());
    (parts.next().is_none() && token(method) && target_ok && version_ok).then_some((method, target))
}

fn handle(mut stream: TcpStream, snapshots: &mut Snapshots) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let response = match read_head(&mut stream) {
        Ok(head) => respond(&head, snapshots),
        Err(HeadError::TooLarge) => Response::plain(
            431,
            "Request Header Fields Too Large",
            format!("the request head is over {MAX_REQUEST_HEAD} bytes\n"),
        ),
        Err(HeadError::Gone) => return,
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        response.reason,
        response.content_type,
        response.body.len()
    );
    if response.allow {
        head.push_str("Allow: GET\r\n");
    }
    head.push_str("\r\n");
    if stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(response.body.as_bytes()))
        .is_err()
    {
        return;
    }
    // Closing with unread bytes from the client would reset the connection, and the reset can
    // overtake the response; read what is left for a moment first.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(DRAIN_TIME));
    let until = Instant::now() + DRAIN_TIME;
    let mut drained = 0;
    let mut chunk = [0u8; 4096];
    while drained < DRAIN_LIMIT && Instant::now() < until {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_parsed_strictly() {
        assert_eq!(
            parse_request_line("GET /metrics HTTP/1.1"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(
            parse_request_line("POST /metrics?x=1 HTTP/1.0"),
            Some(("POST", "/metrics?x=1"))
        );
        for bad in [
            "",
            "GET",
            "GET /metrics",
            "GET  /metrics HTTP/1.1",
            "GET /metrics HTTP/2.0",
            "GET /metrics HTTP/1.1 extra",
            "G(T /metrics HTTP/1.1",
            "GET /met\u{7f}rics HTTP/1.1",
        ] {
            assert_eq!(parse_request_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
