//! Passive opens (RFC 9293 LISTEN): a bounded SYN backlog, SYN cookies when it is full, and a
//! bounded accept queue.
//!
//! The listener decides; the caller keeps the connection table. A SYN either creates a
//! half-open connection ([`crate::Connection::accept_syn`]), which the caller inserts in its
//! table and reports back with [`Listener::half_open_done`] when it leaves SYN-RECEIVED, or is
//! answered statelessly with a SYN cookie, whose completing ACK [`Listener::on_ack`] turns into
//! a [`crate::Handshake`].
//!
//! Initial sequence numbers follow RFC 6528: a keyed hash (SipHash-2-4) of the 4-tuple plus a
//! clock ticking every 4 µs. A SYN cookie is close to Linux's: the ISN is
//! `hash1(4-tuple) + peer ISN + (period << 24) + (mac << 2 | mss index)`, where `period` counts
//! [`COOKIE_PERIOD`]s and `mac` is 22 bits of a keyed hash of the 4-tuple, the period, the peer's
//! ISN and the MSS index (Linux adds the index to its hash instead, which lets a cookie off by
//! one or two through with another MSS). A cookie is honoured during the period it was issued
//! in and the next one. What else the peer's SYN offered (window scale,
//! SACK-permitted) rides in the low [`TS_OPTION_BITS`] bits of our TSval, which the peer echoes;
//! without timestamps there is nowhere to keep it, so a cookie connection to a peer that sends
//! no timestamps uses neither window scaling nor SACK (the documented cost of cookies).
//!
//! A cookie SYN-ACK is never retransmitted: no timer waits for its ACK (a peer that lost it
//! retransmits its SYN, which draws a new cookie), so RFC 6298 §5.7's 3 s RTO after a SYN-ACK
//! timeout does not apply, and a connection from a cookie cannot tell whether a SYN-ACK was
//! lost before. It starts with `rto_initial`, as any connection whose handshake took no sample.

use core::net::SocketAddrV4;

use corral_wire::{SackList, TcpFlags, TcpHeader, TcpOption, TcpOptionSet, TcpSegment, Timestamps};

use crate::Nanos;
use crate::config::{ConfigError, TcpConfig};
use crate::conn::{Endpoints, Handshake, MAX_HEADER, timestamp_clock, window_scale_for};
use crate::stats::{TcpCounters, TcpDrop};

/// Length of one cookie period. A cookie is valid for the rest of the period it was issued in
/// and the whole next one: between 64 and 128 s.
pub const COOKIE_PERIOD: Nanos = 64_000_000_000;
/// Periods a cookie stays valid (the one it was issued in included).
const COOKIE_MAX_AGE: u32 = 2;
/// Bits of the cookie holding the MAC and the MSS index.
const COOKIE_BITS: u32 = 24;
/// Bits of the cookie holding the MSS index.
const COOKIE_DATA_BITS: u32 = 2;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;
/// MSS values a cookie can encode (Linux's table for IPv4): the peer gets the largest not above
/// what it offered.
const COOKIE_MSS: [u16; 4] = [536, 1300, 1440, 1460];
/// Low bits of a cookie SYN-ACK's TSval that carry the peer's SYN options.
pub const TS_OPTION_BITS: u32 = 6;
const TS_OPTION_MASK: u32 = (1 << TS_OPTION_BITS) - 1;
/// In the TSval's option bits: the window-scale shift, or this value when there is none.
const TS_NO_WSCALE: u32 = 0xf;
const TS_SACK_BIT: u32 = 1 << 4;
/// Ticks of the RFC 6528 ISN clock, in nanoseconds (RFC 9293 §3.4.1's 4 µs).
const ISN_TICK: Nanos = 4_000;

/// Bounds and secrets of one listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Most half-open connections at once.
    pub syn_backlog: usize,
    /// Most established connections waiting for `accept`.
    pub accept_backlog: usize,
    /// Answer SYNs with cookies when the SYN backlog is full (otherwise they are dropped).
    pub syn_cookies: bool,
    /// Secret for cookies and initial sequence numbers (RFC 6528); random per stack.
    pub secret: [u8; 16],
    /// The settings of the connections this listener admits: what a cookie SYN-ACK offers, and
    /// what the caller passes to [`crate::Connection::accept_syn`] and
    /// [`crate::Connection::from_handshake`].
    pub tcp: TcpConfig,
}

impl ListenerConfig {
    /// Defaults (a backlog of 1024 half-open and 128 accepted connections, cookies on) with the
    /// stack's secret.
    pub fn new(secret: [u8; 16]) -> ListenerConfig {
        ListenerConfig {
            syn_backlog: 1024,
            accept_backlog: 128,
            syn_cookies: true,
            secret,
            tcp: TcpConfig::default(),
        }
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const MAX_BACKLOG: usize = 1 << 20;
        for (field, n) in [
            ("syn_backlog", self.syn_backlog),
            ("accept_backlog", self.accept_backlog),
        ] {
            if n > MAX_BACKLOG {
                return Err(ConfigError {
                    field,
                    problem: format!("{n} is above {MAX_BACKLOG}"),
                });
            }
        }
        if self.accept_backlog == 0 {
            return Err(ConfigError {
                field: "accept_backlog",
                problem: "must be positive".into(),
            });
        }
        self.tcp.validate()
    }
}

/// What to do with a SYN.
#[derive(Debug, PartialEq, Eq)]
pub enum SynOutcome {
    /// Create a half-open connection with this initial sequence number.
    HalfOpen { iss: u32 },
    /// A SYN-ACK carrying a cookie was written to the caller's buffer: send these many bytes.
    Cookie { len: usize },
    /// Dropped (already counted in [`Listener::counters`]).
    Dropped(crate::stats::TcpDrop),
}

/// One listening socket's admission state.
#[derive(Debug)]
pub struct Listener {
    local: SocketAddrV4,
    config: ListenerConfig,
    half_open: usize,
    accept_queued: usize,
    /// The last time a cookie went out: ACKs are checked as cookies only while one may still
    /// be valid, so that a stray ACK is not counted as a forged cookie.
    last_cookie: Option<Nanos>,
    counters: TcpCounters,
}

impl Listener {
    /// `config` must be valid ([`ListenerConfig::validate`]).
    pub fn new(local: SocketAddrV4, config: ListenerConfig) -> Listener {
        Listener {
            local,
            config,
            half_open: 0,
            accept_queued: 0,
            last_cookie: None,
            counters: TcpCounters::default(),
        }
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn config(&self) -> &ListenerConfig {
        &self.config
    }

    /// Half-open connections the caller holds for this listener.
    pub fn half_open(&self) -> usize {
        self.half_open
    }

    /// Connections waiting for `accept`.
    pub fn accept_queued(&self) -> usize {
        self.accept_queued
    }

    /// What the listener did: `passive_opens` (half-open connections and accepted cookies),
    /// `syn_cookies_sent`, `syn_cookies_accepted`, and drops by reason in `conns.drops`.
    pub fn counters(&self) -> &TcpCounters {
        &self.counters
    }

    fn dropped(&mut self, why: TcpDrop) -> SynOutcome {
        self.counters.drop(why);
        SynOutcome::Dropped(why)
    }

    /// A SYN (without ACK) arrived from `remote`; a cookie SYN-ACK is written to `out`, which
    /// must hold at least [`MAX_HEADER`] bytes.
    pub fn on_syn(
        &mut self,
        now: Nanos,
        remote: SocketAddrV4,
        syn: &TcpSegment<'_>,
        out: &mut [u8],
    ) -> SynOutcome {
        let flags = syn.flags();
        if !flags.contains(TcpFlags::SYN)
            || flags.contains(TcpFlags::ACK)
            || flags.contains(TcpFlags::RST)
            || flags.contains(TcpFlags::FIN)
        {
            return self.dropped(TcpDrop::BadFlags);
        }
        // Nobody could accept the connection: let the peer retry later (as Linux does).
        if self.accept_queued >= self.config.accept_backlog {
            return self.dropped(TcpDrop::AcceptQueueFull);
        }
        let ends = Endpoints {
            local: self.local,
            remote,
        };
        if self.half_open < self.config.syn_backlog {
            self.half_open += 1;
            self.counters.passive_opens += 1;
            return SynOutcome::HalfOpen {
                iss: initial_sequence(&self.config.secret, now, ends),
            };
        }
        if !self.config.syn_cookies {
            return self.dropped(TcpDrop::SynBacklogFull);
        }
        let len = self.cookie_syn_ack(now, ends, syn, out);
        self.last_cookie = Some(now);
        self.counters.syn_cookies_sent += 1;
        SynOutcome::Cookie { len }
    }

    /// Writes the SYN-ACK answering `syn` statelessly.
    fn cookie_syn_ack(
        &self,
        now: Nanos,
        ends: Endpoints,
        syn: &TcpSegment<'_>,
        out: &mut [u8],
    ) -> usize {
        assert!(
            out.len() >= MAX_HEADER,
            "a SYN-ACK needs a buffer of {MAX_HEADER} bytes"
        );
        let tcp = &self.config.tcp;
        let mut peer_mss = 536;
        let mut peer_wscale = None;
        let mut peer_sack = false;
        let mut peer_ts = None;
        for opt in syn.options() {
            match opt {
                TcpOption::Mss(m) => peer_mss = m,
                TcpOption::WindowScale(s) => peer_wscale = Some(s),
                TcpOption::SackPermitted => peer_sack = true,
                TcpOption::Timestamps(t) => peer_ts = Some(t),
                _ => {}
            }
        }
        let mss_index = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0);
        let cookie = make_cookie(
            &self.config.secret,
            ends,
            syn.seq(),
            cookie_period(now),
            mss_index as u32,
        );
        // Window scaling and SACK survive only in the TSval the peer echoes.
        let mut options = TcpOptionSet {
            mss: Some(tcp.mss),
            ..TcpOptionSet::default()
        };
        if let (Some(ts), true) = (peer_ts, tcp.timestamps) {
            let mut bits = TS_NO_WSCALE;
            if let (Some(_), true) = (peer_wscale, tcp.window_scaling) {
                let ours = window_scale_for(tcp.recv_buffer);
                options.window_scale = Some(ours);
                bits = u32::from(peer_wscale.unwrap_or(0).min(14));
            }
            if peer_sack && tcp.sack {
                options.sack_permitted = true;
                bits |= TS_SACK_BIT;
            }
            options.timestamps = Some(Timestamps {
                tsval: cookie_tsval(now, bits),
                tsecr: ts.tsval,
            });
        }
        let header = TcpHeader {
            src_port: ends.local.port(),
            dst_port: ends.remote.port(),
            seq: cookie,
            ack: syn.seq().wrapping_add(1),
            flags: TcpFlags::SYN | TcpFlags::ACK,
            window: tcp.recv_buffer.min(usize::from(u16::MAX)) as u16,
            urgent: 0,
            options: TcpOptionSet {
                sack: SackList::EMPTY,
                ..options
            },
        };
        header
            .emit(out, 0, *ends.local.ip(), *ends.remote.ip())
            .expect("a SYN-ACK without payload fits in MAX_HEADER bytes")
    }

    /// Whether a bare ACK may complete a handshake here: a cookie sent recently enough to be
    /// valid. (Handshakes the listener keeps state for are connections in SYN-RECEIVED.)
    pub fn needs_prompt_acks(&self, now: Nanos) -> bool {
        self.last_cookie
            .is_some_and(|t| now.saturating_sub(t) < COOKIE_PERIOD * Nanos::from(COOKIE_MAX_AGE))
    }

    /// An ACK arrived for no connection: if it completes a valid cookie, the handshake.
    ///
    /// The caller then creates the connection with [`crate::Connection::from_handshake`] (with
    /// `config().tcp`), offers it to [`Listener::push_accept`], and passes the same segment to
    /// its [`crate::Connection::on_segment`] so that data riding on the ACK is not lost. `None`
    /// means the segment is no cookie of ours (counted as [`TcpDrop::BadCookie`] when cookies
    /// were recently sent): the caller answers it with a RST ([`crate::reset::reset_for`]).
    pub fn on_ack(
        &mut self,
        now: Nanos,
        ends: Endpoints,
        ack: &TcpSegment<'_>,
    ) -> Option<Handshake> {
        let flags = ack.flags();
        if !flags.contains(TcpFlags::ACK)
            || flags.contains(TcpFlags::SYN)
            || flags.contains(TcpFlags::RST)
            || ends.local.port() != self.local.port()
        {
            return None;
        }
        if !self.needs_prompt_acks(now) {
            return None;
        }
        let handshake = self.check_cookie(now, ends, ack);
        match handshake {
            Some(_) => {
                self.counters.syn_cookies_accepted += 1;
                self.counters.passive_opens += 1;
            }
            None => self.counters.drop(TcpDrop::BadCookie),
        }
        handshake
    }

    fn check_cookie(&self, now: Nanos, ends: Endpoints, ack: &TcpSegment<'_>) -> Option<Handshake> {
        let tcp = &self.config.tcp;
        let iss = ack.ack().wrapping_sub(1);
        let irs = ack.seq().wrapping_sub(1);
        let mss_index = check_cookie(&self.config.secret, ends, irs, cookie_period(now), iss)?;
        let ts = ack.options().find_map(|o| match o {
            TcpOption::Timestamps(t) => Some(t),
            _ => None,
        });
        let mut peer_window_scale = None;
        let mut sack_permitted = false;
        let mut ts_recent = None;
        if let (Some(ts), true) = (ts, tcp.timestamps) {
            let bits = ts.tsecr & TS_OPTION_MASK;
            let wscale = bits & 0xf;
            if wscale != TS_NO_WSCALE {
                // A shift we would never have encoded, or an option we do not offer: forged.
                if wscale > 14 || !tcp.window_scaling {
                    return None;
                }
                peer_window_scale = Some(wscale as u8);
            }
            sack_permitted = bits & TS_SACK_BIT != 0;
            if sack_permitted && !tcp.sack {
                return None;
            }
            if bits & !(0xf | TS_SACK_BIT) != 0 {
                return None;
            }
            ts_recent = Some(ts.tsval);
        }
        Some(Handshake {
            ends,
            iss,
            irs,
            peer_mss: COOKIE_MSS[mss_index as usize],
            peer_window_scale,
            local_window_scale: window_scale_for(tcp.recv_buffer),
            sack_permitted,
            ts_recent,
            peer_window: ack.window(),
        })
    }

    /// A half-open connection from [`SynOutcome::HalfOpen`] left SYN-RECEIVED (either way).
    pub fn half_open_done(&mut self) {
        debug_assert!(
            self.half_open > 0,
            "more half-open connections done than made"
        );
        self.half_open = self.half_open.saturating_sub(1);
    }

    /// An established connection was queued for `accept`; false when the queue is full (the
    /// caller then resets it and counts [`crate::TcpDrop::AcceptQueueFull`]).
    pub fn push_accept(&mut self) -> bool {
        if self.accept_queued >= self.config.accept_backlog {
            return false;
        }
        self.accept_queued += 1;
        true
    }

    /// `accept` took a connection from the queue.
    pub fn pop_accept(&mut self) {
        debug_assert!(self.accept_queued > 0, "accept on an empty queue");
        self.accept_queued = self.accept_queued.saturating_sub(1);
    }
}

/// An RFC 6528 initial sequence number for `ends`: a keyed hash of the 4-tuple plus a 4 µs
/// clock. Active opens use it too.
pub fn initial_sequence(secret: &[u8; 16], now: Nanos, ends: Endpoints) -> u32 {
    let clock = (now / ISN_TICK) as u32;
    clock.wrapping_add(tuple_hash(secret, ends, 0, 0, 0) as u32)
}

fn cookie_period(now: Nanos) -> u32 {
    (now / COOKIE_PERIOD) as u32
}

/// A TSval from the timestamp clock with `bits` in its low bits, never above the clock (the
/// connection's later TSvals must not go backwards, or the peer's PAWS drops them).
fn cookie_tsval(now: Nanos, bits: u32) -> u32 {
    let clock = timestamp_clock(now);
    let tsval = (clock & !TS_OPTION_MASK) | bits;
    if (tsval.wrapping_sub(clock) as i32) > 0 {
        tsval.wrapping_sub(1 << TS_OPTION_BITS)
    } else {
        tsval
    }
}

fn make_cookie(secret: &[u8; 16], ends: Endpoints, peer_isn: u32, period: u32, data: u32) -> u32 {
    let h1 = tuple_hash(secret, ends, 0, 0, 1) as u32;
    h1.wrapping_add(peer_isn)
        .wrapping_add(period << COOKIE_BITS)
        .wrapping_add(cookie_low(secret, ends, peer_isn, period, data))
}

/// The cookie's low bits: a MAC of everything the cookie stands for, then the MSS index.
fn cookie_low(secret: &[u8; 16], ends: Endpoints, peer_isn: u32, period: u32, data: u32) -> u32 {
    let mac = tuple_hash(secret, ends, period, peer_isn, 2 + data) as u32;
    ((mac << COOKIE_DATA_BITS) | data) & COOKIE_MASK
}

/// The MSS index of a cookie issued for `ends` and `peer_isn` at most `COOKIE_MAX_AGE - 1`
/// periods before `period`, or `None`.
fn check_cookie(
    secret: &[u8; 16],
    ends: Endpoints,
    peer_isn: u32,
    period: u32,
    cookie: u32,
) -> Option<u32> {
    let h1 = tuple_hash(secret, ends, 0, 0, 1) as u32;
    let rest = cookie.wrapping_sub(h1.wrapping_add(peer_isn));
    let age = period.wrapping_sub(rest >> COOKIE_BITS) & (u32::MAX >> COOKIE_BITS);
    if age >= COOKIE_MAX_AGE {
        return None;
    }
    let issued = period.wrapping_sub(age);
    let data = rest & ((1 << COOKIE_DATA_BITS) - 1);
    (rest & COOKIE_MASK == cookie_low(secret, ends, peer_isn, issued, data)).then_some(data)
}

/// SipHash-2-4 of the 4-tuple, two words and a domain separator under `secret`.
fn tuple_hash(secret: &[u8; 16], ends: Endpoints, counter: u32, isn: u32, domain: u32) -> u64 {
    let mut msg = [0u8; 24];
    msg[0..4].copy_from_slice(&ends.local.ip().octets());
    msg[4..8].copy_from_slice(&ends.remote.ip().octets());
    msg[8..10].copy_from_slice(&ends.local.port().to_be_bytes());
    msg[10..12].copy_from_slice(&ends.remote.port().to_be_bytes());
    msg[12..16].copy_from_slice(&counter.to_le_bytes());
    msg[16..20].copy_from_slice(&isn.to_le_bytes());
    msg[20..24].copy_from_slice(&domain.to_le_bytes());
    siphash24(secret, &msg)
}

/// SipHash-2-4 (Aumasson and Bernstein, 2012), the keyed hash Linux uses for the same purpose.
fn siphash24(key: &[u8; 16], msg: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[0..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes"));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    fn compress(m: u64, v: &mut [u64; 4]) {
        v[3] ^= m;
        round(v);
        round(v);
        v[0] ^= m;
    }
    let mut chunks = msg.chunks_exact(8);
    for c in &mut chunks {
        compress(u64::from_le_bytes(c.try_into().expect("8 bytes")), &mut v);
    }
    let mut last = [0u8; 8];
    let tail = chunks.remainder();
    last[..tail.len()].copy_from_slice(tail);
    last[7] = msg.len() as u8;
    compress(u64::from_le_bytes(last), &mut v);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests;
