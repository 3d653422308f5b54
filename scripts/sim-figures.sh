#!/usr/bin/env bash
# Every figure of the many-core comparison in one command: the paper's Figure 1 extended (the
# 1 ms allocator's efficiency bound, Corral simulated to 16 cores, and Corral measured on this
# machine at one managed core, shielded: scripts/figure1.sh) and the three policies side by side
# at 16 and 64 simulated cores in the shapes of the paper's Figures 3 and 5
# (`corral-sim compare`). Needs root (the measured point shields CPU 0); about 3 minutes after
# the build.
#
#   bash scripts/sim-figures.sh [--out DIR]
#
# Writes DIR/figure1/ (figure1.png, figure1.svg, figure1.csv, figure1-measured.csv,
# measured.csv, measured.json) and DIR/compare/ (compare.png, burst.png, their SVGs, compare.csv,
# burst.csv, compare.json); DIR defaults to sim-figures.
set -euo pipefail
cd "$(dirname "$0")/.."

out=sim-figures
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim-figures.sh: unknown option $1 (--out DIR)" >&2; exit 2 ;;
  esac
done

bash scripts/figure1.sh --out "$out/figure1" --shield on --max-cores 16
bin="${CARGO_TARGET_DIR:-target}/release"
"$bin/corral-sim" compare --out "$out/compare"
