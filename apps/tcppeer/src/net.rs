//! The few calls the peer needs from a TCP stack and a thread system.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

/// A TCP stack plus a way to start a thread of control on it.
pub trait Net: Send + Sync + 'static {
    type Listener: Send + 'static;
    type Stream: Read + Write + Send + 'static;
    fn bind(addr: SocketAddr) -> io::Result<Self::Listener>;
    fn local_addr(listener: &Self::Listener) -> io::Result<SocketAddr>;
    fn accept(listener: &Self::Listener) -> io::Result<(Self::Stream, SocketAddr)>;
    fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self::Stream>;
    fn shutdown(stream: &Self::Stream, how: Shutdown) -> io::Result<()>;
    fn set_nodelay(stream: &Self::Stream, on: bool) -> io::Result<()>;
    fn set_read_timeout(stream: &Self::Stream, t: Option<Duration>) -> io::Result<()>;
    /// Runs `f` on its own thread of control (an OS thread, or a uthread).
    fn spawn(f: impl FnOnce() + Send + 'static);
}

/// Implements [`Net`] for `$name` over a `TcpListener` and a `TcpStream` that mirror
/// `std::net`'s, and a detached spawn function: Corral's API is the same as Linux's by design,
/// so one body serves both.
macro_rules! impl_net {
    ($(#[$doc:meta])* $name:ident, $listener:ty, $stream:ty, $spawn:path) => {
        $(#[$doc])*
        pub struct $name;

        impl Net for $name {
            type Listener = $listener;
            type Stream = $stream;
            fn bind(addr: SocketAddr) -> io::Result<Self::Listener> {
                <$listener>::bind(addr)
            }
            fn local_addr(listener: &Self::Listener) -> io::Result<SocketAddr> {
                listener.local_addr().map(Into::into)
            }
            fn accept(listener: &Self::Listener) -> io::Result<(Self::Stream, SocketAddr)> {
                listener.accept().map(|(stream, peer)| (stream, peer.into()))
            }
            fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self::Stream> {
                <$stream>::connect_timeout(&addr, timeout)
            }
            fn shutdown(stream: &Self::Stream, how: Shutdown) -> io::Result<()> {
                stream.shutdown(how)
            }
            fn set_nodelay(stream: &Self::Stream, on: bool) -> io::Result<()> {
                stream.set_nodelay(on)
            }
            fn set_read_timeout(stream: &Self::Stream, t: Option<Duration>) -> io::Result<()> {
                stream.set_read_timeout(t)
            }
            fn spawn(f: impl FnOnce() + Send + 'static) {
                $spawn(f);
            }
        }
    };
}

fn os_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f);
}

impl_net!(
    /// Linux's TCP (`std::net`), one OS thread per connection.
    LinuxNet,
    std::net::TcpListener,
    std::net::TcpStream,
    os_thread
);

fn uthread(f: impl FnOnce() + Send + 'static) {
    corral::spawn_detached(f);
}

impl_net!(
    /// Corral's TCP (`corral::net`), one uthread per connection; call from inside a runtime.
    CorralNet,
    corral::net::TcpListener,
    corral::net::TcpStream,
    uthread
);
