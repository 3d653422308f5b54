//! iokerneld's control socket: where it listens. Everything that travels over the socket (the
//! socket type, descriptor passing, bounded receives, and the checks on what a runtime sends)
//! is corral-abi's [`transport`](corral_abi::transport), which runtimes link too; the names
//! the daemon uses are re-exported here. Message contents are corral-abi's
//! [`control`](corral_abi::control) format.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

pub use corral_abi::transport::client::{recv_reply, request_on};
pub use corral_abi::transport::connect;
pub use corral_abi::transport::server::{
    Received, RecvBuffers, RecvError, accept, peer_pid, recv_message, send_reply,
};

/// Connections the kernel queues before iokerneld's next poll accepts them.
const BACKLOG: i32 = 128;

/// Creates the nonblocking listening socket at `path`: its parent directory is created, and a
/// stale socket file left by a previous run is replaced. A live iokerneld on `path` is left
/// alone and named in the error.
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another iokerneld is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    corral_abi::transport::server::bind_listener(path, BACKLOG)
}
