"""RFC 5961 §3: a RST outside the receive window is dropped silently, one in the window but
not at RCV.NXT draws a challenge ACK; neither closes the connection, which then still echoes.

usage: oow_rst.py IFACE FAKE_IP FAKE_MAC TARGET_IP TARGET_MAC ECHO_PORT
"""
import sys

from tcpkit import fail, kit_from_args, report

kit, (port,) = kit_from_args(sys.argv)
conn = kit.handshake(int(port))
# Far outside any window.
kit.send(conn.sport, conn.dport, "R", conn.snd_nxt + 2**30)
after_oow = kit.drain(conn.sport)
if after_oow:
    fail("answered an out-of-window RST: %r" % [t.summary() for t in after_oow])
# In the window, not exact: a challenge ACK (an ACK at the current point).
kit.send(conn.sport, conn.dport, "R", conn.snd_nxt + 100)
challenge = kit.recv(conn.sport, 5, lambda t: t.flags & 0x10 and not t.flags & 0x04)
if challenge is None or challenge.ack != conn.rcv_nxt % 2**32 and challenge.ack != conn.snd_nxt % 2**32:
    fail("no challenge ACK for an in-window RST")
kit.drain(conn.sport)
conn.send_data(b"still alive?")
echoed = conn.read(12)
if echoed != b"still alive?":
    fail("the connection did not survive: echoed %r" % echoed)
conn.reset()
report(out_of_window_answers=len(after_oow), challenge_ack=challenge.ack, echoed=echoed.decode())
kit.close()
