"""A receiver that keeps its window at zero forever (RFC 9293 §3.8.6.1): the sender must keep
probing and keep the connection, however long; when the window opens, the data flows.

usage: zero_window.py IFACE FAKE_IP FAKE_MAC TARGET_IP TARGET_MAC SOURCE_PORT PROBES
"""
import sys

from tcpkit import fail, kit_from_args, report

kit, (port, probes) = kit_from_args(sys.argv)
probes = int(probes)
# The source service sends at once; our window is zero from the handshake on.
conn = kit.handshake(int(port), window=0)
seen = 0
while seen < probes:
    t = kit.recv(conn.sport, 30)
    if t is None:
        fail("no probe after %d (the sender gave up or stalled)" % seen)
    if t.flags & 0x04:
        fail("the sender reset a connection held at a zero window after %d probes" % seen)
    if len(bytes(t.payload)) > 1:
        fail("sent %d bytes into a zero window" % len(bytes(t.payload)))
    seen += 1
    # Answer each probe: everything so far received, window still zero.
    conn.ack(window=0)
# Open the window: data must come.
conn.ack(window=65535)
data = conn.read(1000, timeout=10)
if len(data) < 1000:
    fail("only %d bytes after the window opened" % len(data))
conn.reset()
report(probes=seen, bytes_after_open=len(data))
kit.close()
