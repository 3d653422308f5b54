#!/usr/bin/env bash
# The demo: a latency-critical UDP spin server and a batch job sharing one core, under Corral
# (iokerneld moving the core between them every 5 us) and under Linux (batch at SCHED_IDLE),
# measured side by side on this machine: tail latency against the zero-overhead bound, batch
# throughput, and the targets met or missed. About 5 minutes; needs root. Options pass through
# to corral-demo (`bash scripts/demo.sh --help`); `--batch-cmd "COMMAND"` makes any program the
# batch job (under corral-run for Corral), measured by the CPU time it receives.
# `--experiment kv` runs the memcached co-location experiment instead: corral-kv and the batch
# job on Corral against Debian's memcached 1.6.18 and the batch job at SCHED_IDLE on Linux, and
# corral-kv alone on a dedicated core, at rising request rates to each one's saturation.
# `--experiment dns` runs the same procedure with DNS over UDP: corral-dns and the batch job on
# Corral against Debian's gdnsd (or `--dns-server nsd|knot`) and the batch job at SCHED_IDLE,
# and corral-dns alone on a dedicated core, every system asked the same query file.
# `--nic xdp` drives both systems from corral-loadgen-linux in a network namespace over a veth
# pair instead: iokerneld takes its end of the pair with its AF_XDP backend, Linux's spin server
# listens on it (on a 2-CPU machine the client shares iokerneld's CPU, unshielded).
# Every system is shielded the same way (iokerneld's core, the Linux load generator's CPU);
# `--no-shield` runs them all unshielded. target/release/corral-gapmeter, built here too,
# measures what a busy loop on iokerneld's core loses, unshielded and shielded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
# Cargo's own progress lines show from the first second: a first build takes a minute or two.
echo "demo: building iokerneld, the spin, key-value and DNS servers, the batch job, corral-run, the demo and the gap meter (release)"
cargo build --release -p corral-iokerneld -p corral-app-spin -p corral-app-kv -p corral-app-dns -p corral-app-batch \
  -p corral-loadgen -p corral-run -p corral-demo -p corral-gapmeter
echo "demo: built; starting"
exec target/release/corral-demo "$@"
