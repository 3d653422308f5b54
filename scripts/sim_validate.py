#!/usr/bin/env python3
"""corral-sim against the real system at one managed core, every input measured in one sitting.

1. The allocation costs: `corral-bench-iokernel --json` (wake, signal and cooperative
   preemption, park, hand-over).
2. The packet path's costs, which the allocation benchmark does not see: the demo's spin
   server alone on a spinning guaranteed core, under iokerneld's generator, asked for no work
   (`--service const:0us`).
   - Its median round trip at a low rate is the whole path: generator to ingress ring, the
     runtime's receive, a uthread, the reply, and back.
   - Its capacity (the most replies a second at any of several overload rates) gives the core
     time per request: 1 / capacity, less the uthread dispatch the simulator already charges.
   The simulator then charges net_core = 1 / capacity - dispatch on the server's core, and
   net_latency = round trip - 1 / capacity as time off every core.
3. The demo's Corral system (spin server exp 10 us, Monte Carlo batch job, one core), over the
   loads.
4. corral-sim on the same workload with those costs (the batch job cedes cooperatively, as the
   demo's does).

Prints the demo's and the simulator's p50 and batch share side by side with their ratios, and
writes everything under --out. Needs root (the demo and iokerneld shield CPUs).

    python3 scripts/sim_validate.py [--out DIR] [--loads 0.1,0.2,...] [--bin DIR]
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def gen(bin_dir, sock, target, rate, secs, out):
    run(
        [
            f"{bin_dir}/iokerneld", "gen", "--socket", sock, "--target", target,
            "--rate", str(rate), "--duration", str(secs), "--service", "const:0us",
            "--json", out,
        ],
        stdout=subprocess.DEVNULL,
    )
    with open(out) as f:
        return json.load(f)["summary"]


def wait_for(path, what, proc, timeout=10.0):
    start = time.monotonic()
    while not os.path.exists(path):
        if proc.poll() is not None:
            sys.exit(f"sim_validate: {what} exited with {proc.returncode} before it was ready")
        if time.monotonic() - start > timeout:
            sys.exit(f"sim_validate: {what} not ready after {timeout} s")
        time.sleep(0.05)


def packet_path(args, out):
    """The spin server alone, spinning: the round trip at a low rate and the capacity."""
    d = os.path.join(out, "net")
    os.makedirs(d, exist_ok=True)
    sock = os.path.join(d, "iokerneld.sock")
    target = args.addr
    with open(os.path.join(d, "iokerneld.log"), "w") as io_log, open(
        os.path.join(d, "spin.log"), "w"
    ) as spin_log:
        io = subprocess.Popen(
            [
                f"{args.bin}/iokerneld", "--core", str(args.iokernel_cpu),
                "--managed-cores", str(args.app_cpu), "--socket", sock, "--nic", "gen",
                "--log-level", "warn",
            ],
            stdin=subprocess.DEVNULL, stdout=io_log, stderr=subprocess.STDOUT,
        )
        spin = None
        try:
            wait_for(sock, "iokerneld", io)
            spin = subprocess.Popen(
                [
                    f"{args.bin}/spin", "--runtime", "corral", "--iokerneld", sock,
                    "--addr", target, "--kthreads", "1", "--guaranteed", "1",
                    "--spinning", "1",
                ],
                stdin=subprocess.DEVNULL, stdout=spin_log, stderr=subprocess.STDOUT,
            )
            time.sleep(2.0)
            if spin.poll() is not None:
                sys.exit(f"sim_validate: spin exited with {spin.returncode}; see {d}/spin.log")
            gen(args.bin, sock, target, 1000, 1, os.path.join(d, "warmup.json"))
            floors = []
            for rep in range(args.reps):
                s = gen(args.bin, sock, target, args.floor_rate, args.floor_secs,
                        os.path.join(d, f"floor-{rep}.json"))
                if s["lost"]:
                    sys.exit(f"sim_validate: {s['lost']} requests lost at {args.floor_rate}/s")
                floors.append(s["latency"]["p50_ns"])
            capacities = []
            for rate in args.overload_rates:
                s = gen(args.bin, sock, target, rate, args.overload_secs,
                        os.path.join(d, f"overload-{rate}.json"))
                capacities.append(s["achieved_rps"])
        finally:
            for p in (spin, io):
                if p is not None and p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
    floor_ns = statistics.median(floors)
    capacity = max(capacities)
    return {
        "floor_p50_ns": floors,
        "floor_ns": floor_ns,
        "overload_rates": args.overload_rates,
        "achieved_rps": capacities,
        "capacity_rps": capacity,
        "per_request_ns": 1e9 / capacity,
    }


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=time.strftime("sim-validate-%Y%m%d-%H%M%S"))
    p.add_argument("--bin", default="target/release")
    p.add_argument("--loads", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7")
    p.add_argument("--iokernel-cpu", type=int, default=0)
    p.add_argument("--app-cpu", type=int, default=1)
    p.add_argument("--addr", default="10.99.0.2:5000")
    p.add_argument("--reps", type=int, default=3, help="low-rate round-trip repetitions")
    p.add_argument("--floor-rate", type=int, default=5000)
    p.add_argument("--floor-secs", type=float, default=3)
    p.add_argument("--overload-rates", default="200000,400000,800000")
    p.add_argument("--overload-secs", type=float, default=1)
    p.add_argument("--sim-seconds", default="2")
    args = p.parse_args()
    try:
        loads = [float(x) for x in args.loads.split(",")]
        args.overload_rates = [int(x) for x in args.overload_rates.split(",")]
    except ValueError as e:
        p.error(f"--loads and --overload-rates take comma-separated numbers: {e}")
    if not loads or any(not 0 < x < 1 for x in loads):
        p.error("--loads must be fractions between 0 and 1")
    if os.geteuid() != 0:
        sys.exit("sim_validate: needs root (the demo and iokerneld shield CPUs)")
    out = args.out
    os.makedirs(out, exist_ok=True)

    bench = os.path.join(out, "bench.txt")
    with open(bench, "w") as f:
        run([f"{args.bin}/corral-bench-iokernel", "--json",
             "--iokernel-cpu", str(args.iokernel_cpu), "--app-cpu", str(args.app_cpu)],
            stdout=f)

    net = packet_path(args, out)
    # The simulator's dispatch cost (a uthread per request) is part of the measured per-request
    # core time; the rest is the packet work.
    costs_json = os.path.join(out, "costs.json")
    run([f"{args.bin}/corral-sim", "--cores", "1", "--loads", "0.1", "--seconds", "0.001",
         "--costs", bench, "--json", costs_json], stdout=subprocess.DEVNULL)
    with open(costs_json) as f:
        dispatch_ns = json.load(f)["costs"]["dispatch"]["ns"]
    net_core = max(0, round(net["per_request_ns"] - dispatch_ns))
    net_latency = max(0, round(net["floor_ns"] - net["per_request_ns"]))
    net.update({"dispatch_ns": dispatch_ns, "net_core_ns": net_core, "net_latency_ns": net_latency})
    with open(os.path.join(out, "net.json"), "w") as f:
        json.dump(net, f, indent=2)
    print(
        f"packet path: round trip p50 {net['floor_ns'] / 1e3:.1f} us at {args.floor_rate}/s "
        f"(median of {args.reps}), capacity {net['capacity_rps']:.0f}/s "
        f"({net['per_request_ns']:.0f} ns a request): net_core {net_core} ns, "
        f"net_latency {net_latency} ns",
        flush=True,
    )

    demo_dir = os.path.join(out, "demo")
    run([f"{args.bin}/corral-demo", "--systems", "corral", "--loads", args.loads,
         "--out", demo_dir, "--iokernel-cpu", str(args.iokernel_cpu),
         "--app-cpu", str(args.app_cpu)])

    sim_csv = os.path.join(out, "sim.csv")
    run([f"{args.bin}/corral-sim", "--cores", "1", "--lc", "1", "--batch", "1",
         "--lc-guaranteed", "1", "--loads", args.loads, "--seconds", args.sim_seconds,
         "--cede", "cooperative", "--costs", bench,
         "--cost", f"net_core={net_core}", "--cost", f"net_latency={net_latency}",
         "--csv", sim_csv])

    demo = {round(float(r["load"]), 6): r for r in read_csv(os.path.join(demo_dir, "results.csv"))}
    sim = {round(float(r["load"]), 6): r for r in read_csv(sim_csv)}
    print("\n| load | demo p50 (us) | sim p50 | sim / demo | demo batch share | "
          "sim batch share | sim / demo |")
    print("|---|---|---|---|---|---|---|")
    for load in loads:
        d, s = demo.get(round(load, 6)), sim.get(round(load, 6))
        if d is None or s is None or not d.get("corral_p50_us"):
            print(f"| {load:.0%} | missing | | | | | |")
            continue
        dp50, sp50 = float(d["corral_p50_us"]), float(s["p50_ns"]) / 1e3
        db, sb = float(d["corral_batch_fraction"]), float(s["batch_share"])
        print(f"| {load:.0%} | {dp50:.1f} | {sp50:.1f} | {sp50 / dp50:.2f} | {db:.2f} | "
              f"{sb:.2f} | {sb / db:.2f} |")


if __name__ == "__main__":
    main()
