//! The zones a server serves and the answer to one query, as RFC 1034 section 4.3.2 lays it
//! out: find the zone, walk down to the name, stop at a zone cut with a referral, follow
//! CNAMEs, synthesize from a wildcard (RFC 4592) when the name does not exist, and say NODATA
//! or NXDOMAIN with the zone's SOA otherwise.
//!
//! Where the RFCs leave a choice, answers follow NSD 4.6 with `minimal-responses: yes`, the
//! server the differential test compares against: no NS set in the authority section of a
//! positive answer and no additional records except glue for a referral; `ANY` answered with
//! one record set (RFC 8482); Extended DNS Errors (RFC 8914) on refusals.
//!
//! Answering allocates nothing: the query is read into buffers on the stack and the response
//! written into the caller's buffer.

use std::collections::HashMap;

use crate::hash::BuildFxHasher;
use crate::name::{self, MAX_NAME, Name};
use crate::wire::{
    HEADER_LEN, Header, UDP_MAX_PAYLOAD, UDP_MIN_PAYLOAD, class, ede, edns_opt, flag, opcode,
    rcode, rtype, u16_at,
};
use crate::writer::{Full, Writer};
use crate::zone::{Node, RRset, Zone};

/// How the query came, which bounds the response: UDP by the client's payload size, TCP by
/// the 2-byte length prefix (RFC 7766).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Why a message got no response at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Shorter than a header: there is no ID to answer to.
    TooShort,
    /// QR set: a response, which answering could turn into a loop between two servers.
    NotAQuery,
}

/// What became of one message, for the server's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Dropped(Dropped),
    Answered {
        /// The full 12-bit RCODE (16 is BADVERS).
        rcode: u16,
        truncated: bool,
    },
}

/// The EDNS0 OPT record of a query (RFC 6891).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Edns {
    payload: u16,
    version: u8,
    dnssec_ok: bool,
}

/// The server's zones, looked up by origin.
#[derive(Default)]
pub struct Catalog {
    zones: HashMap<Box<[u8]>, Zone, BuildFxHasher>,
}

/// The longest CNAME chain followed inside the server's zones.
const MAX_CHAIN: usize = 16;
/// An OPT record without options: root owner, type, class, TTL, data length.
const OPT_LEN: usize = 11;
/// An Extended DNS Error option without extra text.
const EDE_LEN: usize = 6;

impl Catalog {
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// Adds a zone; a second zone with the same origin is refused.
    pub fn insert(&mut self, zone: Zone) -> Result<(), String> {
        let key: Box<[u8]> = zone.origin().wire().into();
        if self.zones.contains_key(&key) {
            return Err(format!("zone {} given twice", zone.origin()));
        }
        self.zones.insert(key, zone);
        Ok(())
    }

    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.zones.values()
    }

    pub fn zone(&self, origin: &Name) -> Option<&Zone> {
        self.zones.get(origin.lowercased().wire())
    }

    /// The zone that answers for `lower`: the one with the longest origin above or at it,
    /// except that a DS query at a zone's apex belongs to the parent zone when the server has
    /// it (RFC 4035 section 3.1.4.1).
    fn find_zone(&self, lower: &[u8], qtype: u16) -> Option<&Zone> {
        let mut found: Option<&Zone> = None;
        for s in name::suffixes(lower) {
            if let Some(z) = self.zones.get(s) {
                if found.is_some() {
                    return Some(z);
                }
                if qtype == rtype::DS && s.len() == lower.len() {
                    found = Some(z);
                    continue;
                }
                return Some(z);
            }
        }
        found
    }

    /// Answers the message `msg` into `out` and returns the response's length (0 when
    /// dropped) and what happened. `out` holds the largest response: 65535 bytes for TCP,
    /// [`UDP_MAX_PAYLOAD`] for UDP.
    pub fn respond(&self, msg: &[u8], transport: Transport, out: &mut [u8]) -> (usize, Outcome) {
        let Some(h) = Header::parse(msg) else {
            return (0, Outcome::Dropped(Dropped::TooShort));
        };
        if h.has(flag::QR) {
            return (0, Outcome::Dropped(Dropped::NotAQuery));
        }
        let w = Writer::new(out, usize::from(u16::MAX));
        let opcode_bits = h.flags & 0x7800;
        let mut orig = [0u8; MAX_NAME];
        // The query's flags come back with NOTIMP (AD aside, which only a validator may set),
        // as NSD sends them. A NOTIFY's question is read first, as a secondary server would.
        if h.opcode() != opcode::QUERY && h.opcode() != opcode::NOTIFY {
            return error(w, h.id, h.flags & !flag::AD, rcode::NOTIMP);
        }
        let Some((qlen, qtype, qclass, qend)) = read_question(msg, &mut orig) else {
            return error(w, h.id, (h.flags & flag::RD) | opcode_bits, rcode::FORMERR);
        };
        if h.opcode() == opcode::NOTIFY {
            return error(w, h.id, h.flags & !flag::AD, rcode::NOTIMP);
        }
        if h.qdcount != 1 {
            return error(w, h.id, opcode_bits, rcode::FORMERR);
        }
        if h.ancount != 0 || h.nscount != 0 {
            return error(w, h.id, (h.flags & flag::RD) | opcode_bits, rcode::FORMERR);
        }
        let edns = match h.arcount {
            0 => None,
            1 => match read_opt(msg, qend) {
                Some(e) => Some(e),
                None => {
                    return error(w, h.id, (h.flags & flag::RD) | opcode_bits, rcode::FORMERR);
                }
            },
            _ => return error(w, h.id, (h.flags & flag::RD) | opcode_bits, rcode::FORMERR),
        };
        let maxlen = match (transport, edns) {
            (Transport::Tcp, _) => usize::from(u16::MAX),
            (Transport::Udp, Some(e)) if e.payload > UDP_MIN_PAYLOAD => {
                usize::from(e.payload.min(UDP_MAX_PAYLOAD))
            }
            (Transport::Udp, _) => usize::from(UDP_MIN_PAYLOAD),
        };
        let flags = flag::QR | (h.flags & flag::RD) | opcode_bits;
        if let Some(e) = edns
            && e.version != 0
        {
            // The DO bit of a version this server does not speak means nothing to it.
            let plain = Some(Edns {
                dnssec_ok: false,
                ..e
            });
            let mut a = Answer::start(w, &orig[..qlen], qtype, qclass, maxlen, plain);
            a.ext_rcode = 1;
            // Refused before the query is read as one: its flags come back as they came
            // (AD aside, and the RCODE bits replaced), as NSD sends them.
            return a.finish(h.id, (h.flags & !flag::AD & !0xf) | flag::QR);
        }
        if qclass != class::IN && qclass != class::ANY {
            if qclass == class::CH {
                let mut a = Answer::start(w, &orig[..qlen], qtype, qclass, maxlen, edns);
                a.rcode = rcode::REFUSED;
                a.ede = Some(ede::NOT_SUPPORTED);
                return a.finish(h.id, flags);
            }
            let (len, o) = error(w, h.id, flags, rcode::REFUSED);
            return with_opt(out, len, o, edns, Some(ede::NOT_SUPPORTED));
        }
        let mut lower = orig;
        name::lowercase_in_place(&mut lower[..qlen]);
        let mut a = Answer::start(w, &orig[..qlen], qtype, qclass, maxlen, edns);
        self.resolve(&mut a, &orig[..qlen], &lower[..qlen]);
        a.finish(h.id, flags)
    }

    fn resolve(&self, a: &mut Answer<'_>, orig: &[u8], lower: &[u8]) {
        let mut name = [0u8; MAX_NAME];
        name[..lower.len()].copy_from_slice(lower);
        let mut name_len = lower.len();
        // The owner as it will be written: the query's own spelling, then each CNAME's target
        // as its zone spells it; compression makes either point back into the message.
        let mut owner = [0u8; MAX_NAME];
        owner[..orig.len()].copy_from_slice(orig);
        let mut seen: [(*const RRset, u64); MAX_CHAIN] = [(std::ptr::null(), 0); MAX_CHAIN];
        let mut cnames = 0usize;
        loop {
            let lname = &name[..name_len];
            let Some(zone) = self.find_zone(lname, a.qtype) else {
                if cnames == 0 {
                    a.rcode = rcode::REFUSED;
                    a.ede = Some(ede::NOT_AUTHORITATIVE);
                }
                return;
            };
            a.aa = a.qclass != class::ANY;
            let own = &owner[..name_len];
            match lookup(zone, lname, a.qtype) {
                Found::Cut { at, node } => {
                    a.aa = cnames > 0;
                    let cut_owner = &own[at..];
                    let ns = node.get(rtype::NS).expect("a cut has NS");
                    a.add(Section::Authority, cut_owner, ns, None);
                    a.addresses_of(zone, ns);
                    return;
                }
                Found::Node(node) => {
                    let rrset = if a.qtype == rtype::ANY {
                        node.rrsets.first()
                    } else {
                        node.get(a.qtype)
                    };
                    if let Some(set) = rrset {
                        // Addresses of name servers go along even in minimal responses, as
                        // NSD sends them: a resolver needs them next.
                        if a.add(Section::Answer, own, set, None) && set.rtype == rtype::NS {
                            a.addresses_of(zone, set);
                        }
                        return;
                    }
                    let Some(cname) = node.get(rtype::CNAME) else {
                        a.negative(zone, false);
                        return;
                    };
                    let key = (cname as *const RRset, fx(lname));
                    if cnames >= MAX_CHAIN || seen[..cnames].contains(&key) {
                        return;
                    }
                    seen[cnames] = key;
                    cnames += 1;
                    if !a.add(Section::Answer, own, cname, None) {
                        return;
                    }
                    let target = &cname.rdatas[0];
                    name_len = target.len();
                    owner[..name_len].copy_from_slice(target);
                    name[..name_len].copy_from_slice(target);
                    name::lowercase_in_place(&mut name[..name_len]);
                }
                Found::Nothing => {
                    a.negative(zone, true);
                    return;
                }
            }
        }
    }
}

fn fx(b: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = crate::hash::FxHasher::default();
    h.write(b);
    h.finish()
}

enum Found<'z> {
    /// A zone cut at or above the name: refer the client to the child's servers.
    Cut { at: usize, node: &'z Node },
    /// The name, or the wildcard that stands for it.
    Node(&'z Node),
    /// Neither the name nor a wildcard for it exists.
    Nothing,
}

/// Walks down from the apex of `zone` towards `lower`, one label at a time, so that the first
/// cut on the way wins and the deepest existing name is the closest encloser.
fn lookup<'z>(zone: &'z Zone, lower: &[u8], qtype: u16) -> Found<'z> {
    let mut starts = [0u8; 128];
    let mut n = 0;
    for s in name::suffixes(lower) {
        starts[n] = (lower.len() - s.len()) as u8;
        n += 1;
    }
    // starts[n - 1] is the root; the apex has the zone's own label count.
    let apex_labels = zone.origin().label_count();
    let qlabels = n - 1;
    let mut encloser = zone.apex();
    let mut encloser_at = lower.len() - zone.origin().wire().len();
    for k in apex_labels + 1..=qlabels {
        let at = usize::from(starts[qlabels - k]);
        let Some(node) = zone.node(&lower[at..]) else {
            return wildcard(zone, &lower[encloser_at..]).map_or(Found::Nothing, Found::Node);
        };
        if node.get(rtype::NS).is_some() && !(k == qlabels && qtype == rtype::DS) {
            return Found::Cut { at, node };
        }
        encloser = node;
        encloser_at = at;
    }
    Found::Node(encloser)
}

/// The wildcard child of the closest encloser, if the zone has one (RFC 4592 section 3.3.1).
fn wildcard<'z>(zone: &'z Zone, encloser: &[u8]) -> Option<&'z Node> {
    if encloser.len() + 2 > MAX_NAME {
        return None;
    }
    let mut w = [0u8; MAX_NAME];
    w[0] = 1;
    w[1] = b'*';
    w[2..2 + encloser.len()].copy_from_slice(encloser);
    zone.node(&w[..2 + encloser.len()])
}

/// Reads the first question: its name (no compression pointers: a question has nothing
/// before it to point at), type and class. Returns the name's length and the end.
fn read_question(msg: &[u8], out: &mut [u8; MAX_NAME]) -> Option<(usize, u16, u16, usize)> {
    let mut at = HEADER_LEN;
    let mut len = 0;
    loop {
        let l = usize::from(*msg.get(at)?);
        if l & 0xc0 != 0 {
            return None;
        }
        if len + l + 1 > MAX_NAME {
            return None;
        }
        let label = msg.get(at..at + 1 + l)?;
        out[len..len + 1 + l].copy_from_slice(label);
        len += 1 + l;
        at += 1 + l;
        if l == 0 {
            break;
        }
    }
    let qtype = u16_at(msg, at)?;
    let qclass = u16_at(msg, at + 2)?;
    Some((len, qtype, qclass, at + 4))
}

/// Reads the one additional record, which must be an OPT with the root as owner and options
/// that fill its data exactly.
fn read_opt(msg: &[u8], at: usize) -> Option<Edns> {
    if *msg.get(at)? != 0 || u16_at(msg, at + 1)? != rtype::OPT {
        return None;
    }
    let payload = u16_at(msg, at + 3)?;
    let ttl = msg.get(at + 5..at + 9)?;
    let rdlen = usize::from(u16_at(msg, at + 9)?);
    let mut opts = msg.get(at + 11..at + 11 + rdlen)?;
    while !opts.is_empty() {
        let olen = usize::from(u16_at(opts, 2)?);
        opts = opts.get(4 + olen..)?;
    }
    Some(Edns {
        payload,
        version: ttl[1],
        dnssec_ok: ttl[2] & 0x80 != 0,
    })
}

/// A response of the header alone: `flags` with QR and `rc` set, every count zero.
fn error(mut w: Writer<'_>, id: u16, flags: u16, rc: u8) -> (usize, Outcome) {
    let h = Header {
        id,
        flags: (flags | flag::QR) & !0xf | u16::from(rc),
        ..Header::default()
    };
    h.write(w.header_bytes());
    (
        HEADER_LEN,
        Outcome::Answered {
            rcode: u16::from(rc),
            truncated: false,
        },
    )
}

/// Appends an OPT record to a header-only response when the query had EDNS.
fn with_opt(
    out: &mut [u8],
    len: usize,
    o: Outcome,
    edns: Option<Edns>,
    ede: Option<u16>,
) -> (usize, Outcome) {
    let Some(e) = edns else { return (len, o) };
    let mut w = Writer::new(out, usize::from(u16::MAX));
    w.rollback_to_len(len);
    if write_opt(&mut w, 0, e.dnssec_ok, ede).is_ok() {
        set_count(&mut w, 10, 1);
    }
    (w.len(), o)
}

fn set_count(w: &mut Writer<'_>, at: usize, v: u16) {
    w.header_bytes()[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn write_opt(
    w: &mut Writer<'_>,
    ext_rcode: u8,
    dnssec_ok: bool,
    ede: Option<u16>,
) -> Result<(), Full> {
    w.put(&[0])?;
    w.put_u16(rtype::OPT)?;
    w.put_u16(UDP_MAX_PAYLOAD)?;
    w.put(&[ext_rcode, 0, if dnssec_ok { 0x80 } else { 0 }, 0])?;
    match ede {
        Some(code) => {
            w.put_u16(6)?;
            w.put_u16(edns_opt::EDE)?;
            w.put_u16(2)?;
            w.put_u16(code)
        }
        None => w.put_u16(0),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Answer,
    Authority,
    Additional,
}

/// A response being written: the sections' counts and flags so far.
struct Answer<'w> {
    w: Writer<'w>,
    qtype: u16,
    qclass: u16,
    maxlen: usize,
    edns: Option<Edns>,
    counts: [u16; 3],
    aa: bool,
    tc: bool,
    rcode: u8,
    /// The upper eight bits of a 12-bit RCODE, which travel in the OPT record (1 with a
    /// header RCODE of 0 is BADVERS).
    ext_rcode: u8,
    ede: Option<u16>,
}

impl<'w> Answer<'w> {
    fn start(
        mut w: Writer<'w>,
        qname: &[u8],
        qtype: u16,
        qclass: u16,
        maxlen: usize,
        edns: Option<Edns>,
    ) -> Answer<'w> {
        // Room for the OPT record (and an Extended DNS Error in it) is kept back, so that
        // the records never crowd it out.
        let reserve = if edns.is_some() { OPT_LEN + EDE_LEN } else { 0 };
        w.set_limit(maxlen - reserve);
        // A question can exceed 512 bytes less the reserve only by being malformed, which it
        // is not here: at most 12 + 255 + 4.
        let wrote = w
            .name(qname)
            .and_then(|()| w.put_u16(qtype))
            .and_then(|()| w.put_u16(qclass));
        debug_assert!(wrote.is_ok());
        Answer {
            w,
            qtype,
            qclass,
            maxlen,
            edns,
            counts: [0; 3],
            aa: false,
            tc: false,
            rcode: rcode::NOERROR,
            ext_rcode: 0,
            ede: None,
        }
    }

    /// Adds a whole record set, or none of it. An answer or authority set that does not fit
    /// truncates the response (TC) and ends it; an additional one is left out quietly, as
    /// RFC 2181 section 9 allows. `ttl` replaces the records' own TTLs. Returns whether it was
    /// added.
    fn add(&mut self, s: Section, owner: &[u8], set: &RRset, ttl: Option<u32>) -> bool {
        if self.tc {
            return false;
        }
        let m = self.w.mark();
        for (d, &own_ttl) in set.rdatas.iter().zip(&set.ttls) {
            if self
                .w
                .record(owner, set.rtype, ttl.unwrap_or(own_ttl), d)
                .is_err()
            {
                self.w.rollback(m);
                if s != Section::Additional {
                    self.tc = true;
                }
                return false;
            }
        }
        self.counts[s as usize] += set.rdatas.len() as u16;
        true
    }

    /// The A, then the AAAA records the zone has for each name server of `ns`: glue below a
    /// cut, or addresses elsewhere in the zone.
    fn addresses_of(&mut self, zone: &Zone, ns: &RRset) {
        for t in [rtype::A, rtype::AAAA] {
            for target in ns.rdatas.iter() {
                let mut tl = [0u8; MAX_NAME];
                tl[..target.len()].copy_from_slice(target);
                name::lowercase_in_place(&mut tl[..target.len()]);
                if let Some(set) = zone.node(&tl[..target.len()]).and_then(|n| n.get(t)) {
                    self.add(Section::Additional, target, set, None);
                }
            }
        }
    }

    /// NXDOMAIN or NODATA: the zone's SOA in the authority section with the negative TTL
    /// (RFC 2308 sections 3 and 5), except to class ANY, which no zone is authoritative for.
    fn negative(&mut self, zone: &Zone, nxdomain: bool) {
        if nxdomain {
            self.rcode = rcode::NXDOMAIN;
        }
        if self.qclass != class::ANY {
            self.add(
                Section::Authority,
                zone.origin().wire(),
                zone.soa(),
                Some(zone.negative_ttl()),
            );
        }
    }

    fn finish(mut self, id: u16, flags: u16) -> (usize, Outcome) {
        let mut f = flags | u16::from(self.rcode);
        if self.aa {
            f |= flag::AA;
        }
        if self.tc {
            f |= flag::TC;
        }
        self.w.set_limit(self.maxlen);
        let mut arcount = self.counts[2];
        if let Some(e) = self.edns {
            let ok = write_opt(&mut self.w, self.ext_rcode, e.dnssec_ok, self.ede).is_ok();
            debug_assert!(ok, "the OPT record has its reserve");
            arcount += 1;
        }
        Header {
            id,
            flags: f,
            qdcount: 1,
            ancount: self.counts[0],
            nscount: self.counts[1],
            arcount,
        }
        .write(self.w.header_bytes());
        (
            self.w.len(),
            Outcome::Answered {
                rcode: (u16::from(self.ext_rcode) << 4) | u16::from(self.rcode),
                truncated: self.tc,
            },
        )
    }
}
