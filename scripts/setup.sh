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
# The XDP tests turn off the checksum offload of the veth end Linux sends from, so that frames
# reach AF_XDP with their checksums filled in, as frames from a wire always are.
command -v ethtool >/dev/null || need+=(ethtool)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# Real Linux peers the end-to-end tests talk to, and unmodified programs run under corral-run.
command -v socat >/dev/null || need+=(socat)
command -v nc.openbsd >/dev/null || need+=(netcat-openbsd)
/usr/bin/python3 -c 'import scapy' 2>/dev/null || need+=(python3-scapy)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v sockperf >/dev/null || need+=(sockperf)
command -v wrk >/dev/null || need+=(wrk)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
command -v pigz >/dev/null || need+=(pigz)
command -v 7z >/dev/null || need+=(p7zip-full)
command -v lbzip2 >/dev/null || need+=(lbzip2)
command -v pbzip2 >/dev/null || need+=(pbzip2)
command -v javac >/dev/null || need+=(default-jdk-headless)
command -v node >/dev/null || need+=(nodejs)
command -v memcached >/dev/null || need+=(memcached)
command -v memccapable >/dev/null || need+=(libmemcached-tools)
/usr/bin/python3 -c 'import pymemcache' 2>/dev/null || need+=(python3-pymemcache)
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || need+=(python3-prometheus-client)
# Authoritative DNS servers the DNS server is compared against, its clients and load generator.
command -v nsd >/dev/null || [ -x /usr/sbin/nsd ] || need+=(nsd)
[ -x /usr/sbin/knotd ] || need+=(knot)
command -v kdig >/dev/null || need+=(knot-dnsutils)
command -v dig >/dev/null || need+=(bind9-dnsutils)
command -v dnsperf >/dev/null || need+=(dnsperf)
[ -x /usr/sbin/gdnsd ] || need+=(gdnsd)
/usr/bin/python3 -c 'import dns' 2>/dev/null || need+=(python3-dnspython)
# A stalled process's stacks, which some tests print when they fail.
command -v gdb >/dev/null || need+=(gdb)

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
