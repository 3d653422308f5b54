//! `corral-dns`: an authoritative DNS server, on Linux sockets (`--runtime linux`, the
//! default) or on Corral's runtime and network stack (`--runtime corral`), where `-l` is the
//! runtime's own IPv4 address and iokerneld (`--iokerneld` or `CORRAL_IOKERNELD`) connects it
//! to the network. It serves UDP and TCP on the same port.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use corral_app_dns::config::{self, ZoneSpec};
use corral_app_dns::{Server, corral, linux};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Linux sockets: -t threads on UDP, a thread per TCP connection.
    Linux,
    /// Corral's runtime and network stack: a uthread per datagram and per connection.
    Corral,
}

/// Flags as NSD and Knot name them where they have one.
#[derive(Parser, Debug)]
#[command(name = "corral-dns", about = "authoritative DNS server")]
struct Args {
    /// Zone files, each `ZONEFILE` (the zone is its $ORIGIN or SOA owner) or
    /// `ORIGIN=ZONEFILE`.
    zones: Vec<String>,
    /// A TOML config naming zones (and optionally `listen` and `port`).
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// UDP and TCP port [default: 53].
    #[arg(short = 'p', long = "port")]
    port: Option<u16>,
    /// Address to listen on; on Corral, the runtime's own IPv4 address [default: 0.0.0.0].
    #[arg(short = 'l', long = "listen")]
    listen: Option<String>,
    /// Threads: on Linux the UDP workers, on Corral the kthreads.
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    threads: usize,
    /// Print the counters to stderr every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    stats_every: u64,
    /// Load the zones, report any error, and exit without serving.
    #[arg(long)]
    check: bool,
    /// Which sockets and threads serve.
    #[arg(long, value_enum, default_value_t = Backend::Linux)]
    runtime: Backend,
    /// Prefix length of the runtime's subnet (Corral).
    #[arg(long, default_value_t = 24)]
    prefix: u8,
    /// iokerneld's control socket (Corral); default: `CORRAL_IOKERNELD`, else standalone.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// Cores iokerneld guarantees the runtime (Corral under iokerneld) [default: --spinning].
    #[arg(long)]
    guaranteed: Option<usize>,
    /// Kthreads that poll instead of parking, each on a guaranteed core (Corral under
    /// iokerneld).
    #[arg(long, default_value_t = 0)]
    spinning: usize,
    /// Microseconds an idle kthread polls before it parks (Corral) [default: the runtime's].
    #[arg(long)]
    spin_before_park_us: Option<u64>,
}

fn fail(what: std::fmt::Arguments<'_>) -> ! {
    eprintln!("corral-dns: {what}");
    std::process::exit(1)
}

fn main() {
    let args = Args::parse();
    let mut specs: Vec<ZoneSpec> = args.zones.iter().map(|z| ZoneSpec::parse(z)).collect();
    let mut listen = args.listen.clone();
    let mut port = args.port;
    if let Some(path) = &args.config {
        let (cfg, zones) = config::read_config(path).unwrap_or_else(|e| fail(format_args!("{e}")));
        specs.extend(zones);
        listen = listen.or(cfg.listen);
        port = port.or(cfg.port);
    }
    if specs.is_empty() {
        fail(format_args!(
            "no zones: name zone files, or a config with -c"
        ));
    }
    let catalog = config::load(&specs).unwrap_or_else(|e| fail(format_args!("{e}")));
    if args.check {
        for z in catalog.zones() {
            println!("{}: {} names", z.origin(), z.nodes().count());
        }
        return;
    }
    let server = Arc::new(Server::new(catalog));
    let listen = listen.unwrap_or_else(|| "0.0.0.0".into());
    let port = port.unwrap_or(53);
    match args.runtime {
        Backend::Linux => serve_linux(&args, server, &listen, port),
        Backend::Corral => serve_corral(&args, server, &listen, port),
    }
}

fn serve_linux(args: &Args, server: Arc<Server>, listen: &str, port: u16) {
    let udp = UdpSocket::bind((listen, port))
        .unwrap_or_else(|e| fail(format_args!("cannot bind UDP {listen}:{port}: {e}")));
    let tcp = TcpListener::bind((listen, port))
        .unwrap_or_else(|e| fail(format_args!("cannot bind TCP {listen}:{port}: {e}")));
    if args.stats_every > 0 {
        let server = server.clone();
        let every = Duration::from_secs(args.stats_every);
        thread::spawn(move || {
            loop {
                thread::sleep(every);
                eprintln!("corral-dns: {}", server.counters.line());
            }
        });
    }
    let threads = args.threads;
    let s = server.clone();
    let udp = thread::spawn(move || linux::run_udp(s, udp, threads));
    linux::run_tcp(server, tcp);
    let _ = udp.join();
}

fn serve_corral(args: &Args, server: Arc<Server>, listen: &str, port: u16) {
    let ip: Ipv4Addr = listen.parse().unwrap_or_else(|e| {
        fail(format_args!(
            "-l {listen:?}: on Corral this is the runtime's own IPv4 address: {e}"
        ))
    });
    if ip.is_unspecified() {
        fail(format_args!(
            "on Corral, -l must name the runtime's own IPv4 address (e.g. -l 10.99.0.2)"
        ));
    }
    let mut net = ::corral::net::NetConfig::new(ip, args.prefix);
    if let Err(e) = net.tcp.apply_env(|k| std::env::var(k).ok()) {
        fail(format_args!("{e}"));
    }
    let mut config = ::corral::Config::from_env()
        .kthreads(args.threads.max(1))
        .net(net);
    if let Some(us) = args.spin_before_park_us {
        config = config.spin_before_park(Duration::from_micros(us));
    }
    if let Some(socket) = &args.iokerneld {
        config = config.iokernel(::corral::IokernelSettings::new(socket, "corral-dns"));
    }
    match &config.mode {
        ::corral::Mode::Iokernel(iok) => {
            let iok = iok
                .clone()
                .guaranteed_cores(args.guaranteed.unwrap_or(args.spinning))
                .spinning_kthreads(args.spinning);
            config = config.iokernel(iok);
        }
        ::corral::Mode::Standalone => {
            if args.spinning > 0 || args.guaranteed.is_some() {
                fail(format_args!(
                    "--spinning and --guaranteed need iokerneld (--iokerneld or CORRAL_IOKERNELD)"
                ));
            }
        }
    }
    let rt = ::corral::Runtime::new(config)
        .unwrap_or_else(|e| fail(format_args!("cannot start the runtime: {e}")));
    let addr = SocketAddrV4::new(ip, port);
    thread::scope(|scope| {
        if args.stats_every > 0 {
            let (server, rt) = (&server, &rt);
            let every = Duration::from_secs(args.stats_every);
            scope.spawn(move || {
                loop {
                    thread::sleep(every);
                    eprintln!(
                        "corral-dns: {} {}",
                        server.counters.line(),
                        corral::stack_line(rt)
                    );
                }
            });
        }
        let server = server.clone();
        if let Err(e) = rt.block_on(move || corral::serve(server, addr)) {
            fail(format_args!("cannot serve on {addr}: {e}"));
        }
    });
}
