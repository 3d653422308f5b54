"""Closed-loop get latency: one memcached text-protocol connection, one request in flight,
a pause between requests. Usage: get_ping.py HOST PORT REQUESTS GAP_US JSON_OUT.

Sets one 200-byte value, then times REQUESTS gets of it (after 1,000 of warm-up) from the send
to the last byte of the reply, checking every reply byte for byte. Between requests it sleeps
GAP_US, blocking, so that it leaves its CPU to whatever else runs there."""
import json
import socket
import sys
import time

host, port, requests, gap_us, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
value = b"".join(b"v%03d" % i for i in range(50))  # 200 bytes
s = socket.create_connection((host, port), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def exchange(request, reply_end):
    s.sendall(request)
    got = b""
    while not got.endswith(reply_end):
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("the server closed the connection")
        got += chunk
    return got


assert exchange(b"set ping 0 0 200\r\n" + value + b"\r\n", b"\r\n") == b"STORED\r\n"
want = b"VALUE ping 0 200\r\n" + value + b"\r\nEND\r\n"
request = b"get ping\r\n"
gap = gap_us / 1e6
latencies = []
wrong = 0
for i in range(1000 + requests):
    t0 = time.perf_counter_ns()
    got = exchange(request, b"END\r\n")
    t1 = time.perf_counter_ns()
    if got != want:
        wrong += 1
    elif i >= 1000:
        latencies.append(t1 - t0)
    time.sleep(gap)
latencies.sort()


def pct(p):
    return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] / 1e3


result = {"requests": requests, "gap_us": gap_us, "samples": len(latencies), "wrong": wrong,
          "p50_us": pct(50), "p99_us": pct(99), "p999_us": pct(99.9), "max_us": latencies[-1] / 1e3}
json.dump(result, open(out, "w"))
print(f"p50 {result['p50_us']:.1f} us  p99 {result['p99_us']:.1f} us  p99.9 {result['p999_us']:.1f} us"
      f"  max {result['max_us']:.1f} us  samples {len(latencies)}  wrong {wrong}")
