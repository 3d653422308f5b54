//! Key-value workloads in the manner of mutilate, and the checks that make every reply count
//! only if it is right.
//!
//! A [`KvWorkload`] says how many keys there are, how long keys and values are (a
//! [`SizeDist`]: fixed, uniform, or the generalized-extreme-value and generalized-Pareto shapes
//! that mutilate uses for Facebook's ETC pool), what fraction of requests are gets, and how
//! popular each key is ([`Popularity`]: uniform or Zipf). Everything is derived from the seed:
//!
//! - request `id`'s operation and key come from a generator seeded by `(seed, id)`, so any
//!   thread can work out any request's operation without a shared stream;
//! - key `k`'s text and length come from `(seed, k)`;
//! - the value that the `v`-th set of key `k` stores comes from `(seed, k, v)`, and is stored
//!   with memcached's 32-bit `flags` = `v`.
//!
//! So a get's reply is checked without keeping any value: its flags name the version, the
//! version must be one the check allows ([`Expect`]), and the data must be exactly that
//! version's bytes. A wrong reply is counted in [`KvChecks`] and is not a latency sample.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::memcache::{self, Element};
use crate::schedule::{ScheduleError, SplitMix64, open_unit};

/// Sizes of keys or values, in bytes, before clamping to the workload's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SizeDist {
    Fixed {
        bytes: u32,
    },
    /// Uniform over `min..=max`.
    Uniform {
        min: u32,
        max: u32,
    },
    /// Generalized extreme value (mutilate's `gev:LOC,SCALE,SHAPE`).
    Gev {
        loc: f64,
        scale: f64,
        shape: f64,
    },
    /// Generalized Pareto (mutilate's `gpareto:LOC,SCALE,SHAPE`).
    GPareto {
        loc: f64,
        scale: f64,
        shape: f64,
    },
}

impl SizeDist {
    /// mutilate's `fb_key`: key sizes of Facebook's ETC pool (Atikoglu et al., SIGMETRICS 2012).
    pub const FB_KEY: SizeDist = SizeDist::Gev {
        loc: 30.7984,
        scale: 8.20449,
        shape: 0.078688,
    };
    /// mutilate's `fb_value`: value sizes of the ETC pool.
    pub const FB_VALUE: SizeDist = SizeDist::GPareto {
        loc: 15.0,
        scale: 214.476,
        shape: 0.348238,
    };

    pub fn validate(&self) -> Result<(), ScheduleError> {
        let ok = match *self {
            SizeDist::Fixed { .. } => true,
            SizeDist::Uniform { min, max } => min <= max,
            SizeDist::Gev { loc, scale, shape } | SizeDist::GPareto { loc, scale, shape } => {
                loc.is_finite() && scale.is_finite() && scale > 0.0 && shape.is_finite()
            }
        };
        if ok {
            Ok(())
        } else {
            Err(ScheduleError::new(
                "size",
                self,
                "min <= max, or a finite location and shape and a positive scale",
            ))
        }
    }

    /// A size for the uniform draw `u` in (0, 1), by inverse CDF, rounded to whole bytes and
    /// clamped to `min..=max`.
    pub fn size(&self, u: f64, min: u32, max: u32) -> u32 {
        let x = match *self {
            SizeDist::Fixed { bytes } => bytes as f64,
            SizeDist::Uniform { min, max } => min as f64 + (u * (max - min + 1) as f64).floor(),
            SizeDist::Gev { loc, scale, shape } => {
                let t = -u.ln();
                if shape == 0.0 {
                    loc - scale * t.ln()
                } else {
                    loc + scale * (t.powf(-shape) - 1.0) / shape
                }
            }
            SizeDist::GPareto { loc, scale, shape } => {
                if shape == 0.0 {
                    loc - scale * u.ln()
                } else {
                    loc + scale * (u.powf(-shape) - 1.0) / shape
                }
            }
        };
        // `as` saturates (and sends NaN to 0), then the clamp applies the bounds.
        (x.round() as u32).clamp(min, max)
    }
}

impl fmt::Display for SizeDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SizeDist::Fixed { bytes } => write!(f, "fixed:{bytes}"),
            SizeDist::Uniform { min, max } => write!(f, "uniform:{min}:{max}"),
            SizeDist::Gev { loc, scale, shape } => write!(f, "gev:{loc}:{scale}:{shape}"),
            SizeDist::GPareto { loc, scale, shape } => {
                write!(f, "gpareto:{loc}:{scale}:{shape}")
            }
        }
    }
}

impl FromStr for SizeDist {
    type Err = ScheduleError;

    /// `fixed:N` (or just `N`), `uniform:MAX` (1 to MAX), `uniform:MIN:MAX`,
    /// `gev:LOC:SCALE:SHAPE`, `gpareto:LOC:SCALE:SHAPE`, `fb_key` or `fb_value`. Commas may
    /// stand for colons, as in mutilate.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const EXPECTED: &str = "`fixed:N`, `uniform:[MIN:]MAX`, `gev:LOC:SCALE:SHAPE`, \
                                `gpareto:LOC:SCALE:SHAPE`, `fb_key` or `fb_value`";
        let norm = s.trim().replace(',', ":");
        let parts: Vec<&str> = norm.split(':').collect();
        let bad = || ScheduleError::new("size", s, EXPECTED);
        let int = |t: &str| t.parse::<u32>().map_err(|_| bad());
        let float = |t: &str| t.parse::<f64>().map_err(|_| bad());
        let dist = match parts.as_slice() {
            ["fb_key"] => SizeDist::FB_KEY,
            ["fb_value"] => SizeDist::FB_VALUE,
            [n] => SizeDist::Fixed { bytes: int(n)? },
            ["fixed", n] => SizeDist::Fixed { bytes: int(n)? },
            ["uniform", max] => SizeDist::Uniform {
                min: 1,
                max: int(max)?,
            },
            ["uniform", min, max] => SizeDist::Uniform {
                min: int(min)?,
                max: int(max)?,
            },
            ["gev", l, sc, sh] => SizeDist::Gev {
                loc: float(l)?,
                scale: float(sc)?,
                shape: float(sh)?,
            },
            ["gpareto", l, sc, sh] => SizeDist::GPareto {
                loc: float(l)?,
                scale: float(sc)?,
                shape: float(sh)?,
            },
            _ => return Err(bad()),
        };
        dist.validate()?;
        Ok(dist)
    }
}

/// How often each key is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Popularity {
    Uniform,
    /// Key of rank `r` (from 1) with probability proportional to `1 / r^s`; rank 1 is key 0.
    Zipf {
        s: f64,
    },
}

impl fmt::Display for Popularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Popularity::Uniform => f.write_str("uniform"),
            Popularity::Zipf { s } => write!(f, "zipf:{s}"),
        }
    }
}

impl FromStr for Popularity {
    type Err = ScheduleError;

    /// `uniform` or `zipf:S` (S > 0, e.g. `zipf:0.99`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ScheduleError::new("popularity", s, "`uniform` or `zipf:S` with S > 0");
        match s.trim().split_once(':') {
            None if s.trim() == "uniform" => Ok(Popularity::Uniform),
            Some(("zipf", e)) => match e.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => Ok(Popularity::Zipf { s }),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// Most keys a workload may have (a Zipf table takes 8 bytes per key).
pub const MAX_KEYS: u64 = 100_000_000;

/// What a key-value load asks for. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvWorkload {
    pub keys: u64,
    pub key_size: SizeDist,
    pub value_size: SizeDist,
    /// Largest value stored; sizes drawn above it are clamped to it.
    pub max_value: u32,
    /// Fraction of requests that are gets; the rest are sets.
    pub get_fraction: f64,
    pub popularity: Popularity,
    pub seed: u64,
}

impl KvWorkload {
    /// 10,000 keys of 30 bytes with 200-byte values, 90% gets, uniform popularity.
    pub fn new(keys: u64) -> Self {
        KvWorkload {
            keys,
            key_size: SizeDist::Fixed { bytes: 30 },
            value_size: SizeDist::Fixed { bytes: 200 },
            max_value: 1 << 20,
            get_fraction: 0.9,
            popularity: Popularity::Uniform,
            seed: 1,
        }
    }

    pub fn validate(&self) -> Result<(), ScheduleError> {
        if !(1..=MAX_KEYS).contains(&self.keys) {
            return Err(ScheduleError::new(
                "keys",
                self.keys,
                format!("1 to {MAX_KEYS}"),
            ));
        }
        self.key_size.validate()?;
        self.value_size.validate()?;
        if !(1..=memcache::MAX_VALUE_LEN as u32).contains(&self.max_value) {
            return Err(ScheduleError::new(
                "max_value",
                self.max_value,
                "1 byte to 1 GiB",
            ));
        }
        if !(0.0..=1.0).contains(&self.get_fraction) {
            return Err(ScheduleError::new(
                "get_fraction",
                self.get_fraction,
                "a fraction in [0, 1]",
            ));
        }
        if let Popularity::Zipf { s } = self.popularity
            && !(s.is_finite() && s > 0.0)
        {
            return Err(ScheduleError::new("popularity", s, "zipf:S with S > 0"));
        }
        Ok(())
    }
}

/// One request's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get { key: u64 },
    Set { key: u64 },
}

impl Op {
    pub fn key(&self) -> u64 {
        match *self {
            Op::Get { key } | Op::Set { key } => key,
        }
    }
}

/// A [`KvWorkload`] ready to draw from: the Zipf table, if any, is built once.
#[derive(Clone, Debug)]
pub struct Keyspace {
    pub workload: KvWorkload,
    /// Cumulative probabilities of key ranks, for Zipf popularity.
    zipf_cdf: Option<Vec<f64>>,
}

/// A generator seeded from a few words.
fn rng_of(words: &[u64]) -> fastrand::Rng {
    let mut mix = SplitMix64(0x6b76_6c6f_6164_0000);
    let mut seed = mix.next();
    for &w in words {
        mix.0 ^= w;
        seed ^= mix.next();
    }
    fastrand::Rng::with_seed(seed)
}

impl Keyspace {
    /// Validate the workload first.
    pub fn new(workload: KvWorkload) -> Self {
        let zipf_cdf = match workload.popularity {
            Popularity::Uniform => None,
            Popularity::Zipf { s } => {
                let mut acc = 0.0;
                let mut cdf: Vec<f64> = (1..=workload.keys)
                    .map(|r| {
                        acc += (r as f64).powf(-s);
                        acc
                    })
                    .collect();
                for c in &mut cdf {
                    *c /= acc;
                }
                Some(cdf)
            }
        };
        Keyspace { workload, zipf_cdf }
    }

    /// The operation of request `id`.
    pub fn op(&self, id: u64) -> Op {
        let mut rng = rng_of(&[self.workload.seed, 1, id]);
        let get = open_unit(&mut rng) < self.workload.get_fraction;
        let key = match &self.zipf_cdf {
            None => rng.u64(..self.workload.keys),
            Some(cdf) => {
                let u = open_unit(&mut rng);
                (cdf.partition_point(|&c| c < u) as u64).min(self.workload.keys - 1)
            }
        };
        if get {
            Op::Get { key }
        } else {
            Op::Set { key }
        }
    }

    /// Writes key `k`'s text into `out` (cleared first): its decimal number, zero-padded to
    /// its drawn length (never shorter than the number, never over 250 bytes), so keys are
    /// distinct.
    pub fn key_into(&self, k: u64, out: &mut Vec<u8>) {
        out.clear();
        let mut rng = rng_of(&[self.workload.seed, 2, k]);
        let len = self
            .workload
            .key_size
            .size(open_unit(&mut rng), 1, memcache::MAX_KEY_LEN as u32) as usize;
        // The decimal digits, written from the end of a stack buffer (no allocation: this runs
        // for every request and every reply checked).
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = k;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let digits = &digits[at..];
        out.resize(len.saturating_sub(digits.len()), b'0');
        out.extend_from_slice(digits);
    }

    /// Length of the value of key `k`'s version `v`.
    pub fn value_len(&self, k: u64, v: u32) -> usize {
        let mut rng = rng_of(&[self.workload.seed, 3, k, u64::from(v)]);
        self.workload
            .value_size
            .size(open_unit(&mut rng), 1, self.workload.max_value) as usize
    }

    /// Writes the value of key `k`'s version `v` into `out` (cleared first): printable bytes
    /// from a generator seeded by `(seed, k, v)`.
    pub fn value_into(&self, k: u64, v: u32, out: &mut Vec<u8>) {
        let len = self.value_len(k, v);
        out.clear();
        out.resize(len, 0);
        let mut rng = rng_of(&[self.workload.seed, 4, k, u64::from(v)]);
        // Eight bytes per draw, each mapped by a table rather than a division per byte: this
        // runs for every set sent and every value checked.
        for chunk in out.chunks_mut(8) {
            let word = rng.u64(..).to_le_bytes();
            for (byte, random) in chunk.iter_mut().zip(word) {
                *byte = PRINTABLE[random as usize];
            }
        }
    }
}

/// Byte `b` of a value's random stream becomes `PRINTABLE[b]`: one of the 94 printable ASCII
/// characters from `!`.
const PRINTABLE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b'!' + (b % 94) as u8;
        b += 1;
    }
    table
};

/// Which versions a get's value may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// Requests on a key are executed in the order they were sent (one TCP connection per
    /// key, which memcached serves in order): a get must see the last set sent before it.
    InOrder,
    /// Requests may be reordered (UDP datagrams, which memcached's threads take from one
    /// socket concurrently): any version this generator had sent a set for.
    Unordered,
}

/// The latest version of each key this generator has sent a set for (0: never set).
#[derive(Clone, Debug)]
pub struct Versions {
    issued: Vec<u32>,
}

impl Versions {
    pub fn new(keys: u64) -> Self {
        Versions {
            issued: vec![0; usize::try_from(keys).expect("key table fits in memory")],
        }
    }

    /// The version the next set of key `k` stores.
    pub fn next_set(&mut self, k: u64) -> u32 {
        let v = &mut self.issued[k as usize];
        *v = v.wrapping_add(1).max(1);
        *v
    }

    pub fn latest(&self, k: u64) -> u32 {
        self.issued[k as usize]
    }

    /// What a get of key `k` sent now may return.
    pub fn expect_get(&self, k: u64, ordering: Ordering) -> Expect {
        let hi = self.latest(k);
        let lo = match ordering {
            Ordering::InOrder => hi,
            Ordering::Unordered => hi.min(1),
        };
        Expect::Get { key: k, lo, hi }
    }
}

/// What the reply to one request must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A miss, or key `key`'s value of a version in `lo..=hi` (0 meaning never set: then only
    /// a miss is right).
    Get { key: u64, lo: u32, hi: u32 },
    /// `STORED`.
    Set { key: u64, version: u32 },
}

/// What a reply turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Hit,
    Miss,
    Stored,
    /// A value with the wrong key, flags, length or bytes, or two values for one get.
    WrongValue,
    /// A well-formed reply that is not a right answer to the request (say `NOT_STORED` to a
    /// set, or `STORED` to a get).
    WrongReply,
    ClientError,
    ServerError,
}

impl Verdict {
    /// Whether the reply is right, and so a latency sample.
    pub fn is_correct(&self) -> bool {
        matches!(self, Verdict::Hit | Verdict::Miss | Verdict::Stored)
    }
}

/// Counts of replies by verdict, and of requests by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvChecks {
    pub gets: u64,
    pub sets: u64,
    pub preloaded: u64,
    pub hits: u64,
    pub misses: u64,
    pub stored: u64,
    pub wrong_value: u64,
    pub wrong_reply: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    /// Replies that could not be parsed (the connection is closed after one).
    pub unparsable: u64,
    /// Connections that failed or were closed by the server while requests were in flight.
    pub connection_failures: u64,
}

impl KvChecks {
    pub fn count(&mut self, v: Verdict) {
        match v {
            Verdict::Hit => self.hits += 1,
            Verdict::Miss => self.misses += 1,
            Verdict::Stored => self.stored += 1,
            Verdict::WrongValue => self.wrong_value += 1,
            Verdict::WrongReply => self.wrong_reply += 1,
            Verdict::ClientError => self.client_errors += 1,
            Verdict::ServerError => self.server_errors += 1,
        }
    }

    pub fn count_op(&mut self, op: &Expect) {
        match op {
            Expect::Get { .. } => self.gets += 1,
            Expect::Set { .. } => self.sets += 1,
        }
    }

    /// Replies that were wrong, plus unparsable streams and failed connections.
    pub fn errors(&self) -> u64 {
        self.wrong_value
            + self.wrong_reply
            + self.client_errors
            + self.server_errors
            + self.unparsable
            + self.connection_failures
    }

    pub fn correct(&self) -> u64 {
        self.hits + self.misses + self.stored
    }

    pub fn merge(&mut self, o: &KvChecks) {
        self.gets += o.gets;
        self.sets += o.sets;
        self.preloaded += o.preloaded;
        self.hits += o.hits;
        self.misses += o.misses;
        self.stored += o.stored;
        self.wrong_value += o.wrong_value;
        self.wrong_reply += o.wrong_reply;
        self.client_errors += o.client_errors;
        self.server_errors += o.server_errors;
        self.unparsable += o.unparsable;
        self.connection_failures += o.connection_failures;
    }
}

impl fmt::Display for KvChecks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gets {} sets {} (preloaded {}) | hits {} misses {} stored {} | errors {} (wrong value {}, wrong reply {}, client {}, server {}, unparsable {}, connection {})",
            self.gets,
            self.sets,
            self.preloaded,
            self.hits,
            self.misses,
            self.stored,
            self.errors(),
            self.wrong_value,
            self.wrong_reply,
            self.client_errors,
            self.server_errors,
            self.unparsable,
            self.connection_failures
        )
    }
}

/// Encodes the request for `op` into `out` (appended) and returns what its reply must be.
/// `key` and `value` are scratch buffers.
pub fn encode_request(
    space: &Keyspace,
    versions: &mut Versions,
    ordering: Ordering,
    op: Op,
    out: &mut Vec<u8>,
    key: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> Expect {
    space.key_into(op.key(), key);
    match op {
        Op::Get { key: k } => {
            memcache::encode_get(out, key).expect("generated keys are valid");
            versions.expect_get(k, ordering)
        }
        Op::Set { key: k } => {
            let version = versions.next_set(k);
            space.value_into(k, version, value);
            memcache::encode_set(out, key, version, 0, value).expect("generated keys are valid");
            Expect::Set { key: k, version }
        }
    }
}

/// Follows one reply through its elements: a get's values and `END`, or any other reply's one
/// element.
#[derive(Clone, Debug, Default)]
pub struct ReplyCheck {
    /// A get's value seen so far: `Some(true)` right, `Some(false)` wrong.
    value: Option<bool>,
    key: Vec<u8>,
    expected: Vec<u8>,
}

impl ReplyCheck {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next element of the reply to `expect`; returns the verdict once the reply is
    /// complete.
    pub fn on_element(
        &mut self,
        space: &Keyspace,
        expect: &Expect,
        element: &Element<'_>,
    ) -> Option<Verdict> {
        let verdict = match (expect, element) {
            (
                Expect::Get { key: k, lo, hi },
                Element::Value {
                    key, flags, data, ..
                },
            ) => {
                let right = self.value.is_none()
                    && *flags >= (*lo).max(1)
                    && *flags <= *hi
                    && {
                        space.key_into(*k, &mut self.key);
                        *key == self.key.as_slice()
                    }
                    && data.len() == space.value_len(*k, *flags)
                    && {
                        space.value_into(*k, *flags, &mut self.expected);
                        *data == self.expected.as_slice()
                    };
                self.value = Some(right && self.value.is_none());
                return None;
            }
            (Expect::Get { .. }, Element::End) => match self.value {
                None => Verdict::Miss,
                Some(true) => Verdict::Hit,
                Some(false) => Verdict::WrongValue,
            },
            (Expect::Set { .. }, Element::Stored) => Verdict::Stored,
            (_, Element::ClientError(_)) => Verdict::ClientError,
            (_, Element::ServerError(_)) => Verdict::ServerError,
            _ => Verdict::WrongReply,
        };
        self.value = None;
        Some(verdict)
    }

    /// Checks a whole reply (a UDP message): its elements must be exactly one reply.
    pub fn check_whole(&mut self, space: &Keyspace, expect: &Expect, reply: &[u8]) -> Verdict {
        let mut at = 0;
        self.value = None;
        loop {
            match memcache::parse_element(&reply[at..]) {
                Ok(Some((element, len))) => {
                    at += len;
                    if let Some(v) = self.on_element(space, expect, &element) {
                        return if at == reply.len() {
                            v
                        } else {
                            Verdict::WrongReply
                        };
                    }
                }
                Ok(None) | Err(_) => {
                    self.value = None;
                    return Verdict::WrongReply;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_size(d: SizeDist, max: u32) -> f64 {
        let mut rng = fastrand::Rng::with_seed(3);
        let n = 200_000;
        (0..n)
            .map(|_| d.size(open_unit(&mut rng), 1, max) as f64)
            .sum::<f64>()
            / n as f64
    }

    #[test]
    fn size_distributions_have_their_shapes() {
        assert_eq!(SizeDist::Fixed { bytes: 7 }.size(0.3, 1, 100), 7);
        assert_eq!(SizeDist::Fixed { bytes: 700 }.size(0.3, 1, 100), 100);
        let m = mean_size(SizeDist::Uniform { min: 10, max: 20 }, 1000);
        assert!((m - 15.0).abs() < 0.1, "{m}");
        // mutilate's fb_key: GEV(30.8, 8.2, 0.079) has mean loc + scale (Γ(1-ξ) - 1)/ξ ≈ 36.22.
        let m = mean_size(SizeDist::FB_KEY, 250);
        assert!((m - 36.22).abs() < 0.3, "{m}");
        // fb_value: GPareto mean loc + scale / (1 - ξ) ≈ 344 (untruncated); clamping the far
        // tail at 1 MiB barely moves it.
        let m = mean_size(SizeDist::FB_VALUE, 1 << 20);
        assert!((m - 344.0).abs() < 15.0, "{m}");
        // The median of a GPareto is loc + scale (2^ξ - 1)/ξ.
        let med = SizeDist::FB_VALUE.size(0.5, 1, u32::MAX);
        assert_eq!(
            med,
            (15.0 + 214.476 * (2f64.powf(0.348238) - 1.0) / 0.348238).round() as u32
        );
        for d in [
            SizeDist::FB_KEY,
            SizeDist::FB_VALUE,
            SizeDist::Uniform { min: 1, max: 3 },
            SizeDist::Fixed { bytes: 3 },
        ] {
            assert_eq!(d.to_string().parse::<SizeDist>().unwrap(), d);
        }
        assert_eq!("fb_key".parse::<SizeDist>().unwrap(), SizeDist::FB_KEY);
        assert_eq!(
            "gev:1,2,0.5".parse::<SizeDist>().unwrap(),
            SizeDist::Gev {
                loc: 1.0,
                scale: 2.0,
                shape: 0.5
            }
        );
        assert_eq!(
            "uniform:9".parse::<SizeDist>().unwrap(),
            SizeDist::Uniform { min: 1, max: 9 }
        );
        for bad in [
            "",
            "uniform:9:3",
            "gev:1:0:1",
            "gpareto:1:2",
            "fixed:-1",
            "x",
        ] {
            assert!(bad.parse::<SizeDist>().is_err(), "{bad}");
        }
    }

    #[test]
    fn operations_follow_the_get_fraction_and_popularity() {
        let mut w = KvWorkload::new(1000);
        w.get_fraction = 0.75;
        let space = Keyspace::new(w);
        let n = 100_000u64;
        let ops: Vec<Op> = (0..n).map(|id| space.op(id)).collect();
        assert_eq!(ops, (0..n).map(|id| space.op(id)).collect::<Vec<_>>());
        let gets = ops.iter().filter(|o| matches!(o, Op::Get { .. })).count();
        assert!((gets as f64 / n as f64 - 0.75).abs() < 0.01, "{gets}");
        let mut counts = vec![0u64; 1000];
        for o in &ops {
            counts[o.key() as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (50..=160).contains(&c)), "uniform");

        w.popularity = Popularity::Zipf { s: 1.0 };
        let space = Keyspace::new(w);
        let mut counts = vec![0u64; 1000];
        for id in 0..n {
            counts[space.op(id).key() as usize] += 1;
        }
        // P(rank 1) = 1 / H(1000) ≈ 0.1336; rank 2 half of that.
        let p1 = counts[0] as f64 / n as f64;
        assert!((p1 - 0.1336).abs() < 0.005, "{p1}");
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 2.0).abs() < 0.15, "{ratio}");
        assert!("zipf:0".parse::<Popularity>().is_err());
        assert_eq!(
            "zipf:0.99".parse::<Popularity>().unwrap(),
            Popularity::Zipf { s: 0.99 }
        );
    }

    #[test]
    fn keys_and_values_are_the_ones_their_definition_gives() {
        // The definitions in the documentation, written the slow way: the zero-padded decimal
        // number, and `'!' + byte % 94` over the generator's bytes.
        let mut w = KvWorkload::new(1_000_000);
        w.key_size = SizeDist::Uniform { min: 1, max: 12 };
        w.value_size = SizeDist::Uniform { min: 1, max: 70 };
        let space = Keyspace::new(w);
        let (mut key, mut value) = (Vec::new(), Vec::new());
        for k in [0u64, 7, 10, 99_999, 999_999] {
            space.key_into(k, &mut key);
            let digits = k.to_string();
            assert!(key.ends_with(digits.as_bytes()), "{key:?}");
            assert!(key[..key.len() - digits.len()].iter().all(|&b| b == b'0'));
            for v in 1..20 {
                space.value_into(k, v, &mut value);
                let mut rng = rng_of(&[w.seed, 4, k, u64::from(v)]);
                let mut slow = Vec::new();
                while slow.len() < space.value_len(k, v) {
                    let word = rng.u64(..).to_le_bytes();
                    let take = (space.value_len(k, v) - slow.len()).min(8);
                    slow.extend(word[..take].iter().map(|b| b'!' + b % 94));
                }
                assert_eq!(value, slow, "key {k} version {v}");
            }
        }
    }

    #[test]
    fn keys_are_distinct_valid_and_sized() {
        let mut w = KvWorkload::new(20_000);
        w.key_size = SizeDist::Uniform { min: 1, max: 8 };
        let space = Keyspace::new(w);
        let mut seen = std::collections::HashSet::new();
        let mut key = Vec::new();
        for k in 0..20_000 {
            space.key_into(k, &mut key);
            assert!(key.len() <= 8 && key.len() >= k.to_string().len());
            assert!(memcache::encode_get(&mut Vec::new(), &key).is_ok());
            assert!(seen.insert(key.clone()));
        }
    }

    fn reply_for(space: &Keyspace, k: u64, v: u32) -> Vec<u8> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        space.key_into(k, &mut key);
        space.value_into(k, v, &mut value);
        let mut r = format!(
            "VALUE {} {v} {}\r\n",
            String::from_utf8(key).unwrap(),
            value.len()
        )
        .into_bytes();
        r.extend_from_slice(&value);
        r.extend_from_slice(b"\r\nEND\r\n");
        r
    }

    #[test]
    fn replies_are_checked_against_the_request() {
        let mut w = KvWorkload::new(100);
        w.value_size = SizeDist::FB_VALUE;
        let space = Keyspace::new(w);
        let mut versions = Versions::new(100);
        let (mut out, mut key, mut value) = (Vec::new(), Vec::new(), Vec::new());
        let mut check = ReplyCheck::new();
        let get = |versions: &Versions| versions.expect_get(5, Ordering::InOrder);
        // Never set: only a miss is right.
        assert_eq!(
            check.check_whole(&space, &get(&versions), b"END\r\n"),
            Verdict::Miss
        );
        let e = encode_request(
            &space,
            &mut versions,
            Ordering::InOrder,
            Op::Set { key: 5 },
            &mut out,
            &mut key,
            &mut value,
        );
        assert_eq!(e, Expect::Set { key: 5, version: 1 });
        assert!(out.starts_with(b"set "));
        assert_eq!(
            check.check_whole(&space, &e, b"STORED\r\n"),
            Verdict::Stored
        );
        assert_eq!(
            check.check_whole(&space, &e, b"NOT_STORED\r\n"),
            Verdict::WrongReply
        );
        assert_eq!(
            check.check_whole(&space, &e, b"SERVER_ERROR out of memory\r\n"),
            Verdict::ServerError
        );
        versions.next_set(5);
        let g = get(&versions);
        assert_eq!(
            g,
            Expect::Get {
                key: 5,
                lo: 2,
                hi: 2
            }
        );
        assert_eq!(
            check.check_whole(&space, &g, &reply_for(&space, 5, 2)),
            Verdict::Hit
        );
        // A stale version, another key's value, a changed byte, a miss.
        assert_eq!(
            check.check_whole(&space, &g, &reply_for(&space, 5, 1)),
            Verdict::WrongValue
        );
        assert_eq!(
            check.check_whole(&space, &g, &reply_for(&space, 6, 2)),
            Verdict::WrongValue
        );
        let mut bad = reply_for(&space, 5, 2);
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert_eq!(check.check_whole(&space, &g, &bad), Verdict::WrongValue);
        assert_eq!(check.check_whole(&space, &g, b"END\r\n"), Verdict::Miss);
        // Two values for one get; a reply with bytes after it.
        let mut two = reply_for(&space, 5, 2);
        two.truncate(two.len() - 5);
        two.extend_from_slice(&reply_for(&space, 5, 2));
        assert_eq!(check.check_whole(&space, &g, &two), Verdict::WrongValue);
        let mut extra = reply_for(&space, 5, 2);
        extra.extend_from_slice(b"END\r\n");
        assert_eq!(check.check_whole(&space, &g, &extra), Verdict::WrongReply);
        // Unordered: an older version is acceptable, a never-sent one is not.
        let u = versions.expect_get(5, Ordering::Unordered);
        assert_eq!(
            check.check_whole(&space, &u, &reply_for(&space, 5, 1)),
            Verdict::Hit
        );
        assert_eq!(
            check.check_whole(&space, &u, &reply_for(&space, 5, 3)),
            Verdict::WrongValue
        );
        assert_eq!(
            check.check_whole(&space, &g, b"STORED\r\n"),
            Verdict::WrongReply
        );
    }
}
