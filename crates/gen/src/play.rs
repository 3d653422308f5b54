//! `iokerneld gen`, the client side of a run: sends the spec to a running daemon, waits for
//! the run to end, and prints its results.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use corral_abi::control::{Reply, Request};
use corral_iokernel::control;
use corral_loadgen::recorder::human_ns;

use crate::args::GenArgs;
use crate::run::{GenResult, Protocol};

/// The slowest preload waited for: a target that sets keys slower than this (or stops
/// answering, which fails the run in the daemon) may outlast the wait.
const PRELOAD_SETS_PER_S_AT_LEAST: f64 = 10_000.0;

/// `iokerneld gen`: asks the daemon for a run, waits for its end, and prints the results.
pub fn play(args: &GenArgs, socket: Result<PathBuf, ExitCode>) -> ExitCode {
    let spec = match args.spec() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("iokerneld gen: {e}");
            return ExitCode::from(2);
        }
    };
    let socket = match socket {
        Ok(path) => path,
        Err(code) => return code,
    };
    // The reply comes when the run has ended: after its phases and grace period, plus the
    // start delay and the time the daemon takes to set it up and report it.
    let run_s = spec.duration_ns() as f64 / 1e9 + spec.grace_ms / 1e3;
    let preload_s = if spec.protocol == Protocol::MemcacheTcp && spec.preload {
        spec.kv.keys as f64 / PRELOAD_SETS_PER_S_AT_LEAST
    } else {
        0.0
    };
    let timeout = Duration::from_secs_f64(run_s + preload_s + 30.0);
    let what = spec.workload();
    eprintln!(
        "iokerneld gen: {} phase(s) over {:.3} s against {} ({what})",
        spec.phases.len(),
        spec.duration_ns() as f64 / 1e9,
        spec.target,
    );
    let request = Request::Gen {
        json: spec.to_json(),
    };
    let reply = control::connect(&socket).and_then(|conn| {
        control::request_on(
            std::os::fd::AsFd::as_fd(&conn),
            &request.encode(),
            &[],
            timeout,
        )
    });
    let json = match reply {
        Ok(Reply::Gen { json }) => json,
        Ok(Reply::Error { message }) => {
            eprintln!("iokerneld gen: refused: {message}");
            return ExitCode::FAILURE;
        }
        Ok(other) => {
            eprintln!("iokerneld gen: unexpected reply {other:?}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("iokerneld gen: {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    let result: GenResult = match serde_json::from_str(&json) {
        Ok(result) => result,
        Err(e) => {
            eprintln!("iokerneld gen: the daemon sent results that do not parse ({e}): {json}");
            return ExitCode::FAILURE;
        }
    };
    let s = &result.summary;
    eprintln!(
        "iokerneld gen: {} requests scheduled, {} sent, {} matched, {} lost",
        s.scheduled, s.sent, s.matched, s.lost
    );
    eprintln!("  {s}");
    if !result.windows.is_empty() {
        let worst = result
            .windows
            .iter()
            .map(|w| w.latency.p99_ns)
            .max()
            .unwrap_or(0);
        eprintln!(
            "  {} windows of {} ms; worst window p99 {}",
            result.windows.len(),
            spec.window_ms.unwrap_or(0.0),
            human_ns(worst)
        );
    }
    if let Some(kv) = &result.kv {
        let c = &kv.connections;
        eprintln!(
            "  memcached: {} keys preloaded in {:.3} s; {} errors",
            kv.checks.preloaded, kv.preload_s, kv.errors
        );
        eprintln!("  memcached: {}", kv.checks);
        eprintln!(
            "  connections: {} opened ({} again), {} established, {} reset, {} refused, {} \
             timed out, {} closed by the server; {} requests lost with them, {} refused; \
             retransmissions: {} timeout, {} fast, {} SYN",
            c.connects,
            c.reconnects,
            c.established,
            c.resets,
            c.refused,
            c.timed_out,
            c.closed_by_peer,
            c.lost_requests,
            c.refused_requests,
            kv.rto_retransmits,
            kv.fast_retransmits,
            kv.syn_retransmits
        );
    }
    if let Some(dns) = &result.dns {
        eprintln!("  dns: {dns}");
    }
    let d = &result.daemon;
    eprintln!(
        "  daemon: {} wakes, {} preemptions, {} reallocations ({:.1}/s), {} parks",
        d.wakes, d.preemptions, d.reallocations, d.reallocations_per_s, d.parks
    );
    let c = &result.gen_cost;
    eprintln!(
        "  gen cost: {:.1} ns per request, median {:.1} (building {:.1} ns per request, parsing \
         {:.1} ns per response); the generator took {:.0}% of the daemon's core",
        c.ns_per_request,
        c.ns_per_request_p50,
        c.build_ns_per_request,
        c.parse_ns_per_response,
        c.busy_fraction * 100.0
    );
    let pretty = serde_json::to_string_pretty(&result).unwrap_or(json);
    match &args.json {
        Some(path) => {
            if let Err(e) = std::fs::write(path, pretty + "\n") {
                eprintln!("iokerneld gen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        None => println!("{pretty}"),
    }
    ExitCode::SUCCESS
}
