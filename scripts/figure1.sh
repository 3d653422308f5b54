#!/usr/bin/env bash
# The paper's Figure 1 with Corral's measured point: builds iokerneld, corral-bench-figure1 and
# corral-sim (release), measures Corral's CPU efficiency and latency at loads 0.1 .. 0.9 of one
# managed core (iokerneld on CPU 0 managing CPU 1, the bench's own iokerneld), then draws them
# beside the 1 ms allocator's bound and the simulated Corral with
# `corral-sim figure1 --measured`. Needs root; about a minute after the build.
#
#   bash scripts/figure1.sh [--out DIR] [--shield on|off] [--max-cores N]
#
# --out: where the bench's measured.csv and measured.json, and figure1.csv,
#   figure1-measured.csv, figure1.png and figure1.svg go (default: figure1).
# --shield: iokerneld's shield (default: off). The shielded measurement is the one to quote:
#   the demo runs shielded, and only a shielded iokerneld runs latency-critical kthreads at
#   SCHED_FIFO, so that nothing else on the managed CPU delays them.
# --max-cores: the highest load of the bound's and the simulator's sweep, in cores (default: 2,
#   so that the plot's scale shows the measured loads).
set -euo pipefail
cd "$(dirname "$0")/.."

out=figure1
shield=off
max_cores=2
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --shield) shield="${2:?--shield needs on or off}"; shift 2 ;;
    --max-cores) max_cores="${2:?--max-cores needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "figure1.sh: unknown option $1 (--out DIR, --shield on|off, --max-cores N)" >&2; exit 2 ;;
  esac
done
case "$shield" in
  on|off) ;;
  *) echo "figure1.sh: --shield $shield: expected on or off" >&2; exit 2 ;;
esac

bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
echo "figure1: building iokerneld, corral-bench-figure1 and corral-sim (release)"
cargo build --release -p corral-iokerneld -p corral-bench-figure1 -p corral-sim
bin="${CARGO_TARGET_DIR:-target}/release"

mkdir -p "$out"
"$bin/corral-bench-figure1" --iokernel-cpu 0 --app-cpus 1 --shield "$shield" \
  --csv "$out/measured.csv" --json "$out/measured.json"
"$bin/corral-sim" figure1 --max-cores "$max_cores" --measured "$out/measured.csv" --out "$out"
