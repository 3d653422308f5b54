//! Runs the TCP test peer's services until killed, for use by hand:
//!
//! ```sh
//! corral-tcppeer --ip 10.97.0.1            # on Linux's stack
//! ```

use std::net::{IpAddr, SocketAddr};

use clap::Parser;
use corral_app_tcppeer::{LinuxNet, Service, serve};

#[derive(Parser, Debug)]
#[command(about = "TCP test peer: echo, sink, source and a sockperf server")]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    ip: IpAddr,
    #[arg(long, default_value_t = 7)]
    echo_port: u16,
    #[arg(long, default_value_t = 9)]
    sink_port: u16,
    #[arg(long, default_value_t = 19)]
    source_port: u16,
    /// Bytes the source sends per connection.
    #[arg(long, default_value_t = 1 << 20)]
    source_len: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 11111)]
    sockperf_port: u16,
}

fn main() {
    let args = Args::parse();
    let at = |port| SocketAddr::new(args.ip, port);
    let services = [
        (at(args.echo_port), Service::Echo),
        (at(args.sink_port), Service::Sink),
        (
            at(args.source_port),
            Service::Source {
                len: args.source_len,
                seed: args.seed,
            },
        ),
        (at(args.sockperf_port), Service::Sockperf),
    ];
    let (bound, _served) = serve::<LinuxNet>(&services).unwrap_or_else(|e| {
        eprintln!("corral-tcppeer: cannot listen: {e}");
        std::process::exit(1);
    });
    for (addr, (_, service)) in bound.iter().zip(&services) {
        println!("{service:?} on {addr}");
    }
    loop {
        std::thread::park();
    }
}
