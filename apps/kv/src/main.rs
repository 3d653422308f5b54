//! `corral-kv`: a memcached-compatible key-value server. On Linux sockets in this build.

use std::net::{TcpListener, UdpSocket};
use std::thread;

use clap::Parser;
use corral_app_kv::{Server, Settings, linux};

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
    /// Interface to listen on.
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
    /// Threads (UDP workers; sizes the store's sharding).
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: usize,
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
    };
    let server = Server::new(settings);
    let mut handles = Vec::new();
    if args.udp_port != 0 {
        let socket = UdpSocket::bind((args.listen.as_str(), args.udp_port)).unwrap_or_else(|e| {
            eprintln!(
                "corral-kv: cannot bind UDP {}:{}: {e}",
                args.listen, args.udp_port
            );
            std::process::exit(1)
        });
        let server = server.clone();
        let threads = args.threads;
        handles.push(thread::spawn(move || {
            linux::run_udp(server, socket, threads)
        }));
    }
    if args.port != 0 {
        let listener = TcpListener::bind((args.listen.as_str(), args.port)).unwrap_or_else(|e| {
            eprintln!(
                "corral-kv: cannot bind TCP {}:{}: {e}",
                args.listen, args.port
            );
            std::process::exit(1)
        });
        let server = server.clone();
        handles.push(thread::spawn(move || linux::run_tcp(server, listener)));
    }
    for h in handles {
        let _ = h.join();
    }
}
