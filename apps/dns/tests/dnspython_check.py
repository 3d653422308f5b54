"""dnspython, a resolver library, against corral-dns: each check sends a query as an
application would and reads the answer through dnspython's own parser. Usage:
dnspython_check.py HOST PORT. Prints "all checks passed" at the end, or fails on the first
check that does not hold."""

import socket
import sys
import time

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype

HOST, PORT = sys.argv[1], int(sys.argv[2])
TIMEOUT = 5.0


def ask(name, rdtype, tcp=False, payload=None):
    q = dns.message.make_query(name, rdtype, use_edns=payload is not None, payload=payload or 512)
    if tcp:
        return dns.query.tcp(q, HOST, port=PORT, timeout=TIMEOUT)
    return dns.query.udp(q, HOST, port=PORT, timeout=TIMEOUT)


def rrset(r, section, name, rdtype):
    return r.find_rrset(section, dns.name.from_text(name), dns.rdataclass.IN,
                        dns.rdatatype.from_text(rdtype))


def check(cond, what, r=None):
    if not cond:
        sys.exit(f"FAILED: {what}\n{r}")
    print(f"ok: {what}")


# An exact match, authoritative.
r = ask("ns1.example.com.", "A")
check(r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA, "ns1 A is authoritative", r)
check({rd.address for rd in rrset(r, r.answer, "ns1.example.com.", "A")} == {"192.0.2.53"},
      "ns1 A holds its address", r)

# A CNAME chain inside the zone, followed to its end.
r = ask("www.example.com.", "A")
check([str(s.name) for s in r.answer] == ["www.example.com.", "web.example.com.",
                                          "host.example.com."], "the chain www -> web -> host", r)
check({rd.address for rd in rrset(r, r.answer, "host.example.com.", "A")}
      == {"192.0.2.80", "192.0.2.81"}, "the chain ends in host's addresses", r)

# NXDOMAIN and NODATA carry the zone's SOA in the authority section.
for name, rdtype, rcode in [("missing.example.com.", "A", dns.rcode.NXDOMAIN),
                            ("ns1.example.com.", "MX", dns.rcode.NOERROR)]:
    r = ask(name, rdtype)
    check(r.rcode() == rcode and not r.answer, f"{name} {rdtype} is {dns.rcode.to_text(rcode)}", r)
    check(rrset(r, r.authority, "example.com.", "SOA") is not None,
          f"{name} {rdtype} has the SOA in authority", r)

# A wildcard answers with the queried name.
r = ask("anything.wild.example.com.", "TXT")
check([rd.strings for rd in rrset(r, r.answer, "anything.wild.example.com.", "TXT")]
      == [(b"wildcard",)], "the wildcard answers for anything.wild", r)

# A referral below a cut: not authoritative, NS in authority, glue in additional.
r = ask("x.sub.example.com.", "A")
check(not r.flags & dns.flags.AA and not r.answer, "a referral is not authoritative", r)
check(rrset(r, r.authority, "sub.example.com.", "NS") is not None, "the referral's NS", r)
check(rrset(r, r.additional, "ns.sub.example.com.", "A") is not None, "the referral's glue", r)

# Outside every zone: REFUSED.
r = ask("www.example.net.", "A")
check(r.rcode() == dns.rcode.REFUSED, "a name outside the zones is refused", r)

# Too big for 512 bytes: TC over UDP, whole over TCP, and whole over UDP with a large EDNS
# payload.
r = ask("big.example.com.", "A")
check(r.flags & dns.flags.TC, "a big answer is truncated over UDP", r)
r = ask("big.example.com.", "A", tcp=True)
check(len(rrset(r, r.answer, "big.example.com.", "A")) == 36, "all 36 addresses over TCP", r)
r = ask("big.example.com.", "A", payload=4096)
check(not r.flags & dns.flags.TC and r.edns == 0
      and len(rrset(r, r.answer, "big.example.com.", "A")) == 36,
      "all 36 addresses over UDP with EDNS", r)
q = dns.message.make_query("big.example.com.", "A")
r, used_tcp = dns.query.udp_with_fallback(q, HOST, port=PORT, timeout=TIMEOUT)
check(used_tcp and len(r.answer[0]) == 36, "udp_with_fallback retries over TCP", r)

# Several queries on one TCP connection.
with socket.create_connection((HOST, PORT), timeout=TIMEOUT) as s:
    for name in ["host.example.com.", "mail.example.com.", "sipserver.example.com."]:
        q = dns.message.make_query(name, "A")
        dns.query.send_tcp(s, q, expiration=time.time() + TIMEOUT)
        r, _ = dns.query.receive_tcp(s, expiration=time.time() + TIMEOUT)
        check(r.id == q.id and r.answer, f"{name} on a shared TCP connection", r)

# Case is kept as asked.
r = ask("MiXeD-cAsE.ExAmPlE.cOm.", "A")
check(str(r.question[0].name) == "MiXeD-cAsE.ExAmPlE.cOm." and r.answer,
      "the question comes back in the case asked", r)

print("all checks passed")
