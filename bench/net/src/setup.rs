//! What every experiment sets up: pinned threads, iokerneld with a TAP device or none, a Corral
//! runtime on the managed core, and a Linux peer in a network namespace behind a veth pair.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use corral::net::{NetConfig, TcpSettings};
use corral::{Config, IokernelSettings, Runtime};

use crate::Args;

/// The host side of the TAP device, and the Corral runtime's address behind it.
pub const TAP_HOST: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 1);
pub const TAP_RUNTIME: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 2);

/// The TAP device and host address every Corral experiment uses.
pub const TAP_ARGS: [&str; 6] = [
    "--nic",
    "tap",
    "--tap-name",
    "crlbench0",
    "--host-ip",
    "10.97.0.1/24",
];

/// The XDP path: iokerneld on the root end of a veth pair (`crlxdp0`, whose own address,
/// 10.94.0.1, stays Linux's), the runtime at `XDP_RUNTIME` behind it, the Linux client in a
/// namespace at `XDP_PEER`.
pub const XDP_PEER: Ipv4Addr = Ipv4Addr::new(10, 94, 0, 2);
pub const XDP_RUNTIME: Ipv4Addr = Ipv4Addr::new(10, 94, 0, 3);
pub const XDP_ARGS: [&str; 4] = ["--nic", "xdp", "--interface", "crlxdp0"];

/// How a Linux client reaches a Corral runtime: through iokerneld's TAP device from this
/// namespace, or through a veth pair with iokerneld's XDP program on this end and the client
/// in a namespace at the other.
pub struct Wire {
    pub name: &'static str,
    pub nic_args: &'static [&'static str],
    pub runtime: Ipv4Addr,
    pub client: Ipv4Addr,
    /// The interface a raw sender puts frames on, where the client runs.
    pub sender_link: &'static str,
    /// Where the client runs (`None`: here).
    pub namespace: Option<Namespace>,
}

impl Wire {
    pub fn tap() -> Wire {
        Wire {
            name: "TAP",
            nic_args: &TAP_ARGS,
            runtime: TAP_RUNTIME,
            client: TAP_HOST,
            sender_link: "crlbench0",
            namespace: None,
        }
    }

    pub fn xdp() -> Wire {
        Wire {
            name: "XDP",
            nic_args: &XDP_ARGS,
            runtime: XDP_RUNTIME,
            client: XDP_PEER,
            sender_link: "crlxdp1",
            namespace: Some(Namespace::create_xdp()),
        }
    }

    /// Runs `f` where the client belongs.
    pub fn client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match &self.namespace {
            Some(ns) => ns.run_inside(f),
            None => f(),
        }
    }
}

/// The host side of the veth pair, and the Linux peer's address in its namespace.
pub const VETH_HOST: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
pub const VETH_PEER: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 2);

/// A benchmark pinned somewhere else than asked measures something else: stop.
pub fn pin(cpu: usize) {
    if let Err(e) = corral_affinity::pin_current_thread(cpu) {
        panic!("{e}");
    }
}

pub fn run(cmd: &[&str]) {
    let status = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed");
}

/// Runs `f` as the stand-in for a client on another machine: its own thread, pinned to `cpu`
/// at `SCHED_FIFO` priority 1. On a 2-CPU machine there is no other CPU for it, so it shares
/// iokerneld's; the real-time policy lets it take that CPU from iokerneld's busy loop the
/// moment its answer arrives instead of waiting up to a CFS slice. Its own thread, so that the
/// policy is not inherited by anything else (such as iokerneld, started from the main thread).
pub fn as_remote_client<T: Send>(cpu: usize, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                pin(cpu);
                let param = libc::sched_param { sched_priority: 1 };
                // SAFETY: changing the calling thread's own policy with a valid parameter.
                let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
                assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("client thread")
    })
}

/// iokerneld, killed on drop, its directory removed.
pub struct Daemon {
    child: Child,
    dir: PathBuf,
    pub socket: PathBuf,
    /// Each TCP connection's send and receive buffer in the runtimes it starts, if not the
    /// default.
    tcp_buffer: Option<usize>,
}

impl Daemon {
    /// Starts iokerneld on `args.iokernel_cpu`, managing `args.server_cpu`, with `nic_args`.
    pub fn start(args: &Args, binary: &Path, nic_args: &[&str], tag: &str) -> Daemon {
        let dir =
            std::env::temp_dir().join(format!("corral-bench-net-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("iokerneld.sock");
        let child = Command::new(binary)
            .args(["--core", &args.iokernel_cpu.to_string()])
            .args(["--managed-cores", &args.server_cpu.to_string()])
            .args(nic_args)
            .args(["--log-level", "warn"])
            // Unshielded: the client stands in for another machine on iokerneld's CPU, which a
            // shield would move it off, and the Linux runs it is compared with have none.
            .args(["--shield", "off"])
            .args(
                args.share_quantum_us
                    .map(|us| ["--share-quantum-us".to_owned(), us.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(
                args.rx_backlog_frames
                    .map(|n| ["--rx-backlog-frames".to_owned(), n.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .expect("start iokerneld");
        let daemon = Daemon {
            child,
            dir,
            socket,
            tcp_buffer: args.tcp_buffer,
        };
        let start = Instant::now();
        while !daemon.socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "iokerneld did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        daemon
    }

    /// A runtime with `kthreads` kthreads and the address `ip`; `spinning`: its first kthread
    /// on a guaranteed core, never parking.
    pub fn runtime(&self, name: &str, ip: Ipv4Addr, kthreads: usize, spinning: bool) -> Runtime {
        let mut settings = IokernelSettings::new(&self.socket, name);
        if spinning {
            settings = settings.guaranteed_cores(1).spinning_kthreads(1);
        }
        let mut tcp = TcpSettings::default();
        if let Some(bytes) = self.tcp_buffer {
            tcp.tcp.send_buffer = bytes;
            tcp.tcp.recv_buffer = bytes;
        }
        Runtime::new(
            Config::default()
                .kthreads(kthreads)
                .iokernel(settings)
                .net(NetConfig::new(ip, 24).tcp(tcp)),
        )
        .expect("start a Corral runtime")
    }
}

impl Daemon {
    /// iokerneld's statistics now.
    pub fn stats(&self) -> corral_iokernel::daemon::Stats {
        use corral_abi::control::{Reply, Request};
        use std::os::fd::AsFd;
        let conn = corral_iokernel::control::connect(&self.socket).expect("iokerneld's socket");
        let reply = corral_iokernel::control::request_on(
            conn.as_fd(),
            &Request::Stats.encode(),
            &[],
            Duration::from_secs(5),
        );
        match reply {
            Ok(Reply::Stats { json }) => serde_json::from_str(&json).expect("statistics"),
            other => panic!("expected statistics, got {other:?}"),
        }
    }

    /// Frames the NIC backend has received, and the system calls it made to receive them.
    pub fn nic_rx_frames_and_syscalls(&self) -> (u64, u64) {
        let nic = self.stats().nic.expect("a NIC backend").counters;
        (nic.rx_frames, nic.rx_syscalls)
    }

    /// CPU seconds iokerneld has spent in the kernel (its system calls, and what the kernel did
    /// on their behalf) since it started.
    pub fn system_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("iokerneld's /proc stat");
        // Fields after the command name (which may hold spaces) closes with ')'; stime is
        // the 15th field overall, the 13th after it.
        let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let ticks: f64 = after
            .split_whitespace()
            .nth(12)
            .and_then(|v| v.parse().ok())
            .expect("stime in stat");
        // SAFETY: sysconf has no preconditions.
        ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM first: a shielding iokerneld undoes its shield as it exits.
        corral_iokernel::sys::stop_child(&mut self.child, std::time::Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A network namespace reached over a veth pair (`VETH_HOST` here, `VETH_PEER` inside);
/// removed on drop.
pub struct Namespace {
    name: String,
    path: String,
    host_link: &'static str,
}

impl Namespace {
    /// The Linux baseline's namespace: `crlveth0` here, `crlveth1` inside, 10.96.0.0/24.
    pub fn create() -> Namespace {
        Namespace::with_pair("crlbench", "crlveth0", "crlveth1", "10.96.0")
    }

    /// The XDP path's namespace: `crlxdp0` here (where iokerneld attaches), `crlxdp1` inside
    /// at `XDP_PEER`, 10.94.0.0/24. The inside end's checksum offload is off, so that its
    /// frames reach AF_XDP with their checksums filled in, as frames from a wire do.
    pub fn create_xdp() -> Namespace {
        let ns = Namespace::with_pair("crlxdpns", "crlxdp0", "crlxdp1", "10.94.0");
        let status = Command::new("ip")
            .args([
                "netns", "exec", &ns.name, "ethtool", "-K", "crlxdp1", "tx", "off",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run ethtool (scripts/setup.sh installs it): {e}"));
        assert!(status.success(), "ethtool -K crlxdp1 tx off failed");
        ns
    }

    fn with_pair(tag: &str, host_link: &'static str, peer_link: &str, subnet: &str) -> Namespace {
        let name = format!("{tag}{}", std::process::id() % 100_000);
        // A namespace or link left by an interrupted run.
        for cmd in [
            &["ip", "netns", "del", name.as_str()][..],
            &["ip", "link", "del", host_link],
        ] {
            let _ = Command::new(cmd[0])
                .args(&cmd[1..])
                .stderr(Stdio::null())
                .status();
        }
        run(&["ip", "netns", "add", &name]);
        let ns = Namespace {
            path: format!("/var/run/netns/{name}"),
            name,
            host_link,
        };
        run(&[
            "ip", "link", "add", host_link, "type", "veth", "peer", "name", peer_link,
        ]);
        run(&["ip", "link", "set", peer_link, "netns", &ns.name]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{subnet}.1/24"),
            "dev",
            host_link,
        ]);
        run(&["ip", "link", "set", host_link, "up"]);
        let inside = |cmd: &[&str]| {
            let mut full = vec!["ip", "netns", "exec", &ns.name];
            full.extend_from_slice(cmd);
            run(&full);
        };
        inside(&[
            "ip",
            "addr",
            "add",
            &format!("{subnet}.2/24"),
            "dev",
            peer_link,
        ]);
        inside(&["ip", "link", "set", peer_link, "up"]);
        inside(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `f` on a thread inside the namespace and returns what it returns; threads it
    /// starts are inside too.
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    enter(&self.path);
                    f()
                })
                .join()
                .expect("a thread in the namespace")
        })
    }

    /// Runs `f` on a new thread inside the namespace, pinned to `cpu`. The thread is detached
    /// in effect: servers loop forever and die with the process.
    pub fn spawn<T: Send + 'static>(
        &self,
        cpu: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let path = self.path.clone();
        std::thread::spawn(move || {
            enter(&path);
            pin(cpu);
            f()
        })
    }
}

/// Moves the calling thread into the network namespace at `path`.
fn enter(path: &str) {
    let file = std::fs::File::open(path).expect("open the namespace");
    // SAFETY: moving only this thread into the namespace; the fd is valid.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
