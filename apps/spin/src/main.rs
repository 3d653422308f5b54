//! `spin`: a UDP server whose requests each burn their requested service time as calibrated
//! CPU work and are then echoed back. Runs on Corral (one uthread per request, optionally
//! under iokerneld) or on plain Linux sockets for the baseline.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use corral_app_spin::{Calibration, serve};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Corral,
    Linux,
}

#[derive(Parser, Debug)]
#[command(about = "UDP spin server: burn each request's service time, then echo it")]
struct Args {
    #[arg(long, value_enum, default_value_t = Mode::Corral)]
    runtime: Mode,
    /// Address to serve on. On Corral, also the runtime's own IP address.
    #[arg(long, default_value = "10.99.0.2:5000")]
    addr: SocketAddrV4,
    /// Prefix length of the runtime's subnet (Corral).
    #[arg(long, default_value_t = 24)]
    prefix: u8,
    /// iokerneld's control socket (Corral); default: `CORRAL_IOKERNELD`, else standalone.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// Kthreads (Corral).
    #[arg(long, default_value_t = 1)]
    kthreads: usize,
    /// Kthreads that spin on guaranteed cores instead of parking (Corral under iokerneld).
    #[arg(long, default_value_t = 0)]
    spinning: usize,
    /// Guaranteed cores (Corral under iokerneld), at least `--spinning` [default: as many as
    /// `--spinning`]. A runtime below its guarantee takes a core from a batch runtime at once;
    /// without one it waits until the batch runtime has held the core for iokerneld's share
    /// quantum.
    #[arg(long)]
    guaranteed: Option<usize>,
    /// Microseconds an idle kthread keeps polling before it parks (Corral) [default: the
    /// runtime's]. Under iokerneld each park costs a core hand-over; polling about as long as
    /// one hand-over takes bounds the waste to twice the best choice in hindsight.
    #[arg(long)]
    spin_before_park_us: Option<u64>,
    /// Use this burn rate instead of measuring one at start, so that servers compared with
    /// each other burn exactly the same work per requested microsecond.
    #[arg(long)]
    iterations_per_us: Option<f64>,
    /// Measure the burn rate (on `--cpu`, if given), print it as `iterations_per_us=RATE` and
    /// exit.
    #[arg(long)]
    calibrate_only: bool,
    /// CPU to pin the server thread to (Linux).
    #[arg(long)]
    cpu: Option<usize>,
}

fn main() {
    let args = Args::parse();
    if let Some(cpu) = args.cpu.filter(|_| args.calibrate_only) {
        pin(cpu);
    }
    let calibration = match args.iterations_per_us {
        Some(rate) if rate.is_finite() && rate > 0.0 => Calibration {
            iterations_per_us: rate,
        },
        Some(rate) => {
            eprintln!("spin: invalid iterations-per-us = {rate}: expected a positive rate");
            std::process::exit(2)
        }
        None => Calibration::measure(),
    };
    if args.calibrate_only {
        println!("iterations_per_us={}", calibration.iterations_per_us);
        return;
    }
    eprintln!(
        "spin: {:.1} iterations per microsecond; serving {} on {:?}",
        calibration.iterations_per_us, args.addr, args.runtime
    );
    match args.runtime {
        Mode::Linux => serve_linux(&args, calibration),
        Mode::Corral => serve_corral(&args, calibration),
    }
}

fn pin(cpu: usize) {
    if let Err(e) = corral_affinity::pin_current_thread(cpu) {
        eprintln!("spin: cannot pin to cpu {cpu}: {e}");
        std::process::exit(2)
    }
}

fn serve_linux(args: &Args, calibration: Calibration) {
    if let Some(cpu) = args.cpu {
        pin(cpu);
    }
    let socket = std::net::UdpSocket::bind(args.addr).unwrap_or_else(|e| {
        eprintln!("spin: cannot bind {}: {e}", args.addr);
        std::process::exit(1)
    });
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let received_ns = corral::now_ns();
        if serve(&calibration, &mut buf[..n], received_ns) {
            let _ = socket.send_to(&buf[..n], from);
        }
    }
}

fn serve_corral(args: &Args, calibration: Calibration) {
    let ip: Ipv4Addr = *args.addr.ip();
    let mut config = corral::Config::from_env()
        .kthreads(args.kthreads)
        .net(corral::net::NetConfig::new(ip, args.prefix));
    if let Some(us) = args.spin_before_park_us {
        config = config.spin_before_park(std::time::Duration::from_micros(us));
    }
    if let Some(socket) = &args.iokerneld {
        config = config.iokernel(corral::IokernelSettings::new(socket, "spin"));
    }
    if let corral::Mode::Iokernel(settings) = &config.mode {
        // The runtime refuses fewer guaranteed cores than spinning kthreads.
        let settings = settings
            .clone()
            .guaranteed_cores(args.guaranteed.unwrap_or(args.spinning))
            .spinning_kthreads(args.spinning);
        config = config.iokernel(settings);
    }
    let rt = corral::Runtime::new(config).unwrap_or_else(|e| {
        eprintln!("spin: cannot start the runtime: {e}");
        std::process::exit(1)
    });
    let addr = args.addr;
    rt.block_on(move || {
        let _server = corral::net::UdpSpawner::bind(addr, move |mut request, _from, reply| {
            if serve(&calibration, &mut request, reply.received_ns()) {
                let _ = reply.send(&request);
            }
        })
        .unwrap_or_else(|e| {
            eprintln!("spin: cannot bind {addr}: {e}");
            std::process::exit(1)
        });
        loop {
            corral::sleep(std::time::Duration::from_secs(3600));
        }
    });
}
