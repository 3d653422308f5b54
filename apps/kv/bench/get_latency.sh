#!/usr/bin/env bash
# Get latency seen by a Linux memcached client (get_ping.py: memcached's text protocol over one
# TCP connection, closed loop, one get in flight, GAP_US of blocking sleep between gets, every
# reply checked byte for byte) against:
#   corral-spinning  corral-kv on Corral, one kthread spinning on a guaranteed core, through
#                    iokerneld's TAP device;
#   corral-parked    the same with no guarantee: the kthread parks between requests;
#   memcached        memcached 1.6.18, one thread, in a network namespace over a veth pair;
#   kv-linux         corral-kv on Linux sockets, the same way.
# Servers get CPU 1 (iokerneld runs on CPU 0); the client runs on CPU 0 at SCHED_FIFO priority 1
# in every run, standing in for a client on another machine. The client must block between
# requests: a client that spins at that priority (as corral-loadgen-linux's open-loop sender
# does) takes CPU 0 from iokerneld, and every Corral frame waits for iokerneld.
# Runs are interleaved, REPS of each. Needs root, memcached, python3, and
# `cargo build --release -p corral-iokerneld -p corral-app-kv`. Prints a table of medians
# over the repetitions (µs) and keeps the JSON in OUT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-target/release}
REPS=${REPS:-3}
REQUESTS=${REQUESTS:-20000}
GAP_US=${GAP_US:-200}
OUT=${OUT:-$(mktemp -d /tmp/kv-get-latency.XXXXXX)}
TAG=kvl$(( $$ % 10000 ))
NS=${TAG}ns
TAP=${TAG}t
VETH=${TAG}v
SOCK=$OUT/iokerneld.sock
CORRAL_IP=10.97.20.2
LINUX_IP=10.97.21.2
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip link del "${VETH}0" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$NS"
ip link add "${VETH}0" type veth peer name "${VETH}1"
ip link set "${VETH}1" netns "$NS"
ip addr add 10.97.21.1/24 dev "${VETH}0"
ip link set "${VETH}0" up
ip netns exec "$NS" ip addr add "$LINUX_IP/24" dev "${VETH}1"
ip netns exec "$NS" ip link set "${VETH}1" up
ip netns exec "$NS" ip link set lo up

wait_tcp() {
    for _ in $(seq 200); do
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on $1:$2" >&2
    exit 1
}

stop_all() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
}

start() {
    case $1 in
    corral-*)
        "$BIN/iokerneld" --core 0 --managed-cores 1 --log-level warn --tap-name "$TAP" \
            --host-ip 10.97.20.1/24 --socket "$SOCK" 2>>"$OUT/iokerneld.log" &
        PIDS+=($!)
        for _ in $(seq 200); do
            "$BIN/iokerneld" stats --socket "$SOCK" >/dev/null 2>&1 && break
            sleep 0.05
        done
        local cores=()
        [ "$1" = corral-spinning ] && cores=(--guaranteed 1 --spinning 1)
        "$BIN/corral-kv" --runtime corral -l "$CORRAL_IP" -p 11211 -t 1 --iokerneld "$SOCK" \
            "${cores[@]}" 2>>"$OUT/corral-kv.log" &
        PIDS+=($!)
        wait_tcp "$CORRAL_IP" 11211
        SERVER=$CORRAL_IP:11211
        ;;
    memcached)
        ip netns exec "$NS" taskset -c 1 memcached -u root -l "$LINUX_IP" -p 11211 -U 0 -t 1 &
        PIDS+=($!)
        wait_tcp "$LINUX_IP" 11211
        SERVER=$LINUX_IP:11211
        ;;
    kv-linux)
        ip netns exec "$NS" taskset -c 1 "$BIN/corral-kv" -l "$LINUX_IP" -p 11211 -t 1 &
        PIDS+=($!)
        wait_tcp "$LINUX_IP" 11211
        SERVER=$LINUX_IP:11211
        ;;
    esac
}

SERVERS=(corral-spinning corral-parked memcached kv-linux)
busiest() { ps -eo pid,ni,pcpu,psr,comm --sort=-pcpu | head -8; }
echo "load average before: $(cat /proc/loadavg)" | tee "$OUT/loadavg"
busiest | tee -a "$OUT/loadavg"
for rep in $(seq "$REPS"); do
    for s in "${SERVERS[@]}"; do
        start "$s"
        chrt -f 1 taskset -c 0 python3 apps/kv/bench/get_ping.py "${SERVER%:*}" "${SERVER#*:}" \
            "$REQUESTS" "$GAP_US" "$OUT/$s-$rep.json" 2>&1 | sed "s/^/$s #$rep: /"
        # How much of the run iokerneld spent without its CPU (loop iterations over 50 µs).
        case $s in corral-*) "$BIN/iokerneld" stats --socket "$SOCK" >"$OUT/$s-$rep.iokerneld.json" ;; esac
        stop_all
    done
done
echo "load average after: $(cat /proc/loadavg)" | tee -a "$OUT/loadavg"
busiest | tee -a "$OUT/loadavg"

python3 - "$OUT" "${SERVERS[@]}" <<'PY'
import glob, json, statistics, sys
out, servers = sys.argv[1], sys.argv[2:]
rows = {}
for s in servers:
    files = sorted(glob.glob(f"{out}/{s}-*.json"))
    runs = [json.load(open(f)) for f in files if not f.endswith(".iokerneld.json")]
    med = lambda k: statistics.median(r[k] for r in runs)
    rows[s] = (med("p50_us"), med("p99_us"), med("p999_us"), len(runs), sum(r["wrong"] for r in runs))
    for f in sorted(glob.glob(f"{out}/{s}-*.iokerneld.json")):
        stats = json.load(open(f))
        g = stats["global"]
        rt = stats["runtimes"][0]
        drops = {k: v for k, v in rt["net"]["drops"].items() if v}
        tcp = {k: v for k, v in rt["reported"].items() if k.startswith("tcp.") and "retrans" in k and v}
        print(f"{f.rsplit('/', 1)[1]}: iokerneld lost its CPU {g['loop_stalls']} times, "
              f"{g['loop_stall_ns'] / 1e6:.0f} ms in {g['uptime_s']:.1f} s; "
              f"runtime drops {drops}; {tcp}")
print(f"medians over repetitions, µs; results in {out}")
print("| server | p50 | p99 | p99.9 | runs | wrong replies |")
print("|---|---|---|---|---|---|")
for s, (p50, p99, p999, n, wrong) in rows.items():
    print(f"| {s} | {p50:.1f} | {p99:.1f} | {p999:.1f} | {n} | {wrong} |")
m = rows.get("memcached")
if m:
    for s in servers:
        if s != "memcached":
            r = rows[s]
            print(f"{s} / memcached: p50 {r[0] / m[0]:.2f}x  p99 {r[1] / m[1]:.2f}x  p99.9 {r[2] / m[2]:.2f}x")
PY
