#!/usr/bin/env bash
# corral-sim against the real system at one managed core, in one sitting: the allocation costs
# (corral-bench-iokernel), the spin server's packet path (alone on a spinning core, iokerneld's
# generator asking no work), the demo's Corral system over the loads, and corral-sim on the same
# workload with those costs; prints p50 and batch share side by side. About 3 minutes; needs
# root. Options pass through to scripts/sim_validate.py (`--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -p corral-iokerneld -p corral-app-spin -p corral-app-batch -p corral-demo \
  -p corral-sim -p corral-bench-iokernel
exec python3 scripts/sim_validate.py "$@"
