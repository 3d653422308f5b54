#!/usr/bin/env bash
# Installs what building and testing Corral needs on a Debian machine (run as root or with
# sudo available). Safe to run again: it only installs what is missing.
set -euo pipefail

need=()
command -v gcc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v go >/dev/null || need+=(golang-go)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
[ -e /usr/include/linux/futex.h ] || need+=(linux-libc-dev)
command -v ping >/dev/null || need+=(iputils-ping)
command -v ip >/dev/null || need+=(iproute2)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
for t in xz:xz-utils zstd:zstd pigz:pigz; do command -v "${t%%:*}" >/dev/null || need+=("${t#*:}"); done  # corral-run's tests

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "setup: installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none ||
      { echo "setup: cannot install Rust; install rustup (https://rustup.rs) and retry" >&2; exit 1; }
  }
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# rust-toolchain.toml pins the version; this fetches it (and rustfmt/clippy) if it is missing.
cargo --version >/dev/null
