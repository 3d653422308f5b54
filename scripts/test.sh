#!/usr/bin/env bash
# Runs every test of Corral from a fresh checkout: formatting, lints, loom model checks, a
# smoke run of the benchmarks, and the workspace's unit, integration and C/C++ tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== loom model checks"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
  cargo test --quiet --release -p corral -p corral-abi -p corral-handoff -p corral-xdp --test loom

echo "== benchmark smoke runs (numbers from runs this small mean nothing)"
cargo run --quiet --profile ci -p corral-bench-threading -- --scale 0.005 --reps 2 >/dev/null
cargo bench --quiet --profile ci -p corral-policy --bench alloc_pass >/dev/null
cargo bench --quiet --profile ci -p corral-wire >/dev/null
cargo build --quiet --profile ci -p corral-iokerneld --bin iokerneld
cargo run --quiet --profile ci -p corral-bench-iokernel -- --reps 1 --samples 50 --seconds 0.2 >/dev/null
cargo run --quiet --profile ci -p corral-bench-xdp-floor -- --seconds 0.2 --warmup 0.1 --runs 1 >/dev/null

echo "== workspace tests"
# The C and C++ test programs link this static library (see crates/capi/Cargo.toml).
cargo build --quiet --profile ci -p corral-capi --example corral_capi_testlib
# iokerneld's tests start ABI-level clients: a binary of another package, which `cargo test`
# does not build as a program.
cargo build --quiet --profile ci -p corral-testclient --bin corral-abi-client
# The demo's batch-command test runs corral-run, which needs its shim next to it, where only
# `cargo build` puts the cdylib.
cargo build --quiet --profile ci -p corral-run
# Only the shielding tests (which ask for it by flag) and the demo's (likewise) shield a CPU:
# every other test starts iokerneld beside others, and must not move the machine's threads.
export IOKERNELD_SHIELD=off
# --no-fail-fast: a failing target must not hide the targets after it; the status is kept and
# returned after the closing line, which counts every target that ran.
status=0
cargo test --profile ci --no-fail-fast --workspace --lib --bins --tests --examples 2>&1 |
  tee target/test-output.txt || status=$?

# One closing line for the whole suite.
# A target that crashed prints no result line; each failed target without a failed test in its
# result line counts as one failure, so a crash can never make the line read clean.
awk '/^test result:/ { p += $4; f += $6; if ($6 > 0) withfailures++ }
     /^error: test failed, to rerun pass/ { failedtargets++ }
     END { crashed = failedtargets - withfailures; if (crashed > 0) f += crashed
           printf "suite: %d passed, %d failed\n", p, f }' target/test-output.txt
exit "$status"
