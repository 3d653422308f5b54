#!/usr/bin/env bash
# The demo: Corral's thread operations against Go and pinned pthreads, measured side by side
# on this machine (medians of 11 repetitions), with the ratios the project aims for.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
cargo build --quiet --release -p corral-bench-threading
exec target/release/corral-bench-threading --json target/bench-threading.json "$@"
