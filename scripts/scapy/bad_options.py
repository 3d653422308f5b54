"""Malformed TCP options (RFC 9293 §3.1, MUST-7: an illegal option length must not be
trusted): a SYN whose option list claims more bytes than the header holds, and one with a
zero-length option, on the echo port; then a data segment with a zero-length option on an
established connection. Reports what came back; the connection must still echo afterwards.

usage: bad_options.py IFACE FAKE_IP FAKE_MAC TARGET_IP TARGET_MAC ECHO_PORT
"""
import random
import sys

from scapy.all import IP, TCP, Ether, Raw

from tcpkit import fail, kit_from_args, report


def answer_kind(t):
    if t is None:
        return "nothing"
    if t.flags & 0x04:
        return "rst"
    if t.flags & 0x12 == 0x12:
        return "syn-ack"
    return "other"


def raw_segment(kit, sport, dport, flags, seq, ack, options, payload=b""):
    """A TCP header with `options` bytes exactly as given (scapy would fix them up)."""
    tcp = TCP(sport=sport, dport=dport, flags=flags, seq=seq % 2**32, ack=ack % 2**32,
              window=65535)
    tcp.dataofs = 5 + len(options) // 4
    frame = Ether(src=kit.fake_mac, dst=kit.target_mac) / IP(src=kit.fake_ip, dst=kit.target_ip) \
        / tcp / Raw(options + payload)
    # Built once to bytes (checksum included): parsing them back would let scapy rewrite the
    # malformed options.
    kit.send_raw(bytes(frame))


kit, (port,) = kit_from_args(sys.argv)
port = int(port)
answers = {}
# MSS option (kind 2) claiming 40 bytes in an 8-byte option area.
for name, options in [("overrun", b"\x02\x28\x05\xb4\x01\x01\x01\x01"),
                      ("zero_length", b"\x08\x00\x00\x00\x01\x01\x01\x01")]:
    sport = random.randint(20000, 60000)
    raw_segment(kit, sport, port, "S", random.randint(0, 2**31), 0, options)
    t = kit.recv(sport, 1.5)
    answers[name] = answer_kind(t)
    if t is not None and t.flags & 0x12 == 0x12:
        kit.send(sport, port, "R", t.ack)
    kit.drain(sport)
conn = kit.handshake(port)
raw_segment(kit, conn.sport, conn.dport, "PA", conn.snd_nxt, conn.rcv_nxt,
            b"\x08\x00\x00\x00\x01\x01\x01\x01", b"junk")
bad_data = kit.drain(conn.sport, 1.0)
if any(len(bytes(t.payload)) for t in bad_data):
    answers["established"] = "echoed"
else:
    answers["established"] = "ignored"
    conn.send_data(b"ok")
    echoed = conn.read(2)
    if echoed != b"ok":
        fail("the connection did not survive malformed options: %r" % echoed)
conn.reset()
report(**answers)
kit.close()
