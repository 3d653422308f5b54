//! `corral-kv`: a memcached-compatible key-value server, on Linux sockets (`--runtime linux`,
//! the default) or on Corral's runtime and network stack (`--runtime corral`), where `-l` is
//! the runtime's own IPv4 address and iokerneld (`--iokerneld` or `CORRAL_IOKERNELD`) connects
//! it to the network.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::thread;

use clap::{Parser, ValueEnum};
use corral_app_kv::{Server, Settings, corral, linux};
use corral_memcache::ShardWait;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Linux sockets, a thread per connection.
    Linux,
    /// Corral's runtime and network stack, a uthread per connection.
    Corral,
}

/// Flags as memcached names them.
#[derive(Parser, Debug)]
#[command(name = "corral-kv", about = "memcached-compatible key-value server")]
struct Args {
    /// TCP port to listen on (0: off).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// UDP port to listen on (0: off).
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Interface to listen on; on Corral, the runtime's own IPv4 address.
    #[arg(short = 'l', long = "listen", default_value = "0.0.0.0")]
    listen: String,
    /// Item memory in megabytes.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_mb: usize,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conns: usize,
    /// Largest item, e.g. 1m, 512k or a byte count.
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    item_size: usize,
    /// Threads: on Linux the UDP workers, on Corral the kthreads; also sizes the store's
    /// sharding.
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: usize,
    /// Which sockets and threads serve.
    #[arg(long, value_enum, default_value_t = Backend::Linux)]
    runtime: Backend,
    /// Prefix length of the runtime's subnet (Corral).
    #[arg(long, default_value_t = 24)]
    prefix: u8,
    /// iokerneld's control socket (Corral); default: `CORRAL_IOKERNELD`, else standalone
    /// (reachable only from inside the runtime).
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

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: usize = num.parse().map_err(|e| format!("bad size {s:?}: {e}"))?;
    let size = n * mult;
    if !(1024..=(1 << 30)).contains(&size) {
        return Err(format!("item size {size} must be between 1k and 1g"));
    }
    Ok(size)
}

fn main() {
    let args = Args::parse();
    if args.item_size > (args.memory_mb << 20) / 2 {
        eprintln!("Cannot set item size limit higher than 1/2 of memory max.");
        std::process::exit(1);
    }
    let settings = Settings {
        tcp_port: args.port,
        udp_port: args.udp_port,
        listen: args.listen.clone(),
        memory_mb: args.memory_mb,
        max_connections: args.conns,
        item_size_max: args.item_size,
        threads: args.threads.max(1),
        shard_wait: match args.runtime {
            Backend::Linux => ShardWait::Block,
            Backend::Corral => ShardWait::Spin {
                relax: ::corral::yield_now,
            },
        },
    };
    match args.runtime {
        Backend::Linux => serve_linux(&args, settings),
        Backend::Corral => serve_corral(&args, settings),
    }
}

fn fail(what: std::fmt::Arguments<'_>) -> ! {
    eprintln!("corral-kv: {what}");
    std::process::exit(1)
}

fn serve_linux(args: &Args, settings: Settings) {
    let server = Server::new(settings);
    let mut handles = Vec::new();
    if args.udp_port != 0 {
        let socket = UdpSocket::bind((args.listen.as_str(), args.udp_port)).unwrap_or_else(|e| {
            fail(format_args!(
                "cannot bind UDP {}:{}: {e}",
                args.listen, args.udp_port
            ))
        });
        let server = server.clone();
        let threads = args.threads;
        handles.push(thread::spawn(move || {
            linux::run_udp(server, socket, threads)
        }));
    }
    if args.port != 0 {
        let listener = TcpListener::bind((args.listen.as_str(), args.port)).unwrap_or_else(|e| {
            fail(format_args!(
                "cannot bind TCP {}:{}: {e}",
                args.listen, args.port
            ))
        });
        let server = server.clone();
        handles.push(thread::spawn(move || linux::run_tcp(server, listener)));
    }
    for h in handles {
        let _ = h.join();
    }
}

fn serve_corral(args: &Args, settings: Settings) {
    let ip: Ipv4Addr = args.listen.parse().unwrap_or_else(|e| {
        fail(format_args!(
            "-l {:?}: on Corral this is the runtime's own IPv4 address: {e}",
            args.listen
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
        .kthreads(settings.threads)
        .net(net);
    if let Some(us) = args.spin_before_park_us {
        config = config.spin_before_park(std::time::Duration::from_micros(us));
    }
    if let Some(socket) = &args.iokerneld {
        config = config.iokernel(::corral::IokernelSettings::new(socket, "corral-kv"));
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
    let tcp = (args.port != 0).then(|| SocketAddrV4::new(ip, args.port));
    let udp = (args.udp_port != 0).then(|| SocketAddrV4::new(ip, args.udp_port));
    let server = Server::new(settings);
    let result = rt.block_on(move || corral::serve(server, tcp, udp));
    if let Err(e) = result {
        fail(format_args!("cannot serve on {ip}: {e}"));
    }
}
