"""A hand-driven TCP client for hostile-input tests, on scapy.

It speaks from an address the host kernel does not own (FAKE_IP with FAKE_MAC), injecting
Ethernet frames on an interface whose far side is the stack under test (iokerneld's TAP
device, or a veth into a Linux network namespace). Replies are addressed to FAKE_MAC, which
the host kernel drops as "other host" without answering, so nothing resets the connections
this script holds and no firewall rule is needed. The target learns FAKE_MAC from an ARP
request the kit sends first, and the kit answers the target's own ARP requests.
"""

import json
import queue
import random
import sys
import threading
import time

from scapy.all import ARP, IP, TCP, AsyncSniffer, Ether, Raw, conf, sendp

conf.verb = 0


class Kit:
    def __init__(self, iface, fake_ip, fake_mac, target_ip, target_mac):
        self.iface, self.fake_ip, self.fake_mac = iface, fake_ip, fake_mac
        self.target_ip, self.target_mac = target_ip, target_mac
        self.inbox = queue.Queue()
        self.sock = conf.L2socket(iface=iface)
        # Nothing is sent before the sniffer's socket is open, or the answers could be missed:
        # a fixed pause would be too short on a slow machine.
        listening = threading.Event()
        self.sniffer = AsyncSniffer(iface=iface, store=False, prn=self._seen,
                                    started_callback=listening.set)
        self.sniffer.start()
        if not listening.wait(60):
            fail("the sniffer on %s did not start within 60 s" % iface)
        self.send_raw(Ether(src=fake_mac, dst="ff:ff:ff:ff:ff:ff")
                      / ARP(op=1, hwsrc=fake_mac, psrc=fake_ip, pdst=target_ip))
        time.sleep(0.2)

    def _seen(self, pkt):
        if ARP in pkt and pkt[ARP].op == 1 and pkt[ARP].pdst == self.fake_ip:
            self.send_raw(Ether(src=self.fake_mac, dst=pkt[ARP].hwsrc)
                          / ARP(op=2, hwsrc=self.fake_mac, psrc=self.fake_ip,
                                hwdst=pkt[ARP].hwsrc, pdst=pkt[ARP].psrc))
            return
        if IP in pkt and TCP in pkt and pkt[IP].src == self.target_ip \
                and pkt[IP].dst == self.fake_ip:
            self.inbox.put(pkt)

    def send_raw(self, frame):
        self.sock.send(frame)

    def send(self, sport, dport, flags, seq, ack=0, payload=b"", window=65535, options=None):
        tcp = TCP(sport=sport, dport=dport, flags=flags, seq=seq % 2**32, ack=ack % 2**32,
                  window=window, options=options or [])
        frame = Ether(src=self.fake_mac, dst=self.target_mac) \
            / IP(src=self.fake_ip, dst=self.target_ip) / tcp
        if payload:
            frame = frame / Raw(payload)
        self.send_raw(frame)

    def recv(self, sport, timeout, pred=lambda t: True):
        """The next segment to `sport` matching `pred` within `timeout` seconds, or None."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                return None
            try:
                pkt = self.inbox.get(timeout=left)
            except queue.Empty:
                return None
            t = pkt[TCP]
            if t.dport == sport and pred(t):
                return t

    def drain(self, sport, quiet=0.3):
        """Every segment to `sport` until none came for `quiet` seconds."""
        got = []
        while True:
            t = self.recv(sport, quiet)
            if t is None:
                return got
            got.append(t)

    def handshake(self, dport, window=65535, sport=None):
        """Opens a connection (MSS 1460, no other options); returns a Conn."""
        sport = sport or random.randint(20000, 60000)
        iss = random.randint(0, 2**32 - 1)
        self.send(sport, dport, "S", iss, options=[("MSS", 1460)], window=window)
        synack = self.recv(sport, 5, lambda t: t.flags & 0x12 == 0x12)
        if synack is None:
            fail("no SYN-ACK from %s:%d" % (self.target_ip, dport))
        conn = Conn(self, sport, dport, iss + 1, synack.seq + 1)
        conn.ack(window=window)
        return conn

    def close(self):
        self.sniffer.stop()


class Conn:
    def __init__(self, kit, sport, dport, snd_nxt, rcv_nxt):
        self.kit, self.sport, self.dport = kit, sport, dport
        self.snd_nxt, self.rcv_nxt = snd_nxt, rcv_nxt

    def ack(self, window=65535):
        self.kit.send(self.sport, self.dport, "A", self.snd_nxt, self.rcv_nxt, window=window)

    def send_data(self, data, **kw):
        self.kit.send(self.sport, self.dport, "PA", self.snd_nxt, self.rcv_nxt, data, **kw)
        self.snd_nxt += len(data)

    def read(self, n, timeout=5):
        """Reads `n` bytes in order, acking each segment; returns them (short on time-out)."""
        got = b""
        deadline = time.time() + timeout
        while len(got) < n and time.time() < deadline:
            t = self.kit.recv(self.sport, deadline - time.time(),
                              lambda t: len(bytes(t.payload)) > 0)
            if t is None:
                break
            data = bytes(t.payload)
            if t.seq == self.rcv_nxt % 2**32:
                got += data
                self.rcv_nxt += len(data)
            self.ack()
        return got

    def reset(self):
        self.kit.send(self.sport, self.dport, "R", self.snd_nxt)


def fail(message):
    print(json.dumps({"error": message}))
    sys.exit(1)


def kit_from_args(argv):
    """iface fake_ip fake_mac target_ip target_mac, then the scenario's own arguments."""
    iface, fake_ip, fake_mac, target_ip, target_mac = argv[1:6]
    return Kit(iface, fake_ip, fake_mac, target_ip, target_mac), argv[6:]


def report(**fields):
    print(json.dumps(fields))
