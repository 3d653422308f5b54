//! memcached's classic text protocol: tokenizing a request line as `tokenize_command` does,
//! dispatching it, and formatting replies as memcached 1.6.18 writes them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::number::{parse_i32, parse_u32, parse_u64};
use crate::session::{PendingGet, PendingStore, Session, State};
use crate::store::{Item, LinkError, Peek, Store, bump};
use crate::{KEY_MAX_LENGTH, meta};

/// memcached's `MAX_TOKENS`: a line is cut into at most 23 tokens plus the unparsed rest.
const MAX_TOKENS: usize = 24;

/// Request tokens; `get(i)` past the last one is the empty terminal token, as in memcached.
pub(crate) struct Tokens<'a> {
    pub toks: Vec<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    /// memcached's `ntokens`: the real tokens plus the terminal one.
    pub fn n(&self) -> usize {
        self.toks.len() + 1
    }

    pub fn get(&self, i: usize) -> &'a [u8] {
        self.toks.get(i).copied().unwrap_or(b"")
    }
}

pub(crate) fn tokenize(line: &[u8]) -> Tokens<'_> {
    let mut toks = Vec::new();
    let mut s = 0;
    let mut e = 0;
    let mut broke = false;
    while e < line.len() {
        if line[e] == b' ' {
            if s != e {
                toks.push(&line[s..e]);
                if toks.len() == MAX_TOKENS - 1 {
                    e += 1;
                    s = e;
                    broke = true;
                    break;
                }
            }
            s = e + 1;
        }
        e += 1;
    }
    if !broke && s != e {
        toks.push(&line[s..e]);
    }
    Tokens { toks }
}

/// Appends a one-line reply unless the request asked for none (memcached's `out_string`).
pub(crate) fn out_line(out: &mut Vec<u8>, noreply: bool, s: &[u8]) {
    if !noreply {
        out.extend_from_slice(s);
        out.extend_from_slice(b"\r\n");
    }
}

fn noreply_of(t: &Tokens) -> bool {
    t.n() >= 2 && t.get(t.n() - 2) == b"noreply"
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// How a storage command ended: memcached's `store_item_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreOutcome {
    Stored(u64),
    Exists,
    NotFound,
    NotStored,
    OutOfMemory,
}

pub(crate) fn process_line(
    sess: &mut Session,
    store: &Store,
    now: u32,
    line: &[u8],
    out: &mut Vec<u8>,
) {
    let t = tokenize(line);
    let n = t.n();
    let cmd = t.get(0);
    if n < 2 || cmd.len() < 2 {
        out_line(out, false, b"ERROR");
        return;
    }
    if cmd[0] == b'm' && cmd.len() == 2 {
        match cmd[1] {
            b'g' => meta::mget(store, now, &t, out),
            b's' => meta::mset(sess, store, now, &t, out),
            b'd' => meta::mdelete(store, now, &t, out),
            b'a' => meta::marith(store, now, &t, out),
            b'n' => out_line(out, false, b"MN"),
            b'e' => meta::mdebug(store, now, &t, out),
            _ => out_line(out, false, b"ERROR"),
        }
        return;
    }
    let want = |ok: bool, out: &mut Vec<u8>| {
        if !ok {
            out_line(out, false, b"ERROR");
        }
        ok
    };
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => {
            if want(n >= 3, out) {
                start_get(sess, store, now, line, &t, out);
            }
        }
        b"set" | b"add" | b"append" | b"replace" | b"prepend" => {
            let kind = match cmd {
                b"set" => StoreKind::Set,
                b"add" => StoreKind::Add,
                b"append" => StoreKind::Append,
                b"replace" => StoreKind::Replace,
                _ => StoreKind::Prepend,
            };
            if want(n == 6 || n == 7, out) {
                update(sess, store, now, &t, kind, out);
            }
        }
        b"cas" => {
            if want(n == 7 || n == 8, out) {
                update(sess, store, now, &t, StoreKind::Cas, out);
            }
        }
        b"incr" | b"decr" => {
            if want(n == 4 || n == 5, out) {
                arithmetic(store, now, &t, cmd == b"incr", out);
            }
        }
        b"delete" => {
            if want((3..=5).contains(&n), out) {
                delete(store, now, &t, out);
            }
        }
        b"touch" => {
            if want(n == 4 || n == 5, out) {
                touch(store, now, &t, out);
            }
        }
        b"stats" => stats(store, now, &t, out),
        b"flush_all" => {
            if want((2..=4).contains(&n), out) {
                flush_all(store, now, &t, out);
            }
        }
        b"version" => {
            out.extend_from_slice(b"VERSION ");
            out_line(out, false, crate::VERSION.as_bytes());
        }
        b"quit" => sess.close = true,
        b"verbosity" => {
            if want(n == 3 || n == 4, out) {
                let noreply = noreply_of(&t);
                let reply: &[u8] = if parse_u32(t.get(1)).is_some() {
                    b"OK"
                } else {
                    b"CLIENT_ERROR bad command line format"
                };
                out_line(out, noreply, reply);
            }
        }
        _ => {
            if t.get(n - 2).starts_with(b"HTTP/") {
                sess.close = true;
            } else {
                out_line(out, false, b"ERROR");
            }
        }
    }
}

fn start_get(
    sess: &mut Session,
    store: &Store,
    now: u32,
    line: &[u8],
    t: &Tokens,
    out: &mut Vec<u8>,
) {
    let cmd = t.get(0);
    let with_cas = cmd == b"gets" || cmd == b"gats";
    let touch = if cmd == b"gat" || cmd == b"gats" {
        match parse_i32(t.get(1)) {
            Some(e) => Some(store.expiry_from_wire(e, now)),
            None => {
                out_line(out, false, b"CLIENT_ERROR invalid exptime argument");
                return;
            }
        }
    } else {
        None
    };
    // Keys start after the command (and the exptime): offset of the first key token.
    let first_key = if touch.is_some() { 2 } else { 1 };
    let keys_at = match t.toks.get(first_key) {
        Some(k) => k.as_ptr() as usize - line.as_ptr() as usize,
        None => line.len(),
    };
    let keys = &line[keys_at..];
    let mut words = keys.split(|&b| b == b' ').filter(|k| !k.is_empty());
    if let Some(bad) = words.clone().position(|k| k.len() > KEY_MAX_LENGTH) {
        // memcached has already fetched (and touched) the keys before the bad one when it
        // notices; it then drops their replies.
        for key in words.by_ref().take(bad) {
            lookup(store, now, key, touch);
        }
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    let g = PendingGet {
        keys: keys.to_vec(),
        next: 0,
        with_cas,
        touch,
    };
    continue_get(sess, store, now, g, out);
}

/// One key of a get: the hit's value, flags and CAS, with the side effects memcached has
/// (touch, fetched mark, LRU bump, counters).
fn lookup(
    store: &Store,
    now: u32,
    key: &[u8],
    touch: Option<u32>,
) -> Option<(Arc<[u8]>, u32, u64)> {
    let c = &store.counters;
    if touch.is_none() {
        match store.peek(key, now) {
            Peek::Hit(value, flags, cas) => {
                bump(&c.cmd_get);
                bump(&c.get_hits);
                return Some((value, flags, cas));
            }
            Peek::Miss => {
                bump(&c.cmd_get);
                bump(&c.get_misses);
                return None;
            }
            Peek::NeedsWrite => {}
        }
    }
    let mut guard = store.lock(key, now);
    let found = guard.get().map(|item| {
        if let Some(exp) = touch {
            item.exptime = exp;
        }
        item.fetched = true;
        (item.value.clone(), item.flags, item.cas)
    });
    if found.is_some() {
        guard.bump();
    }
    drop(guard);
    match (found.is_some(), touch.is_some()) {
        (true, true) => {
            bump(&c.cmd_touch);
            bump(&c.touch_hits);
        }
        (false, true) => {
            bump(&c.cmd_touch);
            bump(&c.touch_misses);
        }
        (true, false) => {
            bump(&c.cmd_get);
            bump(&c.get_hits);
        }
        (false, false) => {
            bump(&c.cmd_get);
            bump(&c.get_misses);
        }
    }
    found
}

/// Answers keys of a multi-get until done or the output is full; then `END`.
pub(crate) fn continue_get(
    sess: &mut Session,
    store: &Store,
    now: u32,
    mut g: PendingGet,
    out: &mut Vec<u8>,
) {
    while g.next < g.keys.len() {
        if out.len() >= sess.limits.output_high_water {
            sess.state = State::Get(g);
            return;
        }
        let rest = &g.keys[g.next..];
        let len = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let key = &rest[..len];
        g.next += len + 1;
        if key.is_empty() {
            continue;
        }
        let found = lookup(store, now, key, g.touch);
        if let Some((value, flags, cas)) = found {
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(key);
            out.extend_from_slice(format!(" {} {}", flags, value.len()).as_bytes());
            if g.with_cas {
                out.extend_from_slice(format!(" {cas}").as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn update(
    sess: &mut Session,
    store: &Store,
    now: u32,
    t: &Tokens,
    kind: StoreKind,
    out: &mut Vec<u8>,
) {
    let noreply = noreply_of(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        parse_u32(t.get(2)),
        parse_i32(t.get(3)),
        parse_i32(t.get(4)),
    ) else {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    };
    let mut cas = 0;
    if kind == StoreKind::Cas {
        match parse_u64(t.get(5)) {
            Some(c) => cas = c,
            None => {
                out_line(out, noreply, b"CLIENT_ERROR bad command line format");
                return;
            }
        }
    }
    if !(0..=i32::MAX - 2).contains(&vlen) {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    }
    let total = vlen as usize + 2;
    let exptime = store.expiry_from_wire(exptime, now);
    if !store.size_ok(key.len(), vlen as usize, flags) {
        out_line(out, noreply, b"SERVER_ERROR object too large for cache");
        sess.state = State::Swallow(total);
        // A failed set must not leave the old value readable.
        if kind == StoreKind::Set {
            store.lock(key, now).unlink();
        }
        return;
    }
    sess.state = State::Data(PendingStore {
        kind,
        key: key.to_vec(),
        flags,
        exptime,
        cas,
        total,
        noreply,
        key_binary: false,
        meta: None,
    });
}

/// Stores an item the way memcached's `do_store_item` decides.
pub(crate) fn store_item(
    store: &Store,
    now: u32,
    kind: StoreKind,
    key: &[u8],
    mut item: Item,
    set_stale: bool,
) -> StoreOutcome {
    let c = &store.counters;
    let mut g = store.lock(key, now);
    let req_cas = item.cas;
    let old = g.get().map(|o| {
        (
            o.cas,
            o.value.clone(),
            o.flags,
            o.exptime,
            o.token_sent,
            o.key_binary,
        )
    });
    let link = |g: &mut crate::store::KeyGuard, item: Item| match g.link(item, false) {
        Ok(cas) => StoreOutcome::Stored(cas),
        Err(LinkError::TooLarge) => StoreOutcome::NotStored,
        Err(LinkError::OutOfMemory) => StoreOutcome::OutOfMemory,
    };
    match old {
        Some((old_cas, old_value, old_flags, old_exptime, old_token, old_key_binary)) => {
            #[derive(PartialEq)]
            enum CasRes {
                None,
                Match,
                Stale,
                BadVal,
            }
            let res = if req_cas == 0 {
                CasRes::None
            } else if req_cas == old_cas {
                CasRes::Match
            } else if set_stale && req_cas < old_cas {
                CasRes::Stale
            } else {
                CasRes::BadVal
            };
            match kind {
                StoreKind::Add => {
                    g.stamp();
                    StoreOutcome::NotStored
                }
                StoreKind::Cas => match res {
                    CasRes::Match => {
                        bump(&c.cas_hits);
                        link(&mut g, item)
                    }
                    CasRes::Stale => {
                        bump(&c.cas_hits);
                        item.exptime = old_exptime;
                        item.stale = true;
                        item.token_sent = old_token;
                        link(&mut g, item)
                    }
                    _ => {
                        bump(&c.cas_badval);
                        StoreOutcome::Exists
                    }
                },
                StoreKind::Append | StoreKind::Prepend => {
                    if res != CasRes::None && res != CasRes::Match {
                        return StoreOutcome::Exists;
                    }
                    let mut v = Vec::with_capacity(old_value.len() + item.value.len());
                    if kind == StoreKind::Append {
                        v.extend_from_slice(&old_value);
                        v.extend_from_slice(&item.value);
                    } else {
                        v.extend_from_slice(&item.value);
                        v.extend_from_slice(&old_value);
                    }
                    // The item changes value, not identity: its key keeps the form it was
                    // created with (memcached's rebuilt item forgets a base64 key).
                    let mut joined = Item::new(v.into(), old_flags, old_exptime);
                    joined.key_binary = old_key_binary;
                    link(&mut g, joined)
                }
                StoreKind::Replace | StoreKind::Set => link(&mut g, item),
            }
        }
        None => match kind {
            StoreKind::Add | StoreKind::Set => link(&mut g, item),
            StoreKind::Cas => {
                bump(&c.cas_misses);
                StoreOutcome::NotFound
            }
            _ => StoreOutcome::NotStored,
        },
    }
}

pub(crate) fn complete_store(
    store: &Store,
    now: u32,
    p: PendingStore,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    bump(&store.counters.cmd_set);
    if !data.ends_with(b"\r\n") {
        // Meta sets always report errors.
        out_line(
            out,
            p.noreply && p.meta.is_none(),
            b"CLIENT_ERROR bad data chunk",
        );
        return;
    }
    let value: Arc<[u8]> = data[..data.len() - 2].into();
    let mut item = Item::new(value, p.flags, p.exptime);
    item.cas = p.cas;
    item.key_binary = p.key_binary;
    let set_stale = p.meta.as_ref().is_some_and(|m| m.set_stale);
    let result = store_item(store, now, p.kind, &p.key, item, set_stale);
    if let Some(m) = p.meta {
        meta::finish_set(m, &p.key, p.noreply, result, out);
        return;
    }
    let reply: &[u8] = match result {
        StoreOutcome::Stored(_) => b"STORED",
        StoreOutcome::Exists => b"EXISTS",
        StoreOutcome::NotFound => b"NOT_FOUND",
        StoreOutcome::NotStored => b"NOT_STORED",
        StoreOutcome::OutOfMemory => b"SERVER_ERROR out of memory storing object",
    };
    out_line(out, p.noreply, reply);
}

/// The outcome of memcached's `do_add_delta`.
pub(crate) enum Delta {
    /// The new value.
    Ok(u64),
    NonNumeric,
    NotFound,
    CasMismatch,
    OutOfMemory,
}

pub(crate) fn add_delta(
    store: &Store,
    now: u32,
    key: &[u8],
    incr: bool,
    delta: u64,
    req_cas: u64,
) -> Delta {
    let c = &store.counters;
    let mut g = store.lock(key, now);
    let Some(item) = g.get() else {
        return Delta::NotFound;
    };
    if item.value.is_empty() {
        return Delta::NonNumeric;
    }
    if req_cas != 0 && item.cas != req_cas {
        return Delta::CasMismatch;
    }
    let Some(value) = parse_u64(&item.value) else {
        return Delta::NonNumeric;
    };
    let value = if incr {
        bump(&c.incr_hits);
        value.wrapping_add(delta)
    } else {
        bump(&c.decr_hits);
        value.saturating_sub(delta)
    };
    let digits = value.to_string();
    if digits.len() <= item.value.len() {
        // In place, as memcached does: the length stays, the tail is padded with spaces.
        let mut v = digits.clone().into_bytes();
        v.resize(item.value.len(), b' ');
        item.value = v.into();
        item.cas = store.next_cas();
        g.stamp();
        Delta::Ok(value)
    } else {
        let mut fresh = Item::new(digits.into_bytes().into(), item.flags, item.exptime);
        fresh.key_binary = item.key_binary;
        match g.link(fresh, false) {
            Ok(_) => Delta::Ok(value),
            Err(_) => Delta::OutOfMemory,
        }
    }
}

fn arithmetic(store: &Store, now: u32, t: &Tokens, incr: bool, out: &mut Vec<u8>) {
    let noreply = noreply_of(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    }
    let Some(delta) = parse_u64(t.get(2)) else {
        out_line(out, noreply, b"CLIENT_ERROR invalid numeric delta argument");
        return;
    };
    match add_delta(store, now, key, incr, delta, 0) {
        Delta::Ok(v) => out_line(out, noreply, v.to_string().as_bytes()),
        Delta::NonNumeric => out_line(
            out,
            noreply,
            b"CLIENT_ERROR cannot increment or decrement non-numeric value",
        ),
        Delta::OutOfMemory => out_line(out, noreply, b"SERVER_ERROR out of memory"),
        Delta::NotFound | Delta::CasMismatch => {
            bump(if incr {
                &store.counters.incr_misses
            } else {
                &store.counters.decr_misses
            });
            out_line(out, noreply, b"NOT_FOUND");
        }
    }
}

fn delete(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    let n = t.n();
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = noreply_of(t);
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            out_line(
                out,
                noreply,
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
            );
            return;
        }
    }
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    }
    if store.lock(key, now).unlink() {
        bump(&store.counters.delete_hits);
        out_line(out, noreply, b"DELETED");
    } else {
        bump(&store.counters.delete_misses);
        out_line(out, noreply, b"NOT_FOUND");
    }
}

fn touch(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    let noreply = noreply_of(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        out_line(out, noreply, b"CLIENT_ERROR bad command line format");
        return;
    }
    let Some(exptime) = parse_i32(t.get(2)) else {
        out_line(out, noreply, b"CLIENT_ERROR invalid exptime argument");
        return;
    };
    let exptime = store.expiry_from_wire(exptime, now);
    let mut g = store.lock(key, now);
    bump(&store.counters.cmd_touch);
    // A touch is a hit: it marks the item fetched, as `gat` and `mg T` do.
    let hit = match g.get() {
        Some(item) => {
            item.exptime = exptime;
            item.fetched = true;
            true
        }
        None => false,
    };
    if hit {
        g.bump();
        bump(&store.counters.touch_hits);
        out_line(out, noreply, b"TOUCHED");
    } else {
        bump(&store.counters.touch_misses);
        out_line(out, noreply, b"NOT_FOUND");
    }
}

fn flush_all(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    let noreply = noreply_of(t);
    bump(&store.counters.cmd_flush);
    let mut delay = 0;
    if t.n() != if noreply { 3 } else { 2 } {
        match parse_i32(t.get(1)) {
            Some(d) => delay = d,
            None => {
                out_line(out, noreply, b"CLIENT_ERROR invalid exptime argument");
                return;
            }
        }
    }
    store.flush_all(delay, now);
    out_line(out, noreply, b"OK");
}

fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
}

fn stats(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    let cfg = store.config();
    let c = &store.counters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    if t.n() == 2 {
        stat(out, "pid", std::process::id());
        stat(out, "uptime", now);
        stat(out, "time", cfg.process_started + i64::from(now));
        stat(out, "version", crate::VERSION);
        stat(out, "pointer_size", usize::BITS);
        stat(out, "max_connections", cfg.max_connections);
        stat(out, "curr_connections", load(&c.curr_connections));
        stat(out, "total_connections", load(&c.total_connections));
        stat(out, "cmd_get", load(&c.cmd_get));
        stat(out, "cmd_set", load(&c.cmd_set));
        stat(out, "cmd_flush", load(&c.cmd_flush));
        stat(out, "cmd_touch", load(&c.cmd_touch));
        stat(out, "cmd_meta", load(&c.meta_cmds));
        stat(out, "get_hits", load(&c.get_hits));
        stat(out, "get_misses", load(&c.get_misses));
        stat(out, "get_expired", load(&c.get_expired));
        stat(out, "get_flushed", load(&c.get_flushed));
        stat(out, "delete_misses", load(&c.delete_misses));
        stat(out, "delete_hits", load(&c.delete_hits));
        stat(out, "incr_misses", load(&c.incr_misses));
        stat(out, "incr_hits", load(&c.incr_hits));
        stat(out, "decr_misses", load(&c.decr_misses));
        stat(out, "decr_hits", load(&c.decr_hits));
        stat(out, "cas_misses", load(&c.cas_misses));
        stat(out, "cas_hits", load(&c.cas_hits));
        stat(out, "cas_badval", load(&c.cas_badval));
        stat(out, "touch_hits", load(&c.touch_hits));
        stat(out, "touch_misses", load(&c.touch_misses));
        stat(out, "threads", cfg.threads);
        stat(out, "bytes", load(&c.bytes));
        stat(out, "curr_items", load(&c.curr_items));
        stat(out, "total_items", load(&c.total_items));
        stat(out, "expired_unfetched", load(&c.expired_unfetched));
        stat(out, "evictions", load(&c.evictions));
        stat(out, "limit_maxbytes", cfg.max_bytes);
        out.extend_from_slice(b"END\r\n");
        return;
    }
    match t.get(1) {
        b"reset" => out_line(out, false, b"RESET"),
        b"detail" => match t.get(2) {
            b"on" | b"off" => out_line(out, false, b"OK"),
            b"dump" => out_line(out, false, b"END"),
            _ => out_line(out, false, b"CLIENT_ERROR usage: stats detail on|off|dump"),
        },
        b"settings" => {
            stat(out, "maxbytes", cfg.max_bytes);
            stat(out, "maxconns", cfg.max_connections);
            stat(out, "tcpport", cfg.tcp_port);
            stat(out, "udpport", cfg.udp_port);
            stat(out, "evictions", "on");
            stat(out, "num_threads", cfg.threads);
            stat(out, "cas_enabled", "yes");
            stat(out, "item_size_max", cfg.item_size_max);
            stat(out, "flush_enabled", "yes");
            out.extend_from_slice(b"END\r\n");
        }
        b"items" | b"slabs" | b"sizes" | b"conns" => {
            // One class holds every item here; reported as memcached's class 1.
            let items = load(&c.curr_items);
            if t.get(1) == b"items" && items > 0 {
                stat(out, "items:1:number", items);
                stat(out, "items:1:evicted", load(&c.evictions));
            } else if t.get(1) == b"slabs" {
                if items > 0 {
                    stat(out, "1:used_chunks", items);
                    stat(out, "1:mem_requested", load(&c.bytes));
                }
                stat(out, "active_slabs", u64::from(items > 0));
                stat(out, "total_malloced", store.used_bytes());
            }
            out.extend_from_slice(b"END\r\n");
        }
        _ => out_line(out, false, b"ERROR"),
    }
}
