#!/usr/bin/env python3
"""Times two commands run alternately (A B A B ...) as whole processes, after one warm-up run
of each, and prints each one's median wall time and the throughput ratio B/A pair by pair
(above 1: A is faster). For corral-run rows: A is the program under corral-run, B the plain
program; the ratio is then "plain time / corral-run time".

    python3 scripts/alternate.py -n 8 --a "target/ci/corral-run -- lbzip2 -n2 -c big.txt" \
        --b "lbzip2 -n2 -c big.txt"

Output goes to /dev/null; a command that fails stops the run."""

import argparse
import shlex
import statistics
import subprocess
import sys
import time


def timed(argv):
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="counted pairs (default 5)")
    parser.add_argument("--a", required=True, help="command A, split as a shell splits words")
    parser.add_argument("--b", required=True, help="command B")
    args = parser.parse_args()
    a, b = shlex.split(args.a), shlex.split(args.b)
    timed(a)
    timed(b)
    pairs = []
    for _ in range(args.n):
        pairs.append((timed(a), timed(b)))
    a_times = [p[0] for p in pairs]
    b_times = [p[1] for p in pairs]
    ratios = [tb / ta for ta, tb in pairs]
    print(f"A: {args.a}")
    print(f"B: {args.b}")
    print(f"pairs: {args.n}")
    print(f"A wall s: median {statistics.median(a_times):.3f} (min {min(a_times):.3f}, max {max(a_times):.3f})")
    print(f"B wall s: median {statistics.median(b_times):.3f} (min {min(b_times):.3f}, max {max(b_times):.3f})")
    print(f"B/A per pair: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
