//! The `gen` backend: an open-loop traffic generator inside iokerneld that stands in for a
//! fleet of clients behind the NIC.
//!
//! It has an address of its own (`host_ip` and [`GEN_MAC`]) and answers ARP requests for it;
//! until a run is started it sends nothing else. A run ([`Gen::start`], from a
//! `Request::Gen`) plays a corral-loadgen schedule: every request whose time has come is built
//! as an Ethernet/IPv4/UDP frame from the generator's address, client `c` using source port
//! [`CLIENT_PORT_BASE`] + `c % 1024` (so that RSS sees many flows), and handed to the switch as
//! if it had been received. Frames the runtimes send to the generator's address arrive through
//! [`Nic::send`]: echoes from the target are matched by request id and timed. In a `dns` run
//! the requests are DNS queries instead, and replies are matched by client port and DNS ID
//! ([`crate::dns`]).
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds from the run's start, which is set a few
//! milliseconds after the run is accepted, so that the requests are not late because of the
//! setup. Latency counts from each request's *scheduled* time (echoed back in the payload), so
//! a generator that falls behind shows up as latency and in the send lateness, never as
//! requests silently not sent. Each request also carries its actual send time on
//! `CLOCK_MONOTONIC` and comes back with the server's stamps, so that a response's latency
//! splits into its stages (corral_loadgen's `split`). Building and recording allocate nothing:
//! every table is sized from the schedule's bound when the run starts.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};

use corral_loadgen::dns::DnsCounts;
use corral_loadgen::recorder::{Outcome, ResponseRecorder, SendRecorder, new_histogram, summarize};
use corral_loadgen::split::Unsplit;
use corral_loadgen::wire::ServerStamps;
use corral_loadgen::{
    AdherencePolicy, Message, PhasedSchedule, Request, RunInfo, Summary, Timeline, WindowReport,
    WindowedLatency,
};
use corral_wire::frame::UDP_PAYLOAD_OFFSET;
use corral_wire::{ArpOp, ArpPacket, Ipv4FrameSpec, MacAddr, Packet, UdpHeader, parse_frame};
use hdrhistogram::Histogram;

use corral_iokernel::nic::{FrameBatch, Nic, NicCounters};
use corral_iokernel::sys::now_ns;

use crate::dns::DnsRun;
use crate::run::{GenCost, GenSpec, KvReport, Protocol};
use crate::tcpfleet::{FleetConfig, FleetRequest, PreloadProgress, PreloadReport, TcpFleet};

/// The generator's MAC: locally administered, `GEN` in ASCII.
pub const GEN_MAC: MacAddr = MacAddr([0x02, 0x47, 0x45, 0x4e, 0x00, 0x01]);

/// Source port of client 0; client `c` uses `CLIENT_PORT_BASE + c % CLIENT_PORTS`.
pub const CLIENT_PORT_BASE: u16 = 40_000;

/// Distinct source ports (flows) the clients are spread over.
pub const CLIENT_PORTS: u32 = 1024;

/// How long after a run is accepted its first request may be due: long enough for the ARP
/// announcement to reach the target and for the accepting loop iteration to finish.
pub const START_DELAY_NS: u64 = 5_000_000;

/// How often a run announces the generator to its target again (an ARP request for the
/// target's address). The target's entry for the generator then never expires mid-run, which
/// would hold its replies behind a new resolution (and drop those beyond the 16 it queues).
pub const ARP_REFRESH_NS: u64 = 10_000_000_000;

/// How long after a preload ends the schedule's first request may be due.
pub const PRELOAD_TO_SCHEDULE_NS: u64 = 1_000_000;

/// How often a preload is looked at even when nothing arrives, so that a target that stops
/// answering is noticed.
const PRELOAD_CHECK_NS: u64 = 1_000_000;

/// ARP frames waiting to be received by the switch.
const ARP_QUEUE: usize = 16;

/// One burst and one response in this many are timed for the cost report: the clock read that
/// ends a measurement costs a good part of what parsing a response does, and would otherwise be
/// both a cost to the loop and part of the cost reported.
const TIME_ONE_IN: u64 = 8;

/// A timed stretch of more than this per request (or per response) was interrupted: the loop
/// lost its CPU inside it (the daemon counts such iterations as loop stalls), and its time is
/// not the generator's. No request costs the generator anywhere near this much.
const INTERRUPTED_NS: u64 = 50_000;

const TTL: u8 = 64;

/// The source port of client `client`.
#[inline]
pub fn client_port(client: u32) -> u16 {
    CLIENT_PORT_BASE + (client % CLIENT_PORTS) as u16
}

/// What the generator did apart from runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenCounters {
    /// ARP requests for its address that it answered.
    pub arp_replies_sent: u64,
    /// ARP requests it sent to announce itself to a run's target.
    pub arp_requests_sent: u64,
    /// ARP replies addressed to it.
    pub arp_replies_received: u64,
    /// ARP frames it could not queue (more than 16 waiting).
    pub arp_queue_full: u64,
    /// Frames sent to it that were neither ARP for its address nor part of a run.
    pub ignored: u64,
    /// Runs started, finished, and abandoned.
    pub runs_started: u64,
    pub runs_finished: u64,
    pub runs_abandoned: u64,
}

/// The `gen` backend. See the module documentation.
pub struct Gen {
    ip: Ipv4Addr,
    prefix: u8,
    counters: NicCounters,
    gen_counters: GenCounters,
    /// A ring of ARP packets to hand to the switch as received frames.
    arp: [ArpPacket; ARP_QUEUE],
    arp_head: usize,
    arp_len: usize,
    run: Option<Box<Run>>,
}

/// A run in progress.
struct Run {
    target: SocketAddrV4,
    /// `CLOCK_MONOTONIC` time of the run's time 0: the connections' clock, and the origin of
    /// the ARP announcements.
    epoch_ns: u64,
    /// `CLOCK_MONOTONIC` time of the schedule's time 0: `epoch_ns`, or a moment after the
    /// preload ended (`u64::MAX` until then).
    start_ns: u64,
    duration_ns: u64,
    mean_rate_rps: f64,
    grace_ns: u64,
    request_bound: u64,
    schedule: PhasedSchedule,
    /// The next request to send; `None` once the schedule is exhausted.
    next: Option<Request>,
    /// Run time after which responses are late; known once the schedule is exhausted.
    deadline_ns: Option<u64>,
    scheduled: u64,
    send: SendRecorder,
    responses: ResponseRecorder,
    windows: Option<WindowedLatency>,
    /// Addresses of every request; only the IPv4 identification changes per frame.
    frame: Ipv4FrameSpec,
    payload: usize,
    /// `CLOCK_MONOTONIC` time the next request is due; `u64::MAX` once none is left. Checked
    /// on every poll, so kept ready.
    next_due_ns: u64,
    /// Run time of the next ARP announcement.
    next_arp_ns: u64,
    meter: Meter,
    /// The connections of a `memcache-tcp` run, which then send the requests and check and
    /// time the replies instead of the spin path.
    fleet: Option<Box<TcpFleet>>,
    /// The queries and ID tables of a `dns` run, whose requests are then DNS queries and whose
    /// replies are matched by client port and DNS ID instead of by the spin payload's id.
    dns: Option<Box<DnsRun>>,
    /// Whether the fleet was asked to close its connections (once the schedule is over and
    /// every request answered).
    fleet_closing: bool,
    /// Whether the fleet is setting every key before the schedule starts.
    preloading: bool,
    /// How the preload went, once it is done.
    preload: Option<PreloadReport>,
    /// Why the run was given up (a failed preload); it has ended then.
    failure: Option<String>,
}

/// The generator's own cost, measured on a sample of bursts and responses (see
/// [`TIME_ONE_IN`]). Besides the sums, the distributions of the samples are kept: on a shared
/// or virtual machine the loop is sometimes interrupted inside a timed stretch, and a few such
/// samples move the mean far more than the median.
#[derive(Clone, Debug)]
struct Meter {
    requests: u64,
    bursts: u64,
    responses: u64,
    timed_bursts: u64,
    timed_burst_requests: u64,
    timed_build_ns: u64,
    timed_responses: u64,
    timed_parse_ns: u64,
    /// Timed responses not interrupted (their time is in `timed_parse_ns`).
    kept_responses: u64,
    /// Timed stretches left out because the loop lost its CPU inside them.
    interrupted: u64,
    /// Polls of a memcache-tcp run's schedule that had work (requests due, frames to write,
    /// timers): one in [`TIME_ONE_IN`] of these is timed, those that only moved ACKs and
    /// timers too, since that work is as much the requests' as queuing them.
    working_polls: u64,
    /// Per request, for each timed burst.
    build: Histogram<u64>,
    /// Per timed response.
    parse: Histogram<u64>,
}

impl Meter {
    fn new() -> Self {
        Meter {
            requests: 0,
            bursts: 0,
            responses: 0,
            timed_bursts: 0,
            timed_burst_requests: 0,
            timed_build_ns: 0,
            timed_responses: 0,
            timed_parse_ns: 0,
            kept_responses: 0,
            interrupted: 0,
            working_polls: 0,
            build: new_histogram(),
            parse: new_histogram(),
        }
    }

    /// A timed burst of `requests` (0: one that only wrote ACKs or fired timers) that took
    /// `ns`.
    fn time_burst(&mut self, ns: u64, requests: u64) {
        self.timed_bursts += 1;
        if ns / requests.max(1) > INTERRUPTED_NS {
            self.interrupted += 1;
            return;
        }
        self.timed_build_ns += ns;
        self.timed_burst_requests += requests;
        if let Some(per_request) = ns.checked_div(requests) {
            self.build.saturating_record(per_request);
        }
    }

    /// A timed response that took `ns`.
    fn time_response(&mut self, ns: u64) {
        self.timed_responses += 1;
        if ns > INTERRUPTED_NS {
            self.interrupted += 1;
            return;
        }
        self.timed_parse_ns += ns;
        self.kept_responses += 1;
        self.parse.saturating_record(ns);
    }

    fn cost(&self) -> GenCost {
        let per = |ns: u64, n: u64| if n == 0 { 0.0 } else { ns as f64 / n as f64 };
        let build = per(self.timed_build_ns, self.timed_burst_requests);
        let parse = per(self.timed_parse_ns, self.kept_responses);
        let responses_per_request = per(self.responses, self.requests);
        let median = |h: &Histogram<u64>| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.5)
            }
        };
        let (build_p50, parse_p50) = (median(&self.build), median(&self.parse));
        GenCost {
            requests: self.requests,
            ns_per_request: build + parse * responses_per_request,
            responses: self.responses,
            build_ns: (build * self.requests as f64).round() as u64,
            parse_ns: (parse * self.responses as f64).round() as u64,
            build_ns_per_request: build,
            parse_ns_per_response: parse,
            ns_per_request_p50: build_p50 as f64 + parse_p50 as f64 * responses_per_request,
            build_ns_per_request_p50: build_p50,
            parse_ns_per_response_p50: parse_p50,
            bursts: self.bursts,
            timed_bursts: self.timed_bursts,
            timed_responses: self.timed_responses,
            interrupted_samples: self.interrupted,
            // Needs the run's span: filled in by `FinishedRun::finish`.
            busy_fraction: 0.0,
        }
    }
}

/// What [`Nic::send`] made of a frame.
enum Taken {
    /// Recorded by the run (a response, or a malformed one).
    Run,
    ArpRequest(ArpPacket),
    ArpReply,
    Ignored,
}

impl Gen {
    /// A generator at `ip/prefix`, idle.
    pub fn new(ip: Ipv4Addr, prefix: u8) -> Gen {
        Gen {
            ip,
            prefix,
            counters: NicCounters::default(),
            gen_counters: GenCounters::default(),
            arp: [ArpPacket::request(GEN_MAC, ip, ip); ARP_QUEUE],
            arp_head: 0,
            arp_len: 0,
            run: None,
        }
    }

    /// Its IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn gen_counters(&self) -> GenCounters {
        self.gen_counters
    }

    /// Whether the run in progress is still setting its key space, before its schedule.
    pub fn preloading(&self) -> bool {
        self.run.as_deref().is_some_and(|r| r.preloading)
    }

    /// Whether a run is in progress (including one that has ended and not been taken).
    pub fn running(&self) -> bool {
        self.run.is_some()
    }

    /// Starts a run of `spec` (already validated) against the runtime at `target_mac`. The
    /// tables are allocated here; the run's clock starts [`START_DELAY_NS`] after they are.
    pub fn start(&mut self, spec: &GenSpec, target_mac: [u8; 6]) -> Result<(), String> {
        if self.run.is_some() {
            return Err("a run is already in progress".into());
        }
        let target = spec.target_addr().map_err(|e| e.to_string())?;
        let phases = spec.schedule();
        let request_bound = phases.request_bound();
        let dns = match (spec.protocol, spec.dns.as_ref()) {
            (Protocol::Dns, Some(dns)) => {
                let mix = dns.mix().map_err(|e| e.to_string())?;
                let ports = spec.clients.min(CLIENT_PORTS) as usize;
                Some(Box::new(DnsRun::new(mix, dns.edns, ports, request_bound)))
            }
            (Protocol::Dns, None) => return Err("a dns run needs its queries".into()),
            _ => None,
        };
        let fleet = match spec.protocol {
            Protocol::Spin | Protocol::Dns => None,
            Protocol::MemcacheTcp => {
                let config = FleetConfig::new(
                    spec.clients as usize,
                    (GEN_MAC, self.ip),
                    (MacAddr(target_mac), target),
                );
                config.validate()?;
                spec.kv.validate().map_err(|e| e.to_string())?;
                let space = corral_loadgen::kv::Keyspace::new(spec.kv);
                let responses = ResponseRecorder::new(phases.first_id, request_bound);
                Some(Box::new(TcpFleet::new(config, space, responses)))
            }
        };
        // A memcache-tcp run's fleet times the replies; this recorder then stays empty.
        let udp_bound = if fleet.is_some() { 0 } else { request_bound };
        let preloading = fleet.is_some() && spec.preload;
        let duration_ns = phases.duration_ns();
        let mut schedule = phases.iter();
        let next = schedule.next();
        let mut run = Box::new(Run {
            target,
            epoch_ns: 0,
            start_ns: 0,
            duration_ns,
            mean_rate_rps: phases.mean_rate_rps(),
            grace_ns: spec.grace_ns(),
            request_bound,
            schedule,
            next,
            deadline_ns: None,
            scheduled: 0,
            send: SendRecorder::new(),
            responses: ResponseRecorder::new(phases.first_id, udp_bound),
            windows: spec
                .window_ns()
                .map(|w| WindowedLatency::new(w, duration_ns)),
            frame: Ipv4FrameSpec {
                src_mac: GEN_MAC,
                dst_mac: MacAddr(target_mac),
                src_ip: self.ip,
                dst_ip: *target.ip(),
                ttl: TTL,
                ident: 0,
                tos: 0,
            },
            payload: spec.payload,
            next_due_ns: u64::MAX,
            next_arp_ns: ARP_REFRESH_NS,
            meter: Meter::new(),
            dns,
            fleet,
            fleet_closing: false,
            preloading,
            preload: None,
            failure: None,
        });
        if run.next.is_none() {
            run.schedule_over(0);
        }
        run.epoch_ns = now_ns() + START_DELAY_NS;
        if preloading {
            run.start_ns = u64::MAX;
            run.next_due_ns = run.epoch_ns;
            if let Some(fleet) = run.fleet.as_deref_mut() {
                fleet.start_preload(0);
            }
        } else {
            run.start_ns = run.epoch_ns;
            run.next_due_ns = run.due_ns();
        }
        self.announce(*target.ip());
        self.run = Some(run);
        self.gen_counters.runs_started += 1;
        Ok(())
    }

    /// Whether the run in progress has ended: its schedule is exhausted and the grace period
    /// after it has passed, or it was given up.
    pub fn finished(&self, now: u64) -> bool {
        self.run.as_deref().is_some_and(|r| {
            r.failure.is_some()
                || r.deadline_ns
                    .is_some_and(|d| now >= r.start_ns.saturating_add(d))
        })
    }

    /// Takes a run that has [`finished`](Gen::finished); the generator is idle again.
    pub fn take_finished(&mut self, now: u64) -> Option<FinishedRun> {
        if !self.finished(now) {
            return None;
        }
        let run = self.run.take()?;
        self.gen_counters.runs_finished += 1;
        let windows = Vec::with_capacity(run.windows.as_ref().map_or(0, WindowedLatency::len));
        Some(FinishedRun { run, windows })
    }

    /// Drops the run in progress, if any; returns whether there was one.
    pub fn abandon(&mut self) -> bool {
        let had = self.run.take().is_some();
        self.gen_counters.runs_abandoned += u64::from(had);
        had
    }

    /// Queues an ARP request for `target` from the generator: the target learns the
    /// generator's MAC from it (RFC 826), so that it need not resolve it while requests arrive.
    fn announce(&mut self, target: Ipv4Addr) {
        if self.queue_arp(ArpPacket::request(GEN_MAC, self.ip, target)) {
            self.gen_counters.arp_requests_sent += 1;
        }
    }

    fn queue_arp(&mut self, arp: ArpPacket) -> bool {
        if self.arp_len == ARP_QUEUE {
            self.gen_counters.arp_queue_full += 1;
            return false;
        }
        self.arp[(self.arp_head + self.arp_len) % ARP_QUEUE] = arp;
        self.arp_len += 1;
        true
    }

    fn flush_arp(&mut self, out: &mut FrameBatch) -> usize {
        let mut got = 0;
        while self.arp_len > 0 {
            let Some(buf) = out.next_buffer() else {
                break;
            };
            let arp = self.arp[self.arp_head];
            self.arp_head = (self.arp_head + 1) % ARP_QUEUE;
            self.arp_len -= 1;
            // The buffer holds a whole frame, far more than an ARP frame's 42 bytes.
            if let Ok(len) = arp.emit_frame(buf) {
                out.commit(len);
                self.counters.rx_frames += 1;
                self.counters.rx_bytes += len as u64;
                got += 1;
            }
        }
        got
    }
}

impl Run {
    /// When the next request is due, `u64::MAX` if none is left.
    #[inline]
    fn due_ns(&self) -> u64 {
        self.next
            .map_or(u64::MAX, |r| self.start_ns.saturating_add(r.send_ns))
    }

    /// The schedule has no more requests; the last was attempted at run time `last_ns`.
    /// Responses count until the grace period after the later of that and the end of the
    /// schedule.
    fn schedule_over(&mut self, last_ns: u64) {
        let deadline = last_ns.max(self.duration_ns).saturating_add(self.grace_ns);
        self.deadline_ns = Some(deadline);
        self.responses.set_deadline(deadline);
        if let Some(fleet) = self.fleet.as_deref_mut() {
            fleet.set_deadline(deadline);
        }
    }

    /// Builds every request due by `now` (at least one is) that fits in `out`; returns frames
    /// and bytes.
    fn emit(&mut self, out: &mut FrameBatch, now: u64) -> (usize, u64) {
        if let Some(mut fleet) = self.fleet.take() {
            let emitted = self.emit_tcp(&mut fleet, out, now);
            self.fleet = Some(fleet);
            return emitted;
        }
        let at = now.saturating_sub(self.start_ns);
        let (mut frames, mut bytes) = (0, 0);
        while let Some(req) = self.next
            && req.send_ns <= at
        {
            let Some(buf) = out.next_buffer() else {
                break;
            };
            self.scheduled += 1;
            if let Some(w) = self.windows.as_mut() {
                w.record_scheduled(req.send_ns);
            }
            match self.build(buf, &req, now) {
                Some(len) => {
                    out.commit(len);
                    frames += 1;
                    bytes += len as u64;
                    self.send.record_sent(req.send_ns, at);
                }
                None => self.send.record_send_error(req.send_ns, at),
            }
            self.next = self.schedule.next();
            if self.next.is_none() {
                self.schedule_over(at);
            }
        }
        self.next_due_ns = self.due_ns();
        let m = &mut self.meter;
        if m.bursts.is_multiple_of(TIME_ONE_IN) && frames > 0 {
            // From the loop's clock read just before the poll.
            m.time_burst(now_ns().saturating_sub(now), frames as u64);
        }
        m.bursts += 1;
        m.requests += frames as u64;
        (frames, bytes)
    }

    /// [`emit`](Run::emit) for a `memcache-tcp` run (its fleet taken out of the run for the
    /// call): queues every request due on its connection, then writes the frames the
    /// connections have due (requests, ACKs, handshakes, retransmissions). Returns frames and
    /// bytes.
    fn emit_tcp(&mut self, fleet: &mut TcpFleet, out: &mut FrameBatch, now: u64) -> (usize, u64) {
        // The connections' clock.
        let at = now.saturating_sub(self.epoch_ns);
        if self.preloading {
            match fleet.preload_step(at) {
                PreloadProgress::Running => {}
                PreloadProgress::Done(report) => {
                    self.preloading = false;
                    self.preload = Some(report);
                    self.start_ns = now + PRELOAD_TO_SCHEDULE_NS;
                    fleet.start_schedule(self.start_ns - self.epoch_ns);
                }
                PreloadProgress::Failed(why) => {
                    self.failure = Some(why);
                    fleet.abort_all(at);
                }
            }
        }
        let mut submitted = 0;
        if !self.preloading && self.failure.is_none() && now >= self.start_ns {
            // The schedule's clock.
            let schedule_at = now - self.start_ns;
            while let Some(req) = self.next
                && req.send_ns <= schedule_at
            {
                self.scheduled += 1;
                submitted += 1;
                let request = FleetRequest {
                    op: fleet.op_of(req.id),
                    id: Some(req.id),
                    scheduled_ns: req.send_ns,
                };
                // A refusal is counted by the fleet (a send error, so the request is lost).
                let _ = fleet.submit(at, request);
                self.next = self.schedule.next();
                if self.next.is_none() {
                    self.schedule_over(schedule_at);
                    fleet.set_deadline(self.deadline_ns.unwrap_or(u64::MAX));
                }
            }
        }
        if !self.preloading && self.next.is_none() && !self.fleet_closing && fleet.in_flight() == 0
        {
            self.fleet_closing = true;
            fleet.close_all(at);
        }
        let before = out.len();
        fleet.poll(at, out);
        let frames = out.len() - before;
        let bytes = (before..out.len()).map(|i| out.frame(i).len() as u64).sum();
        let timer = fleet
            .next_deadline()
            .map_or(u64::MAX, |d| self.epoch_ns.saturating_add(d));
        self.next_due_ns = if fleet.has_output() {
            now
        } else if self.preloading {
            timer.min(now + PRELOAD_CHECK_NS)
        } else {
            self.due_ns().min(timer)
        };
        if self.preloading {
            // The preload is not the run's cost.
            return (frames, bytes);
        }
        let m = &mut self.meter;
        if m.working_polls.is_multiple_of(TIME_ONE_IN) {
            // Queuing the requests due and writing every frame due (ACKs and retransmissions
            // included), from the loop's clock read before the poll. The sampled polls' time
            // over the requests they queued estimates the cost per request.
            m.time_burst(now_ns().saturating_sub(now), submitted);
        }
        m.working_polls += 1;
        m.bursts += u64::from(submitted > 0);
        m.requests += submitted;
        (frames, bytes)
    }

    /// Writes request `req`, sent at `now`, as a whole frame into `buf`; returns its length.
    #[inline]
    fn build(&mut self, buf: &mut [u8], req: &Request, now: u64) -> Option<usize> {
        let len = match self.dns.as_deref_mut() {
            Some(dns) => {
                let payload = buf.get_mut(UDP_PAYLOAD_OFFSET..)?;
                let port = (req.client % CLIENT_PORTS) as usize;
                dns.write_query(payload, port, req.id, req.send_ns)?
            }
            None => {
                let payload = buf.get_mut(UDP_PAYLOAD_OFFSET..UDP_PAYLOAD_OFFSET + self.payload)?;
                Message {
                    sent_ns: now,
                    ..Message::from(req)
                }
                .encode(payload)
                .ok()?;
                self.payload
            }
        };
        self.frame.ident = self.frame.ident.wrapping_add(1);
        let ports = UdpHeader {
            src_port: client_port(req.client),
            dst_port: self.target.port(),
        };
        self.frame.write_udp(buf, ports, len).ok()
    }

    /// Records the UDP payload of an echo from the target to client port `port`, received at
    /// `now`.
    #[inline]
    fn record(&mut self, port: u16, payload: &[u8], now: u64) {
        let at = now.saturating_sub(self.start_ns);
        if let Some(dns) = self.dns.as_deref_mut() {
            // Ports below the first client's wrap to indices no client has.
            let index = usize::from(port.wrapping_sub(CLIENT_PORT_BASE));
            match dns.take_reply(index, payload) {
                Some(reply) => {
                    let outcome =
                        self.responses
                            .record_response(reply.request, reply.scheduled_ns, at);
                    if let Outcome::Matched { .. } = outcome {
                        dns.counts.answered(&reply);
                    }
                    if let Some(w) = self.windows.as_mut() {
                        w.record_outcome(reply.scheduled_ns, outcome);
                    }
                }
                None => self.responses.record_malformed(),
            }
            return;
        }
        match Message::decode(payload) {
            // Sent before this run started: a late echo of an earlier run's request, whose id
            // this run may reuse. Its echoed times are on that run's clock.
            Ok(m) if m.sent_ns < self.start_ns => self.responses.record_stale(),
            // An echo to another client's port was damaged or misdirected on the way.
            Ok(m) if client_port(m.client) == port => {
                let outcome = self
                    .responses
                    .record_response(m.id, m.scheduled_send_ns, at);
                if let Outcome::Matched { latency_ns } = outcome {
                    self.record_split(&m, payload, now, latency_ns);
                }
                if let Some(w) = self.windows.as_mut() {
                    w.record_outcome(m.scheduled_send_ns, outcome);
                }
            }
            _ => self.responses.record_malformed(),
        }
    }
}

impl Run {
    /// Splits a matched response's latency: its schedule time is on the run's clock, every
    /// other instant on `CLOCK_MONOTONIC`.
    #[inline]
    fn record_split(&mut self, m: &Message, payload: &[u8], seen_ns: u64, latency_ns: u64) {
        let split = ServerStamps::read(payload)
            .map_err(|_| Unsplit::Unstamped)
            .and_then(|stamps| {
                Timeline::of_response(
                    self.start_ns,
                    m.scheduled_send_ns,
                    m.sent_ns,
                    stamps,
                    seen_ns,
                )
                .split()
                .map_err(|e| Unsplit::OutOfOrder(e.stage))
            });
        match split {
            Ok(split) => self.responses.record_split(latency_ns, split),
            Err(why) => self.responses.record_unsplit(why),
        }
    }
}

impl Nic for Gen {
    fn name(&self) -> &'static str {
        "gen"
    }

    fn describe(&self) -> String {
        let state = match self.run.as_deref() {
            None => "idle".to_owned(),
            Some(r) => format!(
                "playing a run to {}: {} of at most {} requests sent",
                r.target, r.scheduled, r.request_bound
            ),
        };
        let c = self.gen_counters;
        format!(
            "gen: built-in traffic generator at {}/{} (MAC {}); {state}; {} runs started, {} \
             finished, {} abandoned; {} ARP requests answered, {} ARP replies received, {} \
             frames ignored",
            self.ip,
            self.prefix,
            GEN_MAC,
            c.runs_started,
            c.runs_finished,
            c.runs_abandoned,
            c.arp_replies_sent,
            c.arp_replies_received,
            c.ignored
        )
    }

    fn recv_burst(&mut self, out: &mut FrameBatch) -> usize {
        self.recv_burst_at(out, now_ns())
    }

    #[inline]
    fn recv_burst_at(&mut self, out: &mut FrameBatch, now: u64) -> usize {
        // Idle, or between requests: this is all the generator costs the loop then.
        let mut got = 0;
        if self.arp_len > 0 {
            got = self.flush_arp(out);
        }
        let Some(run) = self.run.as_deref_mut() else {
            return got;
        };
        if now < run.next_due_ns {
            return got;
        }
        let (frames, bytes) = run.emit(out, now);
        self.counters.rx_frames += frames as u64;
        self.counters.rx_bytes += bytes;
        got += frames;
        if now >= run.epoch_ns.saturating_add(run.next_arp_ns) {
            run.next_arp_ns += ARP_REFRESH_NS;
            let target = *run.target.ip();
            self.announce(target);
        }
        got
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let received = if self.run.is_some() { now_ns() } else { 0 };
        self.send_at(frame, received)
    }

    fn counters(&self) -> NicCounters {
        self.counters
    }
}

impl Gen {
    /// [`Nic::send`] of a frame that arrived at `received` (`CLOCK_MONOTONIC`, as
    /// [`Nic::recv_burst_at`]'s `now`): for callers that keep their own clock.
    pub fn send_at(&mut self, frame: &[u8], received: u64) -> io::Result<()> {
        self.counters.tx_frames += 1;
        self.counters.tx_bytes += frame.len() as u64;
        let taken = match parse_frame(frame) {
            Ok(parsed) => match parsed.packet {
                Packet::Arp(arp) if arp.target_ip == self.ip => match arp.op {
                    ArpOp::Request => Taken::ArpRequest(arp),
                    ArpOp::Reply => Taken::ArpReply,
                },
                Packet::Tcp { ip, tcp } => match self.run.as_deref_mut() {
                    Some(run)
                        if ip.dst() == self.ip
                            && ip.src() == *run.target.ip()
                            && run.fleet.is_some() =>
                    {
                        let at = received.saturating_sub(run.epoch_ns);
                        let fleet = run.fleet.as_deref_mut().expect("checked in the guard");
                        // Parsed (and its checksums verified) once, here.
                        fleet.receive_segment(&ip, &tcp, at);
                        if fleet.has_output() {
                            // Answer (ACKs, more requests) on the next poll.
                            run.next_due_ns = 0;
                        }
                        Taken::Run
                    }
                    _ => Taken::Ignored,
                },
                Packet::Udp { ip, udp } => match self.run.as_deref_mut() {
                    Some(run)
                        if ip.dst() == self.ip
                            && ip.src() == *run.target.ip()
                            && udp.src_port() == run.target.port() =>
                    {
                        run.record(udp.dst_port(), udp.payload(), received);
                        Taken::Run
                    }
                    _ => Taken::Ignored,
                },
                _ => Taken::Ignored,
            },
            // A frame to the generator that does not parse (a bad checksum, say) during a run
            // can only be a damaged response.
            Err(_) => match self.run.as_deref_mut() {
                Some(run) if frame.get(..6) == Some(&GEN_MAC.0[..]) => {
                    run.responses.record_malformed();
                    Taken::Run
                }
                _ => Taken::Ignored,
            },
        };
        match taken {
            Taken::Run => {}
            Taken::ArpRequest(arp) => {
                if self.queue_arp(arp.reply(GEN_MAC)) {
                    self.gen_counters.arp_replies_sent += 1;
                }
            }
            Taken::ArpReply => self.gen_counters.arp_replies_received += 1,
            Taken::Ignored => self.gen_counters.ignored += 1,
        }
        // The preload's replies are not the run's: its cost is the timed run's.
        if let Some(run) = self.run.as_deref_mut().filter(|r| !r.preloading) {
            let m = &mut run.meter;
            if m.responses.is_multiple_of(TIME_ONE_IN) {
                m.time_response(now_ns().saturating_sub(received));
            }
            m.responses += 1;
        }
        Ok(())
    }
}

/// A run that has ended, taken out of the generator to be reported.
pub struct FinishedRun {
    run: Box<Run>,
    windows: Vec<WindowReport>,
}

impl FinishedRun {
    /// The target the run loaded.
    pub fn target(&self) -> SocketAddrV4 {
        self.run.target
    }

    /// Reports latency windows until `budget_ns` has passed (at least one window per call);
    /// returns whether every window is reported. Thousands of windows take milliseconds, which
    /// the loop must not spend at once.
    pub fn report_windows(&mut self, budget_ns: u64) -> bool {
        let Some(w) = self.run.windows.as_ref() else {
            return true;
        };
        let start = now_ns();
        while let Some(report) = w.report(self.windows.len()) {
            self.windows.push(report);
            if now_ns().saturating_sub(start) >= budget_ns {
                break;
            }
        }
        self.windows.len() == w.len()
    }

    /// The summary under `policy`, the windows (call [`FinishedRun::report_windows`] until
    /// it returns true first, or some are missing), and the generator's cost.
    pub fn finish(self, policy: &AdherencePolicy) -> (Summary, Vec<WindowReport>, GenCost) {
        let run = &self.run;
        let info = RunInfo {
            target_rps: run.mean_rate_rps,
            duration_ns: run.duration_ns,
            scheduled: run.scheduled,
        };
        let (summary, last_send_ns) = match run.fleet.as_deref() {
            Some(fleet) => (fleet.summary(&info, policy), fleet.last_send_ns()),
            None => (
                summarize(&info, &run.send, &run.responses, policy),
                run.send.last_actual_ns(),
            ),
        };
        let mut cost = run.meter.cost();
        let span_ns = run.duration_ns.max(last_send_ns);
        if span_ns > 0 {
            cost.busy_fraction = (cost.build_ns + cost.parse_ns) as f64 / span_ns as f64;
        }
        (summary, self.windows, cost)
    }

    /// Why the run was given up, if it was (then it has no results).
    pub fn failure(&self) -> Option<&str> {
        self.run.failure.as_deref()
    }

    /// A `dns` run's replies by RCODE, and those that matched nothing; `None` for other runs.
    pub fn dns_counts(&self) -> Option<DnsCounts> {
        self.run.dns.as_deref().map(|d| d.counts)
    }

    /// What a `memcache-tcp` run's connections did; `None` for a spin run.
    pub fn kv_report(&self) -> Option<KvReport> {
        let fleet = self.run.fleet.as_deref()?;
        let tcp = fleet.tcp_counters().conns;
        let preload = self.run.preload.unwrap_or_default();
        Some(KvReport {
            checks: *fleet.checks(),
            errors: fleet.checks().errors(),
            preload_s: preload.duration_ns as f64 / 1e9,
            connections: *fleet.counters(),
            rto_retransmits: tcp.rto_retransmits,
            fast_retransmits: tcp.fast_retransmits,
            syn_retransmits: tcp.syn_retransmits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_loadgen::Arrivals;
    use corral_wire::{DropReason, EthernetFrame, Ipv4Packet, UdpDatagram};

    use crate::run::PhaseSpec;
    use corral_iokernel::nic::BURST;

    const GEN_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
    const TARGET_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
    const TARGET_MAC: [u8; 6] = [0x02, 0x43, 10, 99, 0, 2];

    /// 100 requests at 1 per 10 us, constant, from 8 clients, 100-byte payloads; responses
    /// count for 1 ms after the last.
    fn spec() -> GenSpec {
        spec_with_grace(1.0)
    }

    fn spec_with_grace(grace_ms: f64) -> GenSpec {
        let mut spec = GenSpec::new(
            SocketAddrV4::new(TARGET_IP, 5000),
            vec![PhaseSpec {
                rate_rps: 100_000.0,
                duration_s: 0.001,
            }],
        );
        spec.arrivals = Arrivals::Constant;
        spec.clients = 8;
        spec.payload = 100;
        spec.grace_ms = grace_ms;
        spec.window_ms = Some(0.25);
        spec.validate().unwrap();
        spec
    }

    fn started() -> Gen {
        let mut g = Gen::new(GEN_IP, 24);
        g.start(&spec(), TARGET_MAC).unwrap();
        g
    }

    fn start_of(g: &Gen) -> u64 {
        g.run.as_ref().unwrap().start_ns
    }

    /// A generator playing `spec` (100 requests in 1 ms), and every request it sent by 1 ms
    /// after its start (its announcement left out).
    fn all_requests(spec: &GenSpec) -> (Gen, Vec<Vec<u8>>) {
        let mut g = Gen::new(GEN_IP, 24);
        g.start(spec, TARGET_MAC).unwrap();
        let start = start_of(&g);
        let mut requests = poll(&mut g, start + 1_000_000);
        requests.remove(0); // the announcement
        assert_eq!(requests.len(), 100);
        (g, requests)
    }

    /// Takes every frame the generator has due at `now`.
    fn poll(g: &mut Gen, now: u64) -> Vec<Vec<u8>> {
        let mut batch = FrameBatch::default();
        let mut frames = Vec::new();
        loop {
            batch.clear();
            let n = g.recv_burst_at(&mut batch, now);
            frames.extend((0..n).map(|i| batch.frame(i).to_vec()));
            if n < BURST {
                return frames;
            }
        }
    }

    /// The echo the spin server would send for `request`, with the payload changed by `edit`.
    fn echo(request: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        echo_from(request, 5000, edit)
    }

    /// The same, sent from port `port`.
    fn echo_from(request: &[u8], port: u16, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let parsed = parse_frame(request).unwrap();
        let Packet::Udp { ip, udp } = parsed.packet else {
            panic!("not UDP")
        };
        let mut payload = udp.payload().to_vec();
        edit(&mut payload);
        let spec = Ipv4FrameSpec::reply_to(&parsed.eth, &ip, 64, 1);
        let mut buf = vec![0u8; 2048];
        let len = spec
            .build_udp(
                &mut buf,
                UdpHeader {
                    src_port: port,
                    dst_port: udp.src_port(),
                },
                &payload,
            )
            .unwrap();
        buf.truncate(len);
        buf
    }

    #[test]
    fn the_meter_leaves_interrupted_stretches_out_of_its_means() {
        let mut m = Meter::new();
        // 10 requests in 5 µs, an ACK-only poll of 1 µs, then one request the loop lost its
        // CPU in (3 ms); a 400 ns response, and one of 2 ms.
        m.time_burst(5_000, 10);
        m.time_burst(1_000, 0);
        m.time_burst(3_000_000, 1);
        m.time_response(400);
        m.time_response(2_000_000);
        m.requests = 11;
        m.responses = 2;
        let cost = m.cost();
        assert_eq!((cost.timed_bursts, cost.timed_responses), (3, 2));
        assert_eq!(cost.interrupted_samples, 2);
        // (5 µs + 1 µs) over the 10 requests of the bursts kept.
        assert_eq!(cost.build_ns_per_request, 600.0);
        assert_eq!(cost.parse_ns_per_response, 400.0);
        // A large burst is not an interruption: 256 requests in 100 µs.
        m.time_burst(100_000, 256);
        assert_eq!(m.cost().interrupted_samples, 2);
    }

    #[test]
    fn an_idle_generator_sends_nothing_but_arp_answers() {
        let mut g = Gen::new(GEN_IP, 24);
        assert!(poll(&mut g, u64::MAX).is_empty());
        // A runtime resolving the generator's address.
        let mut request = vec![0u8; 64];
        let len = ArpPacket::request(MacAddr(TARGET_MAC), TARGET_IP, GEN_IP)
            .emit_frame(&mut request)
            .unwrap();
        g.send(&request[..len]).unwrap();
        let frames = poll(&mut g, 0);
        assert_eq!(frames.len(), 1);
        let eth = EthernetFrame::parse(&frames[0]).unwrap();
        assert_eq!(eth.dst().0, TARGET_MAC);
        assert_eq!(eth.src(), GEN_MAC);
        let reply = ArpPacket::parse(eth.payload()).unwrap();
        assert_eq!(reply.op, ArpOp::Reply);
        assert_eq!((reply.sender_mac, reply.sender_ip), (GEN_MAC, GEN_IP));
        assert_eq!(
            (reply.target_mac.0, reply.target_ip),
            (TARGET_MAC, TARGET_IP)
        );
        assert!(poll(&mut g, 0).is_empty());
        // ARP for somebody else, and a stray datagram, are ignored and counted.
        let len = ArpPacket::request(MacAddr(TARGET_MAC), TARGET_IP, Ipv4Addr::new(10, 99, 0, 7))
            .emit_frame(&mut request)
            .unwrap();
        g.send(&request[..len]).unwrap();
        g.send(&[0u8; 10]).unwrap();
        assert!(poll(&mut g, u64::MAX).is_empty());
        let c = g.gen_counters();
        assert_eq!((c.arp_replies_sent, c.ignored), (1, 2));
        assert_eq!(g.counters().tx_frames, 3);
        assert_eq!(g.counters().rx_frames, 1);
    }

    #[test]
    fn requests_are_valid_frames_carrying_the_schedule() {
        let mut g = started();
        let start = start_of(&g);
        // First the announcement to the target; nothing is due before the start.
        let frames = poll(&mut g, start - 1);
        assert_eq!(frames.len(), 1);
        let eth = EthernetFrame::parse(&frames[0]).unwrap();
        assert!(eth.dst().is_broadcast());
        let arp = ArpPacket::parse(eth.payload()).unwrap();
        assert_eq!(
            (arp.op, arp.sender_mac, arp.sender_ip, arp.target_ip),
            (ArpOp::Request, GEN_MAC, GEN_IP, TARGET_IP)
        );
        // At the start, request 0; 55 us later, 5 more.
        assert_eq!(poll(&mut g, start).len(), 1);
        let frames = poll(&mut g, start + 55_000);
        assert_eq!(frames.len(), 5);
        let mut ids = Vec::new();
        for f in &frames {
            // Every layer verifies, checksums included.
            let parsed = parse_frame(f).unwrap();
            assert_eq!(parsed.eth.src(), GEN_MAC);
            assert_eq!(parsed.eth.dst().0, TARGET_MAC);
            let Packet::Udp { ip, udp } = parsed.packet else {
                panic!("not UDP")
            };
            assert_eq!((ip.src(), ip.dst()), (GEN_IP, TARGET_IP));
            assert_eq!(udp.dst_port(), 5000);
            assert_eq!(udp.payload().len(), 100);
            assert_eq!(f.len(), UDP_PAYLOAD_OFFSET + 100);
            let m = Message::decode(udp.payload()).unwrap();
            assert_eq!(udp.src_port(), CLIENT_PORT_BASE + m.client as u16);
            assert!(m.client < 8);
            assert_eq!(m.scheduled_send_ns, m.id * 10_000);
            ids.push(m.id);
            // Corrupting any byte of the UDP part is caught by its checksum.
            let mut bad = f.clone();
            bad[UDP_PAYLOAD_OFFSET + 40] ^= 1;
            let ip_bytes = &bad[14..];
            let ip = Ipv4Packet::parse(ip_bytes).unwrap();
            assert_eq!(
                UdpDatagram::parse(ip.payload(), ip.src(), ip.dst()).unwrap_err(),
                DropReason::BadUdpChecksum
            );
        }
        assert_eq!(ids, vec![1, 2, 3, 4, 5]);
        // Consecutive IPv4 identifications.
        let idents: Vec<u16> = frames
            .iter()
            .map(|f| Ipv4Packet::parse(&f[14..]).unwrap().ident())
            .collect();
        assert!(idents.windows(2).all(|w| w[1] == w[0].wrapping_add(1)));
    }

    #[test]
    fn responses_are_matched_by_id_and_damage_is_counted() {
        let (mut g, requests) = all_requests(&spec_with_grace(1_000.0));
        assert!(!g.finished(start_of(&g) + 1_000_000));
        // Responses are timed with the real clock: put the run's start 1 ms in its past, so
        // that they all come after the last request was due and before the deadline.
        let start = now_ns() - 1_000_000;
        g.run.as_mut().unwrap().start_ns = start;
        // Answer all but request 7, in reverse order, one of them twice.
        for f in requests.iter().rev() {
            let id = Message::decode(&f[UDP_PAYLOAD_OFFSET..]).unwrap().id;
            if id != 7 {
                g.send(&echo(f, |_| {})).unwrap();
            }
        }
        g.send(&echo(&requests[3], |_| {})).unwrap();
        // A payload that is not a request; an echo to the wrong client port; a frame whose
        // UDP checksum is wrong; a request id never sent.
        g.send(&echo(&requests[0], |p| p[0] ^= 1)).unwrap();
        let mut m = Message::decode(&requests[1][UDP_PAYLOAD_OFFSET..]).unwrap();
        m.client += 1;
        g.send(&echo(&requests[1], |p| m.encode(p).unwrap()))
            .unwrap();
        let mut bad = echo(&requests[2], |_| {});
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        g.send(&bad).unwrap();
        let mut unknown = Message::decode(&requests[4][UDP_PAYLOAD_OFFSET..]).unwrap();
        unknown.id = 1_000_000;
        g.send(&echo(&requests[4], |p| unknown.encode(p).unwrap()))
            .unwrap();
        // Not from the target's service: ignored, not counted by the run.
        g.send(&echo_from(&requests[5], 5001, |_| {})).unwrap();

        // The last request went out at 1 ms; the run ends 1 s (the grace) after that.
        let end = start + 1_001_000_000;
        assert!(!g.finished(end - 1));
        assert!(g.take_finished(end - 1).is_none());
        assert!(g.finished(end));
        let mut run = g.take_finished(end).unwrap();
        assert!(!g.running());
        while !run.report_windows(0) {}
        let (s, windows, cost) = run.finish(&AdherencePolicy::default());
        assert_eq!((s.scheduled, s.sent, s.send_errors), (100, 100, 0));
        assert_eq!((s.matched, s.lost, s.duplicates), (99, 1, 1));
        assert_eq!((s.malformed, s.unknown, s.late), (3, 1, 0));
        assert_eq!(s.received, 99 + 1 + 3 + 1);
        assert_eq!(s.latency.count, 99);
        assert!(s.latency.min_ns > 0 && s.latency.min_ns <= s.latency.max_ns);
        // Four windows of 25 requests each; request 7 is in the first.
        assert_eq!(windows.len(), 4);
        let counts: Vec<(f64, u64, u64)> = windows
            .iter()
            .map(|w| (w.start_ms, w.scheduled, w.matched))
            .collect();
        assert_eq!(
            counts,
            vec![(0.0, 25, 24), (0.25, 25, 25), (0.5, 25, 25), (0.75, 25, 25)]
        );
        assert_eq!(cost.requests, 100);
        assert_eq!(cost.responses, 105);
        // The first burst and every eighth response after it were timed.
        assert!(cost.timed_bursts >= 1);
        assert_eq!(cost.timed_responses, 14);
        assert!(cost.ns_per_request > 0.0);
        assert_eq!(g.gen_counters().ignored, 1);
    }

    #[test]
    fn stamped_responses_split_their_latency_on_one_clock() {
        let mut g = Gen::new(GEN_IP, 24);
        g.start(&spec_with_grace(1_000.0), TARGET_MAC).unwrap();
        // Run on the real clock: the schedule started 10 ms ago, so all 100 requests are due.
        let start = now_ns() - 10_000_000;
        let run = g.run.as_mut().unwrap();
        run.start_ns = start;
        run.next_due_ns = run.due_ns();
        let sent_at = now_ns();
        let mut requests = poll(&mut g, sent_at);
        requests.remove(0); // the announcement
        assert_eq!(requests.len(), 100);
        for f in &requests {
            let m = Message::decode(&f[UDP_PAYLOAD_OFFSET..]).unwrap();
            assert_eq!(m.sent_ns, sent_at, "requests carry their actual send time");
        }
        // A server that got each request after it was sent, and finished before it answered;
        // request 3's stamps are damaged on the way back, request 4 comes back unstamped.
        for f in &requests[1..] {
            let id = Message::decode(&f[UDP_PAYLOAD_OFFSET..]).unwrap().id;
            let received_ns = now_ns();
            let stamps = ServerStamps {
                received_ns,
                start_ns: received_ns + 1,
                end_ns: now_ns().max(received_ns + 1),
            };
            g.send(&echo(f, |p| match id {
                4 => {}
                3 => {
                    stamps.write(p).unwrap();
                    p[50] ^= 1;
                }
                _ => stamps.write(p).unwrap(),
            }))
            .unwrap();
        }
        // A late echo of an earlier run's request 0 (sent before this run started) is not
        // taken for this run's request 0, which is still unanswered.
        let mut stale = Message::decode(&requests[0][UDP_PAYLOAD_OFFSET..]).unwrap();
        assert_eq!(stale.id, 0);
        stale.sent_ns = start - 1;
        let first = requests.remove(0);
        g.send(&echo(&first, |p| stale.encode(p).unwrap())).unwrap();
        assert!(!g.run.as_ref().unwrap().responses.is_answered(0));
        g.send(&echo(&first, |p| {
            let received_ns = now_ns();
            ServerStamps {
                received_ns,
                start_ns: received_ns + 1,
                end_ns: now_ns().max(received_ns + 1),
            }
            .write(p)
            .unwrap()
        }))
        .unwrap();
        let run = g.take_finished(u64::MAX).unwrap();
        let (s, _, _) = run.finish(&AdherencePolicy::default());
        assert_eq!(s.matched, 100);
        assert_eq!(s.unknown, 1);
        assert_eq!((s.tail.split, s.tail.unsplit, s.tail.unstamped), (98, 2, 2));
        let p99 = s.tail.above_p99.unwrap();
        assert_eq!(p99.requests, 1);
        // The slowest request was the first, due at the schedule's start and sent at
        // `sent_at`; the gaps add up to its latency.
        let m = p99.median;
        assert_eq!(m.send_late_ns, sent_at - start, "{m:?}");
        assert_eq!(m.queue_ns, 1);
        assert_eq!(m.total_ns(), p99.threshold_ns);
    }

    #[test]
    fn a_late_response_counts_as_lost_and_abandoning_stops_the_run() {
        let mut g = started();
        let start = start_of(&g);
        let requests = poll(&mut g, start + 1_000_000);
        let first = &requests[1];
        assert!(g.finished(start + 2_000_000));
        // The response comes after the deadline (the clock is read when it arrives, long
        // after the run's start in this test's time).
        g.run.as_mut().unwrap().start_ns = now_ns().saturating_sub(3_000_000);
        g.send(&echo(first, |_| {})).unwrap();
        let run = g.take_finished(u64::MAX).unwrap();
        let (s, _, _) = run.finish(&AdherencePolicy::default());
        assert_eq!((s.late, s.matched, s.lost), (1, 0, 100));

        let mut g = started();
        assert!(g.abandon());
        assert!(!g.abandon());
        assert!(poll(&mut g, u64::MAX).iter().all(|f| f.len() == 42));
        assert_eq!(g.gen_counters().runs_abandoned, 1);
    }

    #[test]
    fn a_second_run_is_refused_while_one_is_on() {
        let mut g = started();
        let err = g.start(&spec(), TARGET_MAC).unwrap_err();
        assert!(err.contains("already in progress"), "{err}");
    }

    #[test]
    fn the_run_is_described() {
        let mut g = Gen::new(GEN_IP, 24);
        assert!(g.describe().contains("idle"), "{}", g.describe());
        g.start(&spec(), TARGET_MAC).unwrap();
        let text = g.describe();
        assert!(text.contains("10.99.0.2:5000"), "{text}");
        assert!(text.contains("02:47:45:4e:00:01"), "{text}");
    }

    /// Three questions: one with an answer, one missing from its zone, one outside every zone.
    const QUERIES: &str = "www.example.com A\nnothing.example.com AAAA\nnowhere.test A\n";

    /// [`spec_with_grace`] as a `dns` run from 3 client ports, with EDNS.
    fn dns_spec(grace_ms: f64) -> GenSpec {
        let mut spec = spec_with_grace(grace_ms);
        spec.protocol = Protocol::Dns;
        spec.clients = 3;
        spec.dns = Some(crate::run::DnsSpec {
            queries: QUERIES.into(),
            edns: Some(1232),
        });
        spec.validate().unwrap();
        spec
    }

    /// A UDP datagram from the target's service to the generator's port `port`.
    fn datagram_to(port: u16, payload: &[u8]) -> Vec<u8> {
        let spec = Ipv4FrameSpec {
            src_mac: MacAddr(TARGET_MAC),
            dst_mac: GEN_MAC,
            src_ip: TARGET_IP,
            dst_ip: GEN_IP,
            ttl: 64,
            ident: 1,
            tos: 0,
        };
        let mut buf = vec![0u8; 2048];
        let ports = UdpHeader {
            src_port: 5000,
            dst_port: port,
        };
        let len = spec.build_udp(&mut buf, ports, payload).unwrap();
        buf.truncate(len);
        buf
    }

    /// The reply an authoritative server would make to `query`: QR and AA set, `rcode`, and
    /// the OPT record kept.
    fn dns_reply(query: &[u8], rcode: u8) -> Vec<u8> {
        let mut r = query.to_vec();
        r[2] |= 0x84;
        r[3] = rcode;
        r
    }

    #[test]
    fn dns_queries_take_their_ports_next_id_and_replies_are_matched_and_checked() {
        let (mut g, requests) = all_requests(&dns_spec(1_000.0));
        let mix = corral_loadgen::dns::QueryMix::parse(QUERIES).unwrap();
        // Request n asks question n mod 3, with its port's next ID, from a client port.
        let mut next_id = [0u16; 3];
        let mut queries = Vec::new();
        for (n, f) in requests.iter().enumerate() {
            let parsed = parse_frame(f).unwrap();
            let Packet::Udp { ip, udp } = parsed.packet else {
                panic!("not UDP")
            };
            assert_eq!(
                (ip.src(), ip.dst(), udp.dst_port()),
                (GEN_IP, TARGET_IP, 5000)
            );
            let port = udp.src_port();
            assert!((CLIENT_PORT_BASE..CLIENT_PORT_BASE + 3).contains(&port));
            let index = usize::from(port - CLIENT_PORT_BASE);
            let mut expected = Vec::new();
            mix.encode(n as u64, next_id[index], Some(1232), &mut expected);
            assert_eq!(udp.payload(), &expected[..], "request {n}");
            next_id[index] += 1;
            queries.push((port, udp.payload().to_vec()));
        }
        assert!(next_id.iter().all(|&n| n > 10), "{next_id:?}");
        let start = now_ns() - 1_000_000;
        g.run.as_mut().unwrap().start_ns = start;
        // Answer all but request 7, in reverse order, request 3 twice; the RCODE is that of
        // the question (NOERROR, NXDOMAIN, REFUSED), request 9's with TC set.
        for (n, (port, q)) in queries.iter().enumerate().rev() {
            if n == 7 {
                continue;
            }
            let mut reply = dns_reply(q, [0, 3, 5][n % 3]);
            if n == 9 {
                reply[2] |= 0x02;
            }
            g.send(&datagram_to(*port, &reply)).unwrap();
        }
        g.send(&datagram_to(queries[3].0, &dns_reply(&queries[3].1, 3)))
            .unwrap();
        // Matching nothing: request 7's reply to another port; an ID its port never gave; the
        // question of request 1 under request 0's ID; the query itself (QR clear); 1 byte; a
        // port below the clients'.
        let (port7, q7) = &queries[7];
        let other = if *port7 == CLIENT_PORT_BASE { 1 } else { 0 };
        let mismatches = [
            (CLIENT_PORT_BASE + other, dns_reply(q7, 0)),
            (queries[0].0, {
                let mut r = dns_reply(&queries[0].1, 0);
                r[..2].copy_from_slice(&60_000u16.to_be_bytes());
                r
            }),
            (queries[0].0, {
                let mut r = dns_reply(&queries[1].1, 0);
                r[..2].copy_from_slice(&queries[0].1[..2]);
                r
            }),
            (queries[5].0, queries[5].1.clone()),
            (queries[5].0, vec![0]),
            (1000, dns_reply(&queries[5].1, 0)),
        ];
        for (port, payload) in &mismatches {
            g.send(&datagram_to(*port, payload)).unwrap();
        }
        // A damaged frame: malformed, not a DNS datagram at all.
        let mut bad = datagram_to(queries[2].0, &dns_reply(&queries[2].1, 5));
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        g.send(&bad).unwrap();

        let mut run = g.take_finished(u64::MAX).unwrap();
        while !run.report_windows(0) {}
        let counts = run.dns_counts().unwrap();
        let (s, windows, _) = run.finish(&AdherencePolicy::default());
        assert_eq!((s.scheduled, s.sent, s.send_errors), (100, 100, 0));
        assert_eq!((s.matched, s.lost, s.duplicates), (99, 1, 1));
        assert_eq!((s.unknown, s.late), (0, 0));
        assert_eq!(s.malformed, mismatches.len() as u64 + 1);
        assert_eq!(s.latency.count, 99);
        // Questions 0, 1, 2 are asked by 34, 33 and 33 requests; request 7 (question 1) went
        // unanswered, request 3 (question 0) was answered twice, the second time as NXDOMAIN,
        // which is a duplicate and no answer of its own.
        assert_eq!(
            counts,
            DnsCounts {
                noerror: 34,
                nxdomain: 32,
                refused: 33,
                servfail: 0,
                other_rcode: 0,
                truncated: 1,
                mismatched: mismatches.len() as u64,
            }
        );
        let matched: u64 = windows.iter().map(|w| w.matched).sum();
        assert_eq!(matched, 99);
    }

    #[test]
    fn a_dns_run_needs_its_queries() {
        let mut spec = dns_spec(1.0);
        spec.dns = None;
        let err = Gen::new(GEN_IP, 24).start(&spec, TARGET_MAC).unwrap_err();
        assert!(err.contains("queries"), "{err}");
    }

    proptest::proptest! {
        /// Whatever the target sends to whichever port, a dns run counts it once, as a reply
        /// or as mismatched, and never panics.
        #[test]
        fn any_datagram_to_a_dns_run_is_counted_once(
            datagrams in proptest::collection::vec(
                (
                    proptest::prelude::any::<u16>(),
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1473),
                    proptest::prelude::any::<bool>(),
                ),
                1..8,
            ),
        ) {
            let (mut g, requests) = all_requests(&dns_spec(1_000.0));
            for (port, payload, client) in &datagrams {
                // To a client port, or to any port at all.
                let port = if *client { CLIENT_PORT_BASE + port % 3 } else { *port };
                // Half the time under an ID a query took.
                let mut payload = payload.clone();
                if *client && payload.len() >= 2 {
                    payload[1] %= 8;
                    payload[0] = 0;
                }
                g.send(&datagram_to(port, &payload)).unwrap();
            }
            let run = g.take_finished(u64::MAX).unwrap();
            let c = run.dns_counts().unwrap();
            let (s, _, _) = run.finish(&AdherencePolicy::default());
            let counted = c.noerror + c.nxdomain + c.refused + c.servfail + c.other_rcode
                + c.mismatched;
            proptest::prop_assert_eq!(counted, datagrams.len() as u64);
            proptest::prop_assert_eq!(s.received, datagrams.len() as u64);
            proptest::prop_assert_eq!(s.sent, requests.len() as u64);
        }
    }
}
