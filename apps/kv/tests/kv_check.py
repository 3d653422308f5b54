"""get, set, cas, incr, expiry and large values against a memcached-compatible server, through
pymemcache (Debian's python3-pymemcache). Usage: kv_check.py PORT [HOST] (HOST defaults to
127.0.0.1). Exits non-zero on a failure."""
import sys
import time

from pymemcache.client.base import Client

port = int(sys.argv[1])
host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
c = Client((host, port), connect_timeout=10, timeout=10)
c.flush_all()

# set / get / flags round trip
assert c.set("greeting", b"hello") is True
assert c.get("greeting") == b"hello", c.get("greeting")
assert c.get("missing") is None
assert c.get_many(["greeting", "missing"]) == {"greeting": b"hello"}

# add / replace / append / prepend / delete
assert c.add("greeting", b"again", noreply=False) is False
assert c.replace("greeting", b"hi", noreply=False) is True
assert c.append("greeting", b"!", noreply=False) is True
assert c.prepend("greeting", b">", noreply=False) is True
assert c.get("greeting") == b">hi!"
assert c.delete("greeting", noreply=False) is True
assert c.delete("greeting", noreply=False) is False

# cas: a stale token loses, a fresh one wins
c.set("counter-doc", b"v1")
value, token = c.gets("counter-doc")
assert value == b"v1" and token is not None
assert c.cas("counter-doc", b"v2", token, noreply=False) is True
assert c.cas("counter-doc", b"v3", token, noreply=False) is False
assert c.get("counter-doc") == b"v2"
assert c.cas("never-set", b"x", b"1", noreply=False) is None

# incr / decr: 64-bit wrap, floor at zero, non-numeric refused
c.set("n", b"10")
assert c.incr("n", 5, noreply=False) == 15
assert c.decr("n", 100, noreply=False) == 0
c.set("n", b"18446744073709551615")
assert c.incr("n", 2, noreply=False) == 1
assert c.incr("absent", 1, noreply=False) is None
c.set("text", b"abc")
try:
    c.incr("text", 1, noreply=False)
    raise AssertionError("incr on a non-numeric value succeeded")
except Exception as e:  # pymemcache raises MemcacheClientError with the server's message
    assert "non-numeric" in str(e), e

# large values: up to the 1 MB item limit, and one too large
big = bytes(range(256)) * 4000  # 1,024,000 bytes
assert c.set("big", big, noreply=False) is True
assert c.get("big") == big
try:
    c.set("huge", b"x" * (2 << 20), noreply=False)
    raise AssertionError("a 2 MB value was stored under a 1 MB limit")
except Exception as e:
    assert "too large" in str(e), e
assert c.get("huge") is None

# expiry: relative seconds, and an absolute Unix time in the past. memcached's clock ticks once a
# second, and an item set to live 1 s dies at the next tick, which may come at once; 2 s lives
# at least one full second, long enough for the next request, and is gone 2.5 s later.
c.set("short", b"1", expire=2)
c.set("past", b"1", expire=int(time.time()) - 100)
assert c.get("short") == b"1"
assert c.get("past") is None
time.sleep(2.5)
assert c.get("short") is None

# touch extends a life
c.set("t", b"1", expire=2)
assert c.touch("t", expire=100, noreply=False) is True
time.sleep(2.5)
assert c.get("t") == b"1"

stats = c.stats()
assert stats[b"curr_items"] >= 1 if b"curr_items" in stats else stats["curr_items"] >= 1
assert c.version()
print("kv_check: all checks passed")
