#!/usr/bin/env python3
"""How long work the kernel queues on every CPU waits for the shielded CPU.

Starts `iokerneld --nic none --shield on` (its loop busy at SCHED_FIFO on CPU 0) and times
`echo 1 > /proc/sys/vm/stat_refresh`, which runs a work item on each CPU's kworker and waits for
all of them. First with CPU 0's kernel workers as the shield leaves them (SCHED_FIFO above the
loop), then, in the same run, with them put back in the fair class by hand, as the shield left
them before it raised them. Prints the median and the longest wait of each. Needs root.

    python3 scripts/per_cpu_work.py [--samples N] [--iokerneld PATH]
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def refresh_ms(samples):
    waits = []
    for _ in range(samples):
        start = time.monotonic()
        with open("/proc/sys/vm/stat_refresh", "w") as f:
            f.write("1")
        waits.append((time.monotonic() - start) * 1e3)
        time.sleep(0.05)
    return waits


def cpu0_workers():
    """CPU 0's kworkers and ksoftirqd at SCHED_FIFO: (tid, name)."""
    out = subprocess.run(
        ["ps", "-eLo", "tid,psr,cls,comm", "--no-headers"],
        capture_output=True, text=True, check=True,
    ).stdout
    found = []
    for line in out.splitlines():
        tid, psr, cls, comm = line.split(None, 3)
        if psr == "0" and cls == "FF" and (comm.startswith("kworker/0:") or comm in ("ksoftirqd/0", "cpuhp/0")):
            found.append((int(tid), comm))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--iokerneld", default="target/release/iokerneld")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("per_cpu_work.py: needs root (iokerneld shields CPU 0)")
    with tempfile.TemporaryDirectory() as tmp:
        log = open(os.path.join(tmp, "iokerneld.log"), "w")
        daemon = subprocess.Popen(
            [args.iokerneld, "--core", "0", "--managed-cores", "1", "--nic", "none",
             "--shield", "on", "--socket", os.path.join(tmp, "s.sock")],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        try:
            time.sleep(1.0)
            if daemon.poll() is not None:
                sys.exit(f"iokerneld exited: {open(log.name).read()}")
            raised = cpu0_workers()
            above = refresh_ms(args.samples)
            for tid, _ in raised:
                subprocess.run(["chrt", "-o", "-p", "0", str(tid)], check=False)
            fair = refresh_ms(args.samples)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=10)
    print(f"CPU 0's workers raised by the shield: {', '.join(n for _, n in raised) or 'none'}")
    for name, waits in (("above the loop (SCHED_FIFO 50)", above), ("fair class, below the loop", fair)):
        print(f"{name:32} stat_refresh median {statistics.median(waits):8.2f} ms  "
              f"longest {max(waits):8.2f} ms  ({len(waits)} samples)")


if __name__ == "__main__":
    main()
