//! DNS over UDP for the open-loop generators: a query mix read from a file in dnsperf's
//! format (`NAME TYPE` per line), queries built from it, and responses matched to their
//! requests by DNS ID and checked against the question they answer. [`run`] plays a schedule
//! from Linux sockets.
//!
//! Each socket has its own 16-bit ID space: request `n` of a socket takes ID `n mod 65536`,
//! and a table per socket keeps, under each ID, the request it stands for and when that was
//! scheduled. The sender writes an entry before sending; the receiver reads it when the
//! response comes. An ID comes round again after 65,536 requests on one socket, so a
//! response later than that is taken for the newer request only if it carries the same
//! question; otherwise it counts as malformed, and its request as lost.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use corral_affinity::pin_current_thread;
use corral_dns_proto::Name;
use corral_dns_proto::wire::type_from_name;
use serde::{Deserialize, Serialize};

use crate::client::{
    Clock, RunEnd, monotonic_ns, open_udp_sockets, poll_until_end, sender_mark, wait_until,
};
use crate::recorder::{
    AdherencePolicy, Outcome, ResponseRecorder, RunInfo, SendRecorder, Summary, summarize,
};
use crate::schedule::ScheduleConfig;

/// Questions to ask, in wire form (name, type, class IN), each picked in turn by a request's
/// id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMix {
    questions: Vec<Vec<u8>>,
}

impl QueryMix {
    /// Reads dnsperf's query-file format: `NAME TYPE` per line (names absolute whether or not
    /// they end in a dot; types as mnemonics or `TYPEnnn`), blank lines and `;` or `#`
    /// comments skipped. The error names the line.
    pub fn parse(text: &str) -> Result<QueryMix, String> {
        let mut questions = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(ty), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("line {}: expected NAME TYPE, got {line:?}", i + 1));
            };
            let absolute = if name.ends_with('.') {
                name.to_string()
            } else {
                format!("{name}.")
            };
            let name = Name::parse(&absolute, None).map_err(|e| format!("line {}: {e}", i + 1))?;
            let ty = type_from_name(ty)
                .ok_or_else(|| format!("line {}: unknown record type {ty:?}", i + 1))?;
            let mut q = name.wire().to_vec();
            q.extend_from_slice(&ty.to_be_bytes());
            q.extend_from_slice(&1u16.to_be_bytes());
            questions.push(q);
        }
        if questions.is_empty() {
            return Err("no queries in the file".into());
        }
        Ok(QueryMix { questions })
    }

    pub fn len(&self) -> usize {
        self.questions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.questions.is_empty()
    }

    /// The question request `id` asks: the mix in order, round and round, as dnsperf reads
    /// its file.
    pub fn question(&self, id: u64) -> &[u8] {
        &self.questions[(id % self.questions.len() as u64) as usize]
    }

    /// Writes the query with `dns_id` for request `id` into `out`, with an OPT record
    /// offering `edns` bytes if given (none otherwise, as dnsperf without `-e` or `-D`);
    /// returns its length.
    pub fn encode(&self, id: u64, dns_id: u16, edns: Option<u16>, out: &mut Vec<u8>) -> usize {
        out.resize(self.query_len(id, edns), 0);
        self.write(id, dns_id, edns, out)
            .expect("the buffer was sized for the query")
    }

    /// Bytes of the query for request `id`.
    pub fn query_len(&self, id: u64, edns: Option<u16>) -> usize {
        HEADER_LEN + self.question(id).len() + if edns.is_some() { OPT_LEN } else { 0 }
    }

    /// [`encode`](QueryMix::encode) into the start of a buffer (a frame's payload, say),
    /// without allocating; `None` if the query does not fit.
    #[inline]
    pub fn write(&self, id: u64, dns_id: u16, edns: Option<u16>, out: &mut [u8]) -> Option<usize> {
        let question = self.question(id);
        let len = self.query_len(id, edns);
        let out = out.get_mut(..len)?;
        let (header, rest) = out.split_at_mut(HEADER_LEN);
        header[..2].copy_from_slice(&dns_id.to_be_bytes());
        // A plain query, RD clear: an authoritative server is being asked. One question, and
        // one additional record if there is an OPT.
        header[2..].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
        let (q, opt) = rest.split_at_mut(question.len());
        q.copy_from_slice(question);
        if let Some(size) = edns {
            // Root owner, type OPT, the payload size as its class, no extended RCODE or
            // flags, no options.
            opt[..3].copy_from_slice(&[0, 0, 41]);
            opt[3..5].copy_from_slice(&size.to_be_bytes());
            opt[5..].fill(0);
        }
        Some(len)
    }
}

/// A DNS header's bytes.
pub const HEADER_LEN: usize = 12;

/// An OPT record's bytes, with no options.
const OPT_LEN: usize = 11;

/// What a response said, once matched to its query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// An answer to the question asked, with this RCODE and whether TC was set.
    Answer { rcode: u8, truncated: bool },
    /// Not a response to that question (too short, QR clear, another question).
    Mismatch,
}

/// Checks `response` against the `question` its ID stands for (names without case, as DNS
/// compares them).
pub fn check(response: &[u8], question: &[u8]) -> Checked {
    let end = HEADER_LEN + question.len();
    if response.len() < end || response[2] & 0x80 == 0 || response[4..6] != [0, 1] {
        return Checked::Mismatch;
    }
    if !response[12..end].eq_ignore_ascii_case(question) {
        return Checked::Mismatch;
    }
    Checked::Answer {
        rcode: response[3] & 0xf,
        truncated: response[2] & 0x02 != 0,
    }
}

/// The DNS ID of a datagram, if it is long enough to have one.
#[inline]
pub fn response_id(datagram: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(datagram.get(..2)?.try_into().ok()?))
}

/// A datagram that answers the question of the request its DNS ID stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub request: u64,
    pub scheduled_ns: u64,
    pub rcode: u8,
    pub truncated: bool,
}

/// Takes a datagram from the server: `lookup` gives the request (and its scheduled send time)
/// that its DNS ID stands for, if any, and the datagram is checked against that request's
/// question from `mix`. Returns the reply if the datagram answers it (to be recorded as its
/// response, and counted with [`DnsCounts::answered`] if it is the request's first in time);
/// `None`, counted in `counts` as mismatched, if it matches nothing (to be recorded as
/// malformed). Any bytes at all are taken: nothing here panics.
#[inline]
pub fn match_response(
    datagram: &[u8],
    mix: &QueryMix,
    counts: &mut DnsCounts,
    lookup: impl FnOnce(u16) -> Option<(u64, u64)>,
) -> Option<Reply> {
    let matched = response_id(datagram)
        .and_then(lookup)
        .and_then(
            |(request, scheduled_ns)| match check(datagram, mix.question(request)) {
                Checked::Answer { rcode, truncated } => Some(Reply {
                    request,
                    scheduled_ns,
                    rcode,
                    truncated,
                }),
                Checked::Mismatch => None,
            },
        );
    if matched.is_none() {
        counts.mismatched += 1;
    }
    matched
}

/// The requests' answers by RCODE, each request's first answer in time only (a duplicate or
/// late answer shows in the response recorder's counts), and the datagrams that were not
/// answers to their question.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsCounts {
    pub noerror: u64,
    pub nxdomain: u64,
    pub refused: u64,
    pub servfail: u64,
    pub other_rcode: u64,
    pub truncated: u64,
    /// Datagrams whose ID had no query outstanding or whose question was not that query's.
    pub mismatched: u64,
}

impl DnsCounts {
    /// Counts `reply`, the first answer in time to its request.
    pub fn answered(&mut self, reply: &Reply) {
        self.truncated += u64::from(reply.truncated);
        *match reply.rcode {
            0 => &mut self.noerror,
            2 => &mut self.servfail,
            3 => &mut self.nxdomain,
            5 => &mut self.refused,
            _ => &mut self.other_rcode,
        } += 1;
    }

    /// Answers counted by RCODE: the requests answered.
    pub fn answers(&self) -> u64 {
        self.noerror + self.nxdomain + self.refused + self.servfail + self.other_rcode
    }
}

/// Per socket and DNS ID: the request (id + 1; 0 for none) and its scheduled send time.
struct Outstanding {
    request: Vec<AtomicU64>,
    scheduled_ns: Vec<AtomicU64>,
}

impl Outstanding {
    fn new() -> Outstanding {
        let slots = || (0..1 << 16).map(|_| AtomicU64::new(0)).collect();
        Outstanding {
            request: slots(),
            scheduled_ns: slots(),
        }
    }

    fn put(&self, dns_id: u16, request: u64, scheduled_ns: u64) {
        let i = usize::from(dns_id);
        self.scheduled_ns[i].store(scheduled_ns, Ordering::Relaxed);
        // Released after the time, so that a reader that sees the request sees its time.
        self.request[i].store(request + 1, Ordering::Release);
    }

    fn get(&self, dns_id: u16) -> Option<(u64, u64)> {
        let i = usize::from(dns_id);
        let r = self.request[i].load(Ordering::Acquire);
        (r != 0).then(|| (r - 1, self.scheduled_ns[i].load(Ordering::Relaxed)))
    }
}

/// A DNS run from Linux sockets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DnsClientConfig {
    pub server: SocketAddr,
    pub schedule: ScheduleConfig,
    /// Sockets (source ports) to spread clients over.
    pub flows: usize,
    /// EDNS UDP payload size to offer, if any.
    pub edns: Option<u16>,
    pub cpu: Option<usize>,
    pub rx_cpu: Option<usize>,
    pub grace_ns: u64,
    pub policy: AdherencePolicy,
}

/// A DNS run's results: the usual summary (latency from each request's scheduled send time)
/// and the responses by RCODE.
#[derive(Clone, Debug, Serialize)]
pub struct DnsReport {
    pub summary: Summary,
    pub counts: DnsCounts,
}

impl std::fmt::Display for DnsCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "noerror {} nxdomain {} refused {} servfail {} other {} truncated {} mismatched {}",
            self.noerror,
            self.nxdomain,
            self.refused,
            self.servfail,
            self.other_rcode,
            self.truncated,
            self.mismatched
        )
    }
}

impl std::fmt::Display for DnsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\ndns: {}", self.summary, self.counts)
    }
}

/// Plays `cfg.schedule` with questions from `mix`: the sender never waits for a response, and
/// latency counts from each query's scheduled send time.
pub fn run(cfg: &DnsClientConfig, mix: &QueryMix) -> io::Result<DnsReport> {
    cfg.schedule
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if cfg.flows == 0 || cfg.flows > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid flows = {}: expected 1 to 4096 sockets", cfg.flows),
        ));
    }
    let sockets = open_udp_sockets(cfg.server, cfg.flows)?;
    let tables: Arc<Vec<Outstanding>> =
        Arc::new((0..cfg.flows).map(|_| Outstanding::new()).collect());
    let clock = Clock {
        epoch_ns: monotonic_ns() + Duration::from_millis(20).as_nanos() as u64,
    };
    let done = Arc::new(AtomicU64::new(0));
    let rx = {
        let fds: Vec<RawFd> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        let (done, tables, cfg, mix) = (done.clone(), tables.clone(), cfg.clone(), mix.clone());
        thread::Builder::new()
            .name("loadgen-dns-rx".into())
            .spawn(move || receive(&cfg, &mix, &fds, &tables, clock, &done))?
    };
    let sent = send(cfg, mix, &sockets, &tables, clock);
    done.store(sender_mark(&sent), Ordering::Release);
    let received = rx
        .join()
        .map_err(|_| io::Error::other("receiver thread panicked"))?;
    let (send_rec, scheduled) = sent?;
    let (resp_rec, counts) = received?;
    Ok(DnsReport {
        summary: summarize(
            &RunInfo::of(&cfg.schedule, scheduled),
            &send_rec,
            &resp_rec,
            &cfg.policy,
        ),
        counts,
    })
}

fn send(
    cfg: &DnsClientConfig,
    mix: &QueryMix,
    sockets: &[UdpSocket],
    tables: &[Outstanding],
    clock: Clock,
) -> io::Result<(SendRecorder, u64)> {
    if let Some(cpu) = cfg.cpu {
        pin_current_thread(cpu)?;
    }
    let apart = matches!((cfg.cpu, cfg.rx_cpu), (Some(a), Some(b)) if a != b);
    let mut rec = SendRecorder::new();
    let mut next_id = vec![0u16; sockets.len()];
    let mut buf = Vec::with_capacity(512);
    let mut scheduled = 0;
    for req in cfg.schedule.iter() {
        scheduled += 1;
        let flow = req.client as usize % sockets.len();
        let dns_id = next_id[flow];
        next_id[flow] = dns_id.wrapping_add(1);
        mix.encode(req.id, dns_id, cfg.edns, &mut buf);
        tables[flow].put(dns_id, req.id, req.send_ns);
        let now = wait_until(&clock, req.send_ns, !apart);
        match sockets[flow].send(&buf) {
            Ok(_) => rec.record_sent(req.send_ns, now),
            Err(_) => rec.record_send_error(req.send_ns, now),
        }
    }
    Ok((rec, scheduled))
}

fn receive(
    cfg: &DnsClientConfig,
    mix: &QueryMix,
    fds: &[RawFd],
    tables: &[Outstanding],
    clock: Clock,
    done: &AtomicU64,
) -> io::Result<(ResponseRecorder, DnsCounts)> {
    if let Some(cpu) = cfg.rx_cpu {
        pin_current_thread(cpu)?;
    }
    let mut rec = ResponseRecorder::for_schedule(&cfg.schedule);
    let mut counts = DnsCounts::default();
    let mut buf = vec![0u8; 65536];
    let end = RunEnd {
        done,
        duration_ns: cfg.schedule.duration_ns,
        grace_ns: cfg.grace_ns,
    };
    poll_until_end(fds, clock, &end, &mut rec, |flow, fd, rec| {
        loop {
            // SAFETY: buf is valid for writes of its length; MSG_DONTWAIT leaves the socket
            // blocking for the sender, which shares it.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(()),
                    Some(libc::ECONNREFUSED) | Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            let now = clock.now_ns();
            let d = &buf[..n as usize];
            match match_response(d, mix, &mut counts, |id| tables[flow].get(id)) {
                Some(reply) => {
                    let outcome = rec.record_response(reply.request, reply.scheduled_ns, now);
                    if let Outcome::Matched { .. } = outcome {
                        counts.answered(&reply);
                    }
                }
                None => rec.record_malformed(),
            }
        }
    })?;
    Ok((rec, counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dnsperf_file_reads_and_makes_queries() {
        let mix = QueryMix::parse(
            "; a comment\nwww.example.com A\n\n# another\nexample.com. mx\nx.example.com TYPE65\n",
        )
        .unwrap();
        assert_eq!(mix.len(), 3);
        let mut q = Vec::new();
        mix.encode(4, 0xbeef, None, &mut q);
        assert_eq!(&q[..12], &[0xbe, 0xef, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&q[12..], b"\x07example\x03com\x00\x00\x0f\x00\x01");
        mix.encode(2, 1, Some(1232), &mut q);
        assert_eq!(q[11], 1);
        assert!(q.ends_with(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]));
        assert!(q[12..].starts_with(b"\x01x\x07example\x03com\x00\x00\x41\x00\x01"));
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        assert_eq!(
            QueryMix::parse("www.example.com A\nwww.example.com BOGUS\n").unwrap_err(),
            "line 2: unknown record type \"BOGUS\""
        );
        assert!(
            QueryMix::parse("a A B\n")
                .unwrap_err()
                .starts_with("line 1: expected NAME TYPE")
        );
        assert!(QueryMix::parse("; nothing\n").is_err());
    }

    #[test]
    fn responses_are_checked_against_their_question() {
        let mix = QueryMix::parse("www.example.com A\n").unwrap();
        let mut q = Vec::new();
        mix.encode(0, 7, None, &mut q);
        let mut r = q.clone();
        r[2] |= 0x84; // QR, AA
        r[3] = 3;
        assert_eq!(
            check(&r, mix.question(0)),
            Checked::Answer {
                rcode: 3,
                truncated: false
            }
        );
        // Case does not matter; another name, a query and a stub do.
        r[13] = b'W';
        assert!(matches!(check(&r, mix.question(0)), Checked::Answer { .. }));
        r[14] = b'x';
        assert_eq!(check(&r, mix.question(0)), Checked::Mismatch);
        assert_eq!(check(&q, mix.question(0)), Checked::Mismatch);
        assert_eq!(check(&r[..11], mix.question(0)), Checked::Mismatch);
    }

    #[test]
    fn queries_are_written_in_place_as_encode_builds_them() {
        let mix = QueryMix::parse("www.example.com A\nexample.org. TXT\n").unwrap();
        let mut frame = [0xaau8; 300];
        for (id, edns) in [(0, None), (1, Some(1232)), (7, Some(512)), (8, None)] {
            let mut q = Vec::new();
            let len = mix.encode(id, 0x1234, edns, &mut q);
            assert_eq!(len, mix.query_len(id, edns));
            assert_eq!(mix.write(id, 0x1234, edns, &mut frame), Some(len));
            assert_eq!(&frame[..len], &q[..]);
            // Too small a buffer is refused, not overrun.
            assert_eq!(mix.write(id, 0x1234, edns, &mut frame[..len - 1]), None);
        }
    }

    /// A response to `query` with `rcode`, `extra` bytes after the question (as answers).
    fn response_to(query: &[u8], rcode: u8, extra: &[u8]) -> Vec<u8> {
        let mut r = query.to_vec();
        r[2] |= 0x84;
        r[3] = rcode;
        r.extend_from_slice(extra);
        r
    }

    #[test]
    fn responses_are_matched_through_their_id_then_checked() {
        let mix = QueryMix::parse("www.example.com A\nnope.example.com AAAA\n").unwrap();
        let mut counts = DnsCounts::default();
        let mut q = Vec::new();
        mix.encode(1, 9, None, &mut q);
        // ID 9 stands for request 1, scheduled at 500.
        let lookup = |id: u16| (id == 9).then_some((1, 500));
        let r = response_to(&q, 3, &[1, 2, 3]);
        let reply = match_response(&r, &mix, &mut counts, lookup).unwrap();
        assert_eq!(
            reply,
            Reply {
                request: 1,
                scheduled_ns: 500,
                rcode: 3,
                truncated: false
            }
        );
        counts.answered(&reply);
        // Another ID, a datagram too short for one, the other question under ID 9, a query.
        let mut other = r.clone();
        other[1] = 10;
        assert_eq!(match_response(&other, &mix, &mut counts, lookup), None);
        assert_eq!(match_response(&[9], &mix, &mut counts, lookup), None);
        let mut wrong = Vec::new();
        mix.encode(0, 9, None, &mut wrong);
        let wrong = response_to(&wrong, 0, &[]);
        assert_eq!(match_response(&wrong, &mix, &mut counts, lookup), None);
        assert_eq!(match_response(&q, &mix, &mut counts, lookup), None);
        // Truncated, and an RCODE of no name of its own.
        let mut tc = response_to(&q, 9, &[]);
        tc[2] |= 0x02;
        let reply = match_response(&tc, &mix, &mut counts, lookup).unwrap();
        assert!(reply.truncated);
        counts.answered(&reply);
        assert_eq!(
            counts,
            DnsCounts {
                nxdomain: 1,
                other_rcode: 1,
                truncated: 1,
                mismatched: 4,
                ..DnsCounts::default()
            }
        );
        assert_eq!(
            counts.to_string(),
            "noerror 0 nxdomain 1 refused 0 servfail 0 other 1 truncated 1 mismatched 4"
        );
    }

    proptest::proptest! {
        /// Any datagram at all, under an ID that stands for a request or not, is counted once
        /// and never panics; only answers to the question asked are matched.
        #[test]
        fn any_datagram_is_counted_once(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700),
            known in proptest::prelude::any::<bool>(),
            request in 0u64..1_000_000,
        ) {
            let mix = QueryMix::parse("www.example.com A\nb.example.org MX\nc. TXT\n").unwrap();
            let mut counts = DnsCounts::default();
            let got = match_response(&bytes, &mix, &mut counts, |_| known.then_some((request, 7)));
            if let Some(reply) = &got {
                counts.answered(reply);
            }
            proptest::prop_assert_eq!(counts.answers() + counts.mismatched, 1);
            proptest::prop_assert_eq!(got.is_some(), counts.mismatched == 0);
            if let Some(reply) = got {
                proptest::prop_assert!(known);
                proptest::prop_assert_eq!((reply.request, reply.scheduled_ns), (request, 7));
            }
        }

        /// A real answer with random answer bytes after the question is always matched.
        #[test]
        fn an_answer_matches_whatever_follows_its_question(
            extra in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            rcode in 0u8..16,
            request in 0u64..10,
        ) {
            let mix = QueryMix::parse("www.example.com A\nb.example.org MX\nc. TXT\n").unwrap();
            let mut q = Vec::new();
            mix.encode(request, 3, Some(1232), &mut q);
            let mut counts = DnsCounts::default();
            let r = response_to(&q[..q.len() - OPT_LEN], rcode, &extra);
            let got = match_response(&r, &mix, &mut counts, |_| Some((request, 1)));
            proptest::prop_assert_eq!(
                got,
                Some(Reply { request, scheduled_ns: 1, rcode, truncated: false })
            );
            proptest::prop_assert_eq!(counts.mismatched, 0);
        }
    }

    #[test]
    fn outstanding_ids_map_back_to_requests() {
        let t = Outstanding::new();
        assert_eq!(t.get(5), None);
        t.put(5, 0, 10);
        assert_eq!(t.get(5), Some((0, 10)));
        t.put(5, 65_541, 99);
        assert_eq!(t.get(5), Some((65_541, 99)));
    }
}
