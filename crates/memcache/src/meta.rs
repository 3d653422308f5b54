//! memcached's meta protocol (`mg`, `ms`, `md`, `ma`, `mn`, `me`) as 1.6.18 parses and answers it.

use crate::KEY_MAX_LENGTH;
use crate::number::{parse_i32, parse_u32, parse_u64};
use crate::session::{PendingStore, Session, State};
use crate::store::{Item, Store, bump};
use crate::text::{Delta, StoreKind, StoreOutcome, Tokens, add_delta, out_line, store_item};

const MAX_OPT_TOKENS: usize = 20;
const MAX_OPAQUE_LENGTH: usize = 32;

/// Flags read before a meta command acts (memcached's `_meta_flag_preparse`).
#[derive(Default)]
struct Flags {
    key_binary: bool,
    vivify: bool,
    no_update: bool,
    locked: bool,
    value: bool,
    set_stale: bool,
    no_reply: bool,
    has_cas: bool,
    new_ttl: bool,
    mode: u8,
    exptime: u32,
    autoviv_exptime: u32,
    recache_time: u32,
    client_flags: u32,
    req_cas: u64,
    delta: u64,
    initial: u64,
}

/// Parses flag tokens from `start`; on success also returns the (possibly base64-decoded) key.
fn preparse(
    store: &Store,
    now: u32,
    t: &Tokens,
    start: usize,
    of: &mut Flags,
) -> Result<Vec<u8>, &'static str> {
    let mut key = t.get(1).to_vec();
    let mut err: &'static str = "CLIENT_ERROR bad command line format";
    let mut has_error = false;
    let mut seen = [false; 127];
    for tok in t.toks.iter().skip(start) {
        let o = tok[0];
        if o >= 127 || seen[o as usize] {
            return Err("CLIENT_ERROR duplicate flag");
        }
        seen[o as usize] = true;
        let arg = &tok[1..];
        let ttl =
            |slot: &mut u32, err: &mut &'static str, has_error: &mut bool| match parse_i32(arg) {
                Some(v) => *slot = store.expiry_from_wire(v, now),
                None => {
                    *err = "CLIENT_ERROR bad token in command line format";
                    *has_error = true;
                }
            };
        match o {
            b'b' => {
                match base64_decode(&key) {
                    Some(k) if !k.is_empty() => key = k,
                    _ => {
                        err = "CLIENT_ERROR error decoding key";
                        has_error = true;
                        key.clear();
                    }
                }
                of.key_binary = true;
            }
            b'N' => {
                of.locked = true;
                of.vivify = true;
                ttl(&mut of.autoviv_exptime, &mut err, &mut has_error);
            }
            b'T' => {
                of.locked = true;
                let before = has_error;
                ttl(&mut of.exptime, &mut err, &mut has_error);
                if has_error == before {
                    of.new_ttl = true;
                }
            }
            b'R' => {
                of.locked = true;
                ttl(&mut of.recache_time, &mut err, &mut has_error);
            }
            b'l' | b'h' => of.locked = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' => {}
            b'v' => of.value = true,
            b'u' => of.no_update = true,
            b'q' => of.no_reply = true,
            b'F' => match parse_u32(arg) {
                Some(f) => of.client_flags = f,
                None => has_error = true,
            },
            b'C' => match parse_u64(arg) {
                Some(c) => {
                    of.req_cas = c;
                    of.has_cas = true;
                }
                None => {
                    err = "CLIENT_ERROR bad token in command line format";
                    has_error = true;
                }
            },
            b'M' => {
                if tok.len() != 2 {
                    err = "CLIENT_ERROR incorrect length for M token";
                    has_error = true;
                } else {
                    of.mode = tok[1];
                }
            }
            b'J' => match parse_u64(arg) {
                Some(v) => of.initial = v,
                None => {
                    err = "CLIENT_ERROR invalid numeric initial value";
                    has_error = true;
                }
            },
            b'D' => match parse_u64(arg) {
                Some(v) => of.delta = v,
                None => {
                    err = "CLIENT_ERROR invalid numeric delta value";
                    has_error = true;
                }
            },
            b'I' => of.set_stale = true,
            _ => return Err("CLIENT_ERROR invalid flag"),
        }
    }
    if has_error { Err(err) } else { Ok(key) }
}

fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        out.extend_from_slice(&base64_encode(key));
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

fn push_num(out: &mut Vec<u8>, flag: u8, v: impl std::fmt::Display) {
    out.push(b' ');
    out.push(flag);
    out.extend_from_slice(v.to_string().as_bytes());
}

/// Echoes `O` and `k` flags into a reply; `Err` if an opaque is too long.
fn echo_opaque_and_key(t: &Tokens, key: &[u8], binary: bool, line: &mut Vec<u8>) -> Result<(), ()> {
    for tok in t.toks.iter().skip(2) {
        match tok[0] {
            b'O' => {
                if tok.len() > MAX_OPAQUE_LENGTH {
                    return Err(());
                }
                line.push(b' ');
                line.extend_from_slice(tok);
            }
            b'k' => push_key(line, key, binary),
            _ => {}
        }
    }
    Ok(())
}

pub(crate) fn mget(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    if t.n() < 3 {
        out_line(out, false, b"ERROR");
        return;
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    if t.n() > MAX_OPT_TOKENS {
        out_line(out, false, b"CLIENT_ERROR options flags are too long");
        return;
    }
    let mut of = Flags::default();
    let key = match preparse(store, now, t, 2, &mut of) {
        Ok(k) => k,
        Err(e) => {
            out_line(out, false, e.as_bytes());
            return;
        }
    };
    bump(&store.counters.meta_cmds);
    let mut g = store.lock(&key, now);
    let mut created = false;
    if g.get().is_none() && of.vivify {
        // The new item remembers a base64 key (memcached's does not, and echoes it raw).
        let mut fresh = Item::new(Vec::new().into(), 0, 0);
        fresh.key_binary = of.key_binary;
        created = g.link(fresh, false).is_ok();
    }
    let c = &store.counters;
    let Some(item) = g.get() else {
        bump(&c.cmd_get);
        bump(&c.get_misses);
        let mut line = b"EN".to_vec();
        if echo_opaque_and_key(t, &key, of.key_binary, &mut line).is_err() {
            out_line(out, false, b"CLIENT_ERROR opaque token too long");
            return;
        }
        out_line(out, of.no_reply, &line);
        return;
    };
    let mut line = Vec::with_capacity(64);
    if of.value {
        line.extend_from_slice(format!("VA {}", item.value.len()).as_bytes());
    } else {
        line.extend_from_slice(b"HD");
    }
    let mut won = false;
    let mut ttl_set = false;
    for tok in t.toks.iter().skip(2) {
        match tok[0] {
            b'T' => {
                ttl_set = true;
                item.exptime = of.exptime;
            }
            b'N' if created => {
                item.exptime = of.autoviv_exptime;
                won = true;
            }
            b'R' if !item.token_sent
                && !created
                && item.exptime != 0
                && item.exptime < of.recache_time =>
            {
                won = true;
            }
            b's' => push_num(&mut line, b's', item.value.len()),
            b't' => {
                if item.exptime == 0 {
                    line.extend_from_slice(b" t-1");
                } else {
                    push_num(&mut line, b't', item.exptime.wrapping_sub(now));
                }
            }
            b'c' => push_num(&mut line, b'c', item.cas),
            b'f' => push_num(&mut line, b'f', item.flags),
            b'l' => push_num(&mut line, b'l', now.wrapping_sub(item.time)),
            b'h' => push_num(&mut line, b'h', u8::from(item.fetched)),
            b'O' => {
                if tok.len() > MAX_OPAQUE_LENGTH {
                    out_line(out, false, b"CLIENT_ERROR opaque token too long");
                    return;
                }
                line.push(b' ');
                line.extend_from_slice(tok);
            }
            // A hit echoes the key as the item holds it: base64 if it was created so.
            b'k' => push_key(&mut line, &key, item.key_binary),
            _ => {}
        }
    }
    if item.token_sent {
        line.extend_from_slice(b" Z");
    }
    if item.stale {
        line.extend_from_slice(b" X");
        if !item.token_sent {
            won = true;
        }
    }
    if won {
        line.extend_from_slice(b" W");
        item.token_sent = true;
    }
    line.extend_from_slice(b"\r\n");
    let value = of.value.then(|| item.value.clone());
    if !of.no_update {
        item.fetched = true;
        g.bump();
    }
    drop(g);
    if ttl_set {
        bump(&c.cmd_touch);
        bump(&c.touch_hits);
    } else {
        bump(&c.cmd_get);
        bump(&c.get_hits);
    }
    out.extend_from_slice(&line);
    if let Some(v) = value {
        out.extend_from_slice(&v);
        out.extend_from_slice(b"\r\n");
    }
}

/// What an `ms` echoes once the store is done.
pub(crate) struct SetReply {
    echo: Vec<Echo>,
    key_binary: bool,
    pub set_stale: bool,
}

enum Echo {
    Opaque(Vec<u8>),
    Key,
    Cas,
}

pub(crate) fn mset(sess: &mut Session, store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    let n = t.n();
    if n < 3 {
        out_line(out, false, b"ERROR");
        return;
    }
    if t.get(1).len() > KEY_MAX_LENGTH || n == 3 {
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    if n > MAX_OPT_TOKENS {
        out_line(out, false, b"CLIENT_ERROR options flags too long");
        return;
    }
    let vlen = match parse_i32(t.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => {
            out_line(out, false, b"CLIENT_ERROR bad command line format");
            return;
        }
    };
    let total = vlen + 2;
    bump(&store.counters.meta_cmds);
    let fail = |sess: &mut Session, out: &mut Vec<u8>, e: &[u8]| {
        out_line(out, false, e);
        sess.state = State::Swallow(total);
    };
    let mut of = Flags::default();
    let key = match preparse(store, now, t, 3, &mut of) {
        Ok(k) => k,
        Err(e) => return fail(sess, out, e.as_bytes()),
    };
    let mut echo = Vec::new();
    let mut err: Option<&[u8]> = None;
    for tok in t.toks.iter().skip(2) {
        match tok[0] {
            b'O' => {
                if tok.len() > MAX_OPAQUE_LENGTH {
                    err = Some(b"CLIENT_ERROR opaque token too long");
                } else {
                    echo.push(Echo::Opaque(tok.to_vec()));
                }
            }
            b'k' => echo.push(Echo::Key),
            b'c' => echo.push(Echo::Cas),
            _ => {}
        }
    }
    let mut kind = match of.mode {
        0 | b'S' => StoreKind::Set,
        b'E' => StoreKind::Add,
        b'A' => StoreKind::Append,
        b'P' => StoreKind::Prepend,
        b'R' => StoreKind::Replace,
        _ => return fail(sess, out, b"CLIENT_ERROR invalid mode for ms M token"),
    };
    if of.has_cas && matches!(kind, StoreKind::Set | StoreKind::Replace) {
        kind = StoreKind::Cas;
    }
    if let Some(e) = err {
        return fail(sess, out, e);
    }
    if !store.size_ok(key.len(), vlen, of.client_flags) {
        store.lock(&key, now).unlink();
        return fail(sess, out, b"SERVER_ERROR object too large for cache");
    }
    let meta = SetReply {
        echo,
        key_binary: of.key_binary,
        set_stale: of.set_stale && kind == StoreKind::Cas,
    };
    sess.state = State::Data(PendingStore {
        kind,
        key,
        flags: of.client_flags,
        exptime: of.exptime,
        cas: of.req_cas,
        total,
        noreply: of.no_reply,
        key_binary: of.key_binary,
        meta: Some(meta),
    });
}

pub(crate) fn finish_set(
    m: SetReply,
    key: &[u8],
    noreply: bool,
    result: StoreOutcome,
    out: &mut Vec<u8>,
) {
    let (status, cas): (&[u8], u64) = match result {
        StoreOutcome::Stored(cas) => (b"HD", cas),
        StoreOutcome::Exists => (b"EX", 0),
        StoreOutcome::NotFound => (b"NF", 0),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::OutOfMemory => {
            out_line(out, false, b"SERVER_ERROR out of memory storing object");
            return;
        }
    };
    let mut line = status.to_vec();
    for e in &m.echo {
        match e {
            Echo::Opaque(o) => {
                line.push(b' ');
                line.extend_from_slice(o);
            }
            Echo::Key => push_key(&mut line, key, m.key_binary),
            Echo::Cas => push_num(&mut line, b'c', cas),
        }
    }
    out_line(
        out,
        noreply && matches!(result, StoreOutcome::Stored(_)),
        &line,
    );
}

pub(crate) fn mdelete(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    if t.n() < 3 {
        out_line(out, false, b"ERROR");
        return;
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    if t.n() > MAX_OPT_TOKENS {
        out_line(out, false, b"CLIENT_ERROR options flags too long");
        return;
    }
    let mut of = Flags::default();
    let Ok(key) = preparse(store, now, t, 2, &mut of) else {
        out_line(out, false, b"CLIENT_ERROR invalid or duplicate flag");
        return;
    };
    bump(&store.counters.meta_cmds);
    let mut flags = Vec::new();
    if echo_opaque_and_key(t, &key, of.key_binary, &mut flags).is_err() {
        out_line(out, false, b"CLIENT_ERROR opaque token too long");
        return;
    }
    let mut g = store.lock(&key, now);
    let (status, skip): (&[u8], bool) = match g.get() {
        Some(item) if of.has_cas && item.cas != of.req_cas => (b"EX", false),
        Some(item) if of.set_stale => {
            if of.new_ttl {
                item.exptime = of.exptime;
            }
            item.stale = true;
            item.token_sent = false;
            item.cas = store.next_cas();
            (b"HD", of.no_reply)
        }
        Some(_) => {
            g.unlink();
            bump(&store.counters.delete_hits);
            (b"HD", of.no_reply)
        }
        None => {
            bump(&store.counters.delete_misses);
            (b"NF", false)
        }
    };
    let mut line = status.to_vec();
    line.extend_from_slice(&flags);
    out_line(out, skip, &line);
}

pub(crate) fn marith(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    if t.n() < 3 {
        out_line(out, false, b"ERROR");
        return;
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    if t.n() > MAX_OPT_TOKENS {
        out_line(out, false, b"CLIENT_ERROR options flags too long");
        return;
    }
    let mut of = Flags {
        delta: 1,
        ..Flags::default()
    };
    let Ok(key) = preparse(store, now, t, 2, &mut of) else {
        out_line(out, false, b"CLIENT_ERROR invalid or duplicate flag");
        return;
    };
    bump(&store.counters.meta_cmds);
    let incr = match of.mode {
        0 | b'I' | b'+' => true,
        b'D' | b'-' => false,
        _ => {
            out_line(out, false, b"CLIENT_ERROR invalid mode for ma M token");
            return;
        }
    };
    let mut created = false;
    let mut skip = false;
    let digits;
    let mut line = Vec::new();
    match add_delta(store, now, &key, incr, of.delta, of.req_cas) {
        Delta::Ok(v) => {
            skip = of.no_reply;
            digits = v.to_string();
        }
        Delta::NonNumeric => {
            out_line(
                out,
                false,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value",
            );
            return;
        }
        Delta::OutOfMemory => {
            out_line(out, false, b"SERVER_ERROR out of memory");
            return;
        }
        Delta::NotFound if of.vivify => {
            digits = of.initial.to_string();
            let mut item = Item::new(digits.as_bytes().into(), 0, 0);
            item.key_binary = of.key_binary;
            match store_item(store, now, StoreKind::Add, &key, item, false) {
                StoreOutcome::Stored(_) => created = true,
                StoreOutcome::OutOfMemory => {
                    out_line(
                        out,
                        false,
                        b"SERVER_ERROR Out of memory allocating new item",
                    );
                    return;
                }
                _ => line.extend_from_slice(b"NS"),
            }
        }
        Delta::NotFound | Delta::CasMismatch => {
            let missing = store.lock(&key, now).get().is_none();
            if missing {
                bump(if incr {
                    &store.counters.incr_misses
                } else {
                    &store.counters.decr_misses
                });
            }
            let mut line: Vec<u8> = if missing {
                b"NF".to_vec()
            } else {
                b"EX".to_vec()
            };
            if echo_opaque_and_key(t, &key, of.key_binary, &mut line).is_err() {
                out_line(out, false, b"CLIENT_ERROR opaque token too long");
                return;
            }
            out_line(out, false, &line);
            return;
        }
    }
    let mut g = store.lock(&key, now);
    let Some(item) = g.get() else {
        // Gone between the change and this reply (evicted): answer as memcached would have.
        out_line(out, skip, b"HD");
        return;
    };
    if of.value {
        line.extend_from_slice(format!("VA {}", digits.len()).as_bytes());
    } else {
        line.extend_from_slice(b"HD");
    }
    for tok in t.toks.iter().skip(2) {
        match tok[0] {
            b'c' => push_num(&mut line, b'c', item.cas),
            b't' => {
                if item.exptime == 0 {
                    line.extend_from_slice(b" t-1");
                } else {
                    push_num(&mut line, b't', item.exptime.wrapping_sub(now));
                }
            }
            b'T' => item.exptime = of.exptime,
            b'N' if created => item.exptime = of.autoviv_exptime,
            b'O' => {
                if tok.len() > MAX_OPAQUE_LENGTH {
                    out_line(out, false, b"CLIENT_ERROR opaque token too long");
                    return;
                }
                line.push(b' ');
                line.extend_from_slice(tok);
            }
            b'k' => push_key(&mut line, &key, of.key_binary),
            _ => {}
        }
    }
    if of.value {
        line.extend_from_slice(b"\r\n");
        line.extend_from_slice(digits.as_bytes());
    }
    out_line(out, skip, &line);
}

pub(crate) fn mdebug(store: &Store, now: u32, t: &Tokens, out: &mut Vec<u8>) {
    if t.n() < 3 || t.get(1).len() > KEY_MAX_LENGTH {
        out_line(out, false, b"CLIENT_ERROR bad command line format");
        return;
    }
    let mut key = t.get(1).to_vec();
    let binary = t.n() >= 4 && t.get(2) == b"b";
    if binary {
        match base64_decode(&key) {
            Some(k) if !k.is_empty() => key = k,
            _ => {
                out_line(out, false, b"CLIENT_ERROR bad command line format");
                return;
            }
        }
    }
    bump(&store.counters.meta_cmds);
    let mut g = store.lock(&key, now);
    match g.get() {
        Some(item) => {
            let exp = if item.exptime == 0 {
                -1
            } else {
                now.wrapping_sub(item.exptime) as i32
            };
            let size = crate::store::item_total_size(key.len(), item.value.len(), item.flags);
            out.extend_from_slice(b"ME ");
            if item.key_binary {
                out.extend_from_slice(&base64_encode(&key));
            } else {
                out.extend_from_slice(&key);
            }
            let fetched = if item.fetched { "yes" } else { "no" };
            let la = now.wrapping_sub(item.time);
            out.extend_from_slice(
                format!(
                    " exp={exp} la={la} cas={} fetch={fetched} cls=1 size={size}\r\n",
                    item.cas
                )
                .as_bytes(),
            );
        }
        None => out_line(out, false, b"EN"),
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

/// Decodes a base64 key as memcached 1.6.18 does (RFC 2045 rules, as MIME decoders read):
/// bytes outside the alphabet are skipped; the remaining characters must come in whole groups
/// of four; the first group holding any `=` ends the data (one `=` drops one byte, two drop two,
/// more is an error) and whatever follows it is ignored. `None` on error; never empty.
fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let sextet = |c: u8| B64.iter().position(|&x| x == c).map(|v| v as u32);
    let chars: Vec<u8> = text
        .iter()
        .copied()
        .filter(|&c| c == b'=' || sextet(c).is_some())
        .collect();
    if chars.is_empty() || !chars.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(chars.len() / 4 * 3);
    for group in chars.chunks(4) {
        let pad = group.iter().filter(|&&c| c == b'=').count();
        let n = group
            .iter()
            .fold(0u32, |n, &c| (n << 6) | sextet(c).unwrap_or(0));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        match pad {
            0 => out.extend_from_slice(&bytes),
            1 | 2 => {
                out.extend_from_slice(&bytes[..3 - pad]);
                break;
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for data in [&b"a"[..], b"ab", b"abc", b"abcd", b"\x00\xff\x10"] {
            assert_eq!(base64_decode(&base64_encode(data)).unwrap(), data);
        }
        assert_eq!(base64_encode(b"foo"), b"Zm9v");
        assert!(base64_decode(b"Zm9").is_none());
    }

    #[test]
    fn base64_decodes_as_memcached() {
        // Bytes outside the alphabet are skipped, wherever they are.
        assert_eq!(base64_decode(b"QUJD\x01").unwrap(), b"ABC");
        assert_eq!(base64_decode(b"Q\x01U\x7fJ\xffD").unwrap(), b"ABC");
        assert_eq!(base64_decode(b"QU.J-D").unwrap(), b"ABC");
        // What is left must be whole groups of four, and something.
        assert!(base64_decode(b"QUJ\x01").is_none());
        assert!(base64_decode(b"!!!!").is_none());
        assert!(base64_decode(b"").is_none());
        assert!(base64_decode(b"QQ==Q").is_none());
        // The first group with padding ends the data; an `=` counts wherever it stands.
        assert_eq!(base64_decode(b"QQ==QUJD").unwrap(), b"A");
        assert_eq!(base64_decode(b"QUI=QUJD").unwrap(), b"AB");
        assert_eq!(base64_decode(b"Q=JD").unwrap(), [0x40, 0x02]);
        assert!(base64_decode(b"Q===").is_none());
        assert!(base64_decode(b"====").is_none());
        assert!(base64_decode(b"QUJD====").is_none());
    }
}
