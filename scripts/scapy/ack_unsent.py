"""RFC 9293 §3.10.7.4 and RFC 5961 §5.2: a segment acknowledging data never sent is dropped
and answered with an ACK; its payload is not delivered. The connection then still echoes.

usage: ack_unsent.py IFACE FAKE_IP FAKE_MAC TARGET_IP TARGET_MAC ECHO_PORT
"""
import sys

from tcpkit import fail, kit_from_args, report

kit, (port,) = kit_from_args(sys.argv)
conn = kit.handshake(int(port))
# Data whose ACK field is 100,000 bytes past anything the server sent.
kit.send(conn.sport, conn.dport, "PA", conn.snd_nxt, conn.rcv_nxt + 100000, b"bogus")
answer = kit.recv(conn.sport, 5)
if answer is None:
    fail("no ACK for an ACK of unsent data")
if answer.flags & 0x04:
    fail("reset the connection for an ACK of unsent data")
if answer.ack != conn.snd_nxt % 2**32:
    fail("took the payload of a segment acking unsent data (ack %d, expected %d)"
         % (answer.ack, conn.snd_nxt % 2**32))
if len(bytes(answer.payload)) > 0:
    fail("echoed the payload of a segment acking unsent data")
stray = kit.drain(conn.sport)
if any(len(bytes(t.payload)) for t in stray):
    fail("echoed the payload of a segment acking unsent data")
conn.send_data(b"fine")
echoed = conn.read(4)
if echoed != b"fine":
    fail("the connection did not survive: echoed %r" % echoed)
conn.reset()
report(answer_ack=answer.ack, answer_seq=answer.seq, echoed=echoed.decode())
kit.close()
