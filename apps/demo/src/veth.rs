//! `--nic xdp`'s wire: a veth pair with one end in a network namespace of its own, where the
//! load generator runs as if on another machine. The root namespace's end is iokerneld's
//! interface in the Corral runs (its XDP program takes the spin server's frames) and the Linux
//! spin server's in the Linux runs. Removed on drop, so also when a run fails.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use crate::cli::XDP_SUBNET;
use crate::error::{Error, Result};

/// The root namespace's end: iokerneld attaches here.
pub const HOST_LINK: &str = "crldemo0";
/// The client namespace's end.
const PEER_LINK: &str = "crldemo1";

/// The pair and the namespace.
pub struct Veth {
    pub namespace: String,
}

fn run(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|e| Error::msg(format!("cannot run {}: {e}", args[0])))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Veth {
    /// Makes the namespace and the pair: `.1/24` here, `.2/24` inside, the inside end's
    /// transmit checksum offload off (so that its frames reach AF_XDP with complete checksums,
    /// as a wire's do).
    pub fn create() -> Result<Veth> {
        let namespace = format!("crldemo{}", std::process::id() % 100_000);
        // Leftovers of a run that was killed.
        for args in [
            &["ip", "link", "del", HOST_LINK][..],
            &["ip", "netns", "del", &namespace],
        ] {
            let _ = run(args);
        }
        run(&["ip", "netns", "add", &namespace])?;
        let veth = Veth { namespace };
        let ns = veth.namespace.as_str();
        let [a, b, c] = XDP_SUBNET;
        let host = format!("{}/24", Ipv4Addr::new(a, b, c, 1));
        let peer = format!("{}/24", Ipv4Addr::new(a, b, c, 2));
        run(&[
            "ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", PEER_LINK, "netns", ns,
        ])?;
        run(&["ip", "addr", "add", &host, "dev", HOST_LINK])?;
        run(&["ip", "link", "set", HOST_LINK, "up"])?;
        run(&["ip", "-n", ns, "addr", "add", &peer, "dev", PEER_LINK])?;
        run(&["ip", "-n", ns, "link", "set", PEER_LINK, "up"])?;
        run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        run(&[
            "ip", "netns", "exec", ns, "ethtool", "-K", PEER_LINK, "tx", "off",
        ])
        .map_err(|e| Error::msg(format!("{e} (scripts/setup.sh installs ethtool)")))?;
        Ok(veth)
    }

    /// The command line that runs `program args...` inside the namespace.
    pub fn wrap(&self, program: &str, args: Vec<String>) -> (String, Vec<String>) {
        let mut all = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            self.namespace.clone(),
            program.to_owned(),
        ];
        all.extend(args);
        ("ip".to_owned(), all)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", HOST_LINK]);
        let _ = run(&["ip", "netns", "del", &self.namespace]);
    }
}
