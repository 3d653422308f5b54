//! Segment arrival (RFC 9293 §3.10.7) with RFC 5961's in-window checks, RFC 7323's PAWS and
//! TS.Recent, and ACK processing: RTT samples, congestion control, fast retransmit and recovery.

use corral_wire::{TcpFlags, TcpSegment};

use super::recv::Stored;
use super::timers::RTO_AFTER_HANDSHAKE_TIMEOUT;
use super::{
    Connection, Events, RstOwed, SegOptions, State, TIMESTAMP_TICK, TcpError, timestamp_clock,
};
use crate::Nanos;
use crate::seq::Seq;
use crate::stats::TcpDrop;

/// Most ACKs one connection sends per second in answer to segments that anyone who knows the
/// 4-tuple can forge without knowing the sequence space (RFC 5961 §7): challenge ACKs, and the
/// duplicate ACKs answering a PAWS failure or a segment outside the window (see
/// [`Connection::throttled_ack`]).
///
/// The two kinds share one budget rather than each having its own. The budget bounds what a
/// flood of forged segments is reflected as, and one budget keeps that bound at this rate per
/// connection however the attacker mixes forged RSTs, SYNs and out-of-window ACKs; a budget each
/// would double it and protect nothing, since a flood that could exhaust one could as well be
/// made of the other's kind (a forged SYN draws a challenge ACK wherever its sequence number
/// lies). A peer in step with us needs none of these ACKs to recover: the ACKs its recovery
/// depends on (for out-of-order or trimmed data in the window, and for retransmissions,
/// keepalives and window probes just below RCV.NXT) are not throttled. The budget is per
/// connection, never global: a budget shared by connections tells an off-path attacker, who can
/// spend it with forged segments and watch the ACKs of a connection of its own, when a guess at
/// another connection's sequence numbers drew an ACK (CVE-2016-5696, against Linux's global
/// challenge-ACK limit). Linux answers at most one such segment per 500 ms per connection
/// (`tcp_invalid_ratelimit`, challenge ACKs included) and does not throttle segments that carry
/// data or a FIN; here those outside the window are throttled like bare ones, since forging them
/// costs the attacker no more.
pub(super) const THROTTLED_ACKS_PER_SECOND: u32 = 100;

/// TS.Recent is not trusted for PAWS after this long without an update (RFC 7323 §5.5).
///
/// The RFC's 24 days are 2^31 ticks of the fastest clock it recommends (1 ms): past them, a
/// peer's TSval may have advanced by half the timestamp space and look older than TS.Recent.
/// Our own clock, and so that of a Corral peer, ticks every microsecond and gets there in under
/// 36 minutes, and a Linux peer with microsecond timestamps is as fast. The bound is measured
/// on our clock (the time since TS.Recent was last updated) and is 2^30 of our ticks, about 18
/// minutes, which leaves room for a peer whose clock runs up to twice as fast as ours. For a
/// slower peer (Linux's 1 ms clock) it only gives up PAWS's protection early on a connection
/// that was idle anyway.
const PAWS_IDLE: Nanos = (1 << 30) * TIMESTAMP_TICK;

impl Connection {
    /// One segment of a receive batch (the segments a receiver takes off its queue in one
    /// pass), otherwise as [`Connection::on_segment`]. An ACK that only the every-second-segment
    /// rule asks for is owed to the batch's end instead, up to `ack_stretch` full segments:
    /// the caller then calls [`Connection::end_receive_batch`] and transmits. Anything else that
    /// needs an ACK (a hole, a FIN, a window update, out-of-order data) still gets it at once,
    /// and the delayed-ACK timer bounds an owed ACK whose batch end never comes.
    pub fn on_segment_in_batch(&mut self, now: Nanos, seg: &TcpSegment<'_>) -> Events {
        self.in_receive_batch = true;
        let events = self.on_segment(now, seg);
        self.in_receive_batch = false;
        events
    }

    /// Whether a receive batch deferred an ACK that is still owed.
    pub fn ack_owed_by_batch(&self) -> bool {
        self.ack_owed_by_batch
    }

    /// The receive batch ended: an ACK it deferred is due now (the next `poll_transmit` sends
    /// it).
    pub fn end_receive_batch(&mut self) {
        if self.ack_owed_by_batch {
            self.ack_owed_by_batch = false;
            self.ack_now = true;
        }
    }

    /// A segment for this connection arrived (its checksum already verified).
    pub fn on_segment(&mut self, now: Nanos, seg: &TcpSegment<'_>) -> Events {
        self.stats.segments_in += 1;
        let flags = seg.flags();
        if flags.contains(TcpFlags::SYN)
            && (flags.contains(TcpFlags::FIN) || flags.contains(TcpFlags::RST))
        {
            self.stats.drop(TcpDrop::BadFlags);
            return Events::NONE;
        }
        let opts = SegOptions::parse(seg);
        let ev = match self.state {
            State::Closed => {
                self.stats.drop(TcpDrop::NoConnection);
                return Events::NONE;
            }
            State::SynSent => self.on_segment_syn_sent(now, seg, &opts),
            _ => self.on_segment_synchronizing(now, seg, &opts),
        };
        if self.state != State::Closed {
            self.update_persist(now);
        }
        ev
    }

    /// RFC 9293 §3.10.7.3.
    fn on_segment_syn_sent(
        &mut self,
        now: Nanos,
        seg: &TcpSegment<'_>,
        opts: &SegOptions<'_>,
    ) -> Events {
        let flags = seg.flags();
        let ack = Seq(seg.ack());
        let has_ack = flags.contains(TcpFlags::ACK);
        if has_ack && (ack.le(self.iss) || ack.gt(self.snd_max)) {
            if !flags.contains(TcpFlags::RST) {
                self.rst_owed = Some(RstOwed {
                    seq: ack,
                    ack: None,
                });
            }
            self.stats.drop(TcpDrop::AckOfUnsentData);
            return Events::NONE;
        }
        if flags.contains(TcpFlags::RST) {
            if has_ack {
                return self.fail(TcpError::Refused);
            }
            self.stats.drop(TcpDrop::RstOutOfWindow);
            return Events::NONE;
        }
        if !flags.contains(TcpFlags::SYN) {
            self.stats.drop(if has_ack {
                TcpDrop::BadFlags
            } else {
                TcpDrop::NoAckFlag
            });
            return Events::NONE;
        }
        self.take_peer_syn(now, seg, opts);
        if !has_ack {
            // Simultaneous open (RFC 9293 §3.5, figure 7): answer with a SYN-ACK.
            self.state = State::SynReceived;
            self.snd_nxt = self.iss;
            return Events::NONE;
        }
        let mut ev = Events::ESTABLISHED | Events::WRITABLE;
        self.state = State::Established;
        self.ack_now = true;
        self.arm_keepalive(now);
        // Karn's algorithm for the handshake. After our SYN went more than once, the SYN-ACK
        // may be the peer's own retransmission, sent a timeout after the SYN it answers and
        // echoing that SYN's TSval: even an echo of our latest SYN would count the peer's
        // timeout as path delay, and this first sample sets the RTO to three times itself.
        // (The passive side, which the peer acknowledges at once, keeps its sample when the ACK
        // echoes its latest SYN-ACK: `take_rtt_sample` refuses older echoes.)
        let timed = self.stats.syn_retransmits == 0;
        self.take_ack_of_syn(now, ack, opts, timed);
        let payload = seg.payload();
        if !payload.is_empty() || flags.contains(TcpFlags::FIN) {
            ev |= self.take_data(now, self.rcv_nxt, payload, flags.contains(TcpFlags::FIN));
        }
        ev
    }

    /// The peer acknowledged our SYN with `ack`: RTT sample (unless `timed` is false) and
    /// timers.
    fn take_ack_of_syn(&mut self, now: Nanos, ack: Seq, opts: &SegOptions<'_>, timed: bool) {
        self.snd_una = ack;
        if self.snd_nxt.lt(ack) {
            self.snd_nxt = ack;
        }
        self.rexmit_next = ack;
        if timed {
            self.take_rtt_sample(now, ack, opts);
        }
        if self.handshake_timed_out {
            // RFC 6298 §5.7: data transmission begins with an RTO of at least 3 s after a
            // timeout of the SYN or SYN-ACK. It applies after this ACK's own sample, if it gave
            // one (the passive side's, when it echoes the latest SYN-ACK's TSval): the RFC
            // makes no exception for it, where Linux applies the 3 s only when the handshake
            // gave no sample. The first ACK of data then times the path again.
            self.handshake_timed_out = false;
            self.rtt.raise_to(RTO_AFTER_HANDSHAKE_TIMEOUT);
        }
        self.retries = 0;
        self.rtt.reset_backoff();
        self.rto_deadline = (self.snd_una != self.snd_max).then(|| now + self.rtt.rto());
    }

    /// An RTT sample from an ACK of new data, if it times anything (Karn's algorithm).
    ///
    /// With timestamps, the echo of a segment sent before the latest timeout is not trusted: the
    /// peer answers a retransmission it already had (or a duplicate SYN, or a SYN-ACK it
    /// challenges) by echoing its TS.Recent, which RFC 7323 §4.3 does not update from such
    /// segments and which may be as old as the first copy. Such a sample would count the
    /// backed-off timeouts as path delay and inflate the RTO with every loss.
    fn take_rtt_sample(&mut self, now: Nanos, ack: Seq, opts: &SegOptions<'_>) -> Option<Nanos> {
        let sample = match (self.ts_enabled, opts.timestamps) {
            (true, Some(ts)) => {
                let fresh = self
                    .karn_tsval
                    .is_none_or(|t| (ts.tsecr.wrapping_sub(t) as i32) >= 0);
                let ticks = timestamp_clock(now).wrapping_sub(ts.tsecr) as i32;
                if fresh && ticks >= 0 {
                    self.karn_tsval = None;
                    Some(ticks as Nanos * TIMESTAMP_TICK)
                } else {
                    None
                }
            }
            _ => match self.rtt_timed {
                Some((end, sent)) if ack.ge(end) => {
                    self.rtt_timed = None;
                    Some(now.saturating_sub(sent))
                }
                _ => None,
            },
        };
        if let Some(r) = sample {
            self.rtt.sample(r);
        }
        sample
    }

    /// Every state past SYN-SENT: RFC 9293 §3.10.7.4.
    fn on_segment_synchronizing(
        &mut self,
        now: Nanos,
        seg: &TcpSegment<'_>,
        opts: &SegOptions<'_>,
    ) -> Events {
        let flags = seg.flags();
        let seq = Seq(seg.seq());
        let ack = Seq(seg.ack());
        let payload = seg.payload();
        let syn = flags.contains(TcpFlags::SYN);
        let fin = flags.contains(TcpFlags::FIN);
        let rst = flags.contains(TcpFlags::RST);
        let has_ack = flags.contains(TcpFlags::ACK);

        if self.state == State::SynReceived && syn && seq == self.irs {
            if has_ack && ack.gt(self.snd_una) && ack.le(self.snd_max) {
                // Simultaneous open: the peer's SYN-ACK answers our SYN (RFC 9293 figure 8).
                return self.complete_handshake(now, seg, opts);
            }
            if !has_ack {
                // The peer retransmitted its SYN: our SYN-ACK was lost. The SYN-ACK sent again
                // echoes this copy's TSval (RFC 7323 §4.3: its sequence number is not above
                // the last ACK we sent), so the peer can time it.
                if self.ts_enabled
                    && let Some(ts) = opts.timestamps
                    && (ts.tsval.wrapping_sub(self.ts_recent) as i32) >= 0
                {
                    self.ts_recent = ts.tsval;
                    self.ts_recent_at = now;
                }
                self.karn_tsval = Some(timestamp_clock(now));
                self.snd_nxt = self.iss;
                self.stats.duplicate_segments += 1;
                return Events::NONE;
            }
        }

        // PAWS (RFC 7323 §5.3). The ACK it asks for is throttled wherever the segment's
        // sequence number lies: a random TSval looks older than TS.Recent half the time, so
        // forging a PAWS failure takes no knowledge of the window, and a peer in step with us
        // sends its retransmissions and probes with fresh timestamps.
        if self.ts_enabled
            && !rst
            && let Some(ts) = opts.timestamps
            && (ts.tsval.wrapping_sub(self.ts_recent) as i32) < 0
            && !self.ts_recent_expired(now)
        {
            self.stats.drop(TcpDrop::PawsRejected);
            self.throttled_ack(now);
            return Events::NONE;
        }

        // Acceptability (RFC 9293 §3.10.7.4, first check).
        let seg_len = payload.len() as u32 + u32::from(syn) + u32::from(fin);
        let wnd = self.rbuf.window() as u32;
        let in_window = |s: Seq| s.ge(self.rcv_nxt) && (s - self.rcv_nxt) < wnd;
        let acceptable = if seg_len == 0 {
            seq == self.rcv_nxt || in_window(seq)
        } else {
            in_window(seq)
                || in_window(seq + (seg_len - 1))
                // A zero window still takes ACKs, RSTs and the FIN at RCV.NXT (§3.10.7.4).
                || (wnd == 0 && seq == self.rcv_nxt)
                || (seq.lt(self.rcv_nxt) && (seq + seg_len).gt(self.rcv_nxt + wnd))
        };
        if !acceptable {
            if rst {
                self.stats.drop(TcpDrop::RstOutOfWindow);
                return Events::NONE;
            }
            if syn {
                // RFC 5961 §4: a SYN draws a challenge ACK whatever its sequence number (as in
                // Linux), so an old or forged one is throttled like one in the window.
                self.stats.drop(TcpDrop::SynChallenged);
                self.challenge_ack(now);
                return Events::NONE;
            }
            if (seq + seg_len).le(self.rcv_nxt) {
                // Old data, or a retransmitted FIN whose ACK was lost.
                self.stats.duplicate_segments += 1;
                if self.state == State::TimeWait && fin {
                    self.close_deadline = Some(now + self.config.time_wait);
                }
            } else {
                self.stats.drop(TcpDrop::OutOfWindow);
            }
            if self.in_recent_past(seq) {
                // Where a peer in step with us sends what waits for this ACK: a retransmission
                // of data whose ACK was lost, a keepalive or a zero-window probe. Answered
                // every time; an attacker who does not know the window lands here only by a
                // guess that succeeds once in 2^32 / recv_buffer.
                self.stats.out_of_window_acks += 1;
                self.ack_now = true;
            } else {
                self.throttled_ack(now);
            }
            return Events::NONE;
        }

        // RST (RFC 5961 §3).
        if rst {
            if seq != self.rcv_nxt {
                self.stats.drop(TcpDrop::RstChallenged);
                self.challenge_ack(now);
                return Events::NONE;
            }
            return match self.state {
                State::SynReceived if self.passive => {
                    self.error = Some(TcpError::Reset);
                    self.enter_closed() | Events::ERROR
                }
                State::SynReceived => self.fail(TcpError::Refused),
                State::Closing | State::LastAck | State::TimeWait => self.enter_closed(),
                _ => self.fail(TcpError::Reset),
            };
        }

        // SYN on a synchronized connection (RFC 5961 §4).
        if syn {
            self.stats.drop(TcpDrop::SynChallenged);
            self.challenge_ack(now);
            return Events::NONE;
        }

        if !has_ack {
            self.stats.drop(TcpDrop::NoAckFlag);
            return Events::NONE;
        }

        let mut ev = Events::NONE;
        if self.state == State::SynReceived {
            if ack.le(self.snd_una) || ack.gt(self.snd_max) {
                self.rst_owed = Some(RstOwed {
                    seq: ack,
                    ack: None,
                });
                self.stats.drop(TcpDrop::AckOfUnsentData);
                return Events::NONE;
            }
            ev |= self.complete_handshake(now, seg, opts);
            if self.state == State::Closed {
                return ev;
            }
        } else {
            // RFC 5961 §5: ACKs outside [SND.UNA - MAX.SND.WND, SND.MAX].
            if ack.gt(self.snd_max) {
                self.stats.drop(TcpDrop::AckOfUnsentData);
                self.challenge_ack(now);
                return Events::NONE;
            }
            if ack.lt(self.snd_una + self.max_snd_wnd.wrapping_neg()) {
                self.stats.drop(TcpDrop::AckTooOld);
                self.challenge_ack(now);
                return Events::NONE;
            }
            ev |= self.take_ack(
                now,
                seq,
                ack,
                seg.window(),
                opts,
                payload.is_empty() && !fin,
            );
            if self.state == State::Closed {
                return ev;
            }
        }

        // TS.Recent (RFC 7323 §4.3): from segments that cover the last ACK we sent. An expired
        // TS.Recent (§5.5) is replaced by whatever the peer's clock says now.
        if self.ts_enabled
            && let Some(ts) = opts.timestamps
            && seq.le(self.last_ack_sent)
            && ((ts.tsval.wrapping_sub(self.ts_recent) as i32) >= 0 || self.ts_recent_expired(now))
        {
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        }

        if self.keepalive_deadline.is_some() {
            self.arm_keepalive(now);
        }

        if !payload.is_empty() || fin {
            ev |= self.take_data(now, seq, payload, fin);
        }
        ev
    }

    /// Whether TS.Recent went without an update for so long that it says nothing about the
    /// peer's clock any more (RFC 7323 §5.5).
    #[inline]
    fn ts_recent_expired(&self, now: Nanos) -> bool {
        now.saturating_sub(self.ts_recent_at) >= PAWS_IDLE
    }

    /// Whether an unacceptable segment starting at `seq` lies where a peer in step with us may
    /// still send: below RCV.NXT by at most the receive buffer, plus one for a probe at the
    /// peer's SND.UNA - 1.
    ///
    /// The peer never sends past a right edge we advertised, every window we advertise fits in
    /// the receive buffer, and we received no more than it sent, so its SND.UNA is at most the
    /// buffer below our RCV.NXT; its retransmissions start at SND.UNA or later, its keepalives
    /// and window probes (ours too) one below.
    fn in_recent_past(&self, seq: Seq) -> bool {
        seq.lt(self.rcv_nxt) && (self.rcv_nxt - seq) as usize <= self.config.recv_buffer + 1
    }

    /// An ACK for a segment anyone knowing the 4-tuple can forge (a PAWS failure, a segment
    /// outside the window), within the budget it shares with challenge ACKs.
    fn throttled_ack(&mut self, now: Nanos) {
        if self.throttle(now) {
            self.stats.out_of_window_acks += 1;
        }
    }

    /// RFC 5961's challenge ACK, within the budget it shares with [`Connection::throttled_ack`].
    fn challenge_ack(&mut self, now: Nanos) {
        if self.throttle(now) {
            self.stats.challenge_acks += 1;
        }
    }

    /// Owes an ACK if the connection's budget of [`THROTTLED_ACKS_PER_SECOND`] allows (RFC 5961
    /// §7), so that a flood of forged segments is not reflected one for one; counts it as
    /// rate-limited otherwise.
    fn throttle(&mut self, now: Nanos) -> bool {
        if now.saturating_sub(self.throttle_window_start) >= 1_000_000_000 {
            self.throttle_window_start = now;
            self.throttled_in_window = 0;
        }
        if self.throttled_in_window >= THROTTLED_ACKS_PER_SECOND {
            self.stats.acks_rate_limited += 1;
            return false;
        }
        self.throttled_in_window += 1;
        self.ack_now = true;
        true
    }

    /// SYN-RECEIVED to ESTABLISHED: the peer acknowledged our SYN.
    fn complete_handshake(
        &mut self,
        now: Nanos,
        seg: &TcpSegment<'_>,
        opts: &SegOptions<'_>,
    ) -> Events {
        let ack = Seq(seg.ack());
        self.state = if self.fin_queued {
            State::FinWait1
        } else {
            State::Established
        };
        self.take_ack_of_syn(now, ack, opts, true);
        self.snd_wnd = u32::from(seg.window()) << self.snd_wscale;
        self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
        self.snd_wl1 = Seq(seg.seq());
        self.snd_wl2 = ack;
        self.arm_keepalive(now);
        let mut ev = Events::ESTABLISHED | Events::WRITABLE;
        let payload = seg.payload();
        let fin = seg.flags().contains(TcpFlags::FIN);
        if seg.flags().contains(TcpFlags::SYN) {
            // The simultaneous-open SYN-ACK: its SYN is already counted; acknowledge it.
            self.ack_now = true;
            if !payload.is_empty() || fin {
                ev |= self.take_data(now, Seq(seg.seq()) + 1, payload, fin);
            }
        }
        ev
    }

    /// ACK processing in a synchronized state for an acceptable `ack`.
    fn take_ack(
        &mut self,
        now: Nanos,
        seq: Seq,
        ack: Seq,
        window: u16,
        opts: &SegOptions<'_>,
        pure_ack: bool,
    ) -> Events {
        let mut ev = Events::NONE;
        let window = u32::from(window) << self.snd_wscale;
        self.probes_unanswered = 0;
        let mut sack_news = false;
        if self.sack_enabled
            && let Some(blocks) = opts.sack
        {
            for (l, r) in blocks {
                sack_news |= self
                    .scoreboard
                    .add(Seq(l), Seq(r), self.snd_una, self.snd_max);
            }
        }
        let ack_advanced = ack.gt(self.snd_una);
        if ack_advanced {
            let flight_before = self.snd_max - self.snd_una;
            let rtt = self.take_rtt_sample(now, ack, opts);
            self.rtt.reset_backoff();
            self.retries = 0;
            let data_end = self.buf_seq + self.sbuf.len() as u32;
            let mut data_acked = 0;
            if ack.gt(self.buf_seq) {
                data_acked = ack.min(data_end) - self.buf_seq;
                self.sbuf.consume(data_acked as usize);
                self.buf_seq += data_acked;
                if data_acked > 0 && !self.fin_queued {
                    ev |= Events::WRITABLE;
                }
            }
            let acked = ack - self.snd_una;
            self.snd_una = ack;
            if self.snd_nxt.lt(ack) {
                self.snd_nxt = ack;
            }
            self.scoreboard.ack(ack);
            if self.snd_una == self.snd_max {
                // Nothing sent before the timeout is left to answer for: later echoes are of
                // segments sent since (and a value kept through a long idle time would, once the
                // clock moved 2^31 ticks on, make every fresh echo look old).
                self.karn_tsval = None;
            }
            if self.in_recovery {
                if ack.ge(self.recover) {
                    // Full acknowledgment (RFC 6582 §3.2 step 3).
                    self.in_recovery = false;
                    self.inflation = 0;
                    self.rexmit_budget = 0;
                    let flight = self.snd_max - self.snd_una;
                    let cwnd = self.cc.ssthresh().min(flight + self.data_mss());
                    self.cc.on_recovery_end(now, cwnd);
                } else {
                    // Partial acknowledgment (step 4): retransmit the next hole, deflate.
                    self.inflation = self.inflation.saturating_sub(acked);
                    if acked >= self.data_mss() {
                        self.inflation += self.data_mss();
                    }
                    self.rexmit_budget += 1;
                    self.rexmit_next = self.rexmit_next.max(ack);
                }
            } else if data_acked > 0 {
                self.cc.on_ack(now, data_acked, flight_before, rtt);
            }
            self.dup_acks = 0;
            // Restart the timer for what is still in flight (RFC 6298 §5.3); after an RTO's
            // go-back-N nothing is until the next transmission arms it again.
            self.rto_deadline = (self.snd_nxt != self.snd_una).then(|| now + self.rtt.rto());
            if self.fin_acked() {
                ev |= self.our_fin_acked(now);
            }
        } else if ack == self.snd_una
            && pure_ack
            && window == self.snd_wnd
            && self.snd_max != self.snd_una
        {
            self.stats.dup_acks_in += 1;
            self.dup_acks += 1;
            if self.in_recovery {
                // Each duplicate ACK means a segment left the network (RFC 5681 §3.2 step 4):
                // with SACK, spend it on the next hole while holes remain, else on new data.
                if sack_news && self.next_retransmit().is_some() {
                    self.rexmit_budget = (self.rexmit_budget + 1).min(4);
                } else {
                    self.inflation += self.data_mss();
                }
            } else if self.dup_acks >= 3
                || (sack_news && self.scoreboard.sacked_bytes() >= 3 * self.data_mss())
            {
                self.enter_recovery(now);
            }
        }
        // Window update (RFC 9293 §3.10.7.4, SND.WL1/WL2), and, as in Linux, from every ACK
        // that moves SND.UNA: the peer acknowledges in order, so such an ACK is its newest word
        // on the window. SND.WL1 alone misses it when the peer retransmits below a sequence
        // number an earlier segment carried (after its go-back-N, its ACKs carry SND.MAX);
        // the old window, now counted from the new SND.UNA, would let us send past the edge.
        if ack_advanced || self.snd_wl1.lt(seq) || (self.snd_wl1 == seq && self.snd_wl2.le(ack)) {
            self.snd_wnd = window;
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
        }
        ev
    }

    /// Three duplicate ACKs (or SACK evidence of as much): RFC 6582 §3.2 steps 1–2.
    fn enter_recovery(&mut self, now: Nanos) {
        if !self.snd_una.gt(self.recover) {
            // Still within the window of a previous recovery or RTO (RFC 6582 §3.2 step 1).
            return;
        }
        let flight = self.snd_max - self.snd_una;
        self.cc.on_congestion_event(now, flight);
        self.stats.recoveries += 1;
        self.in_recovery = true;
        self.recover = self.snd_max;
        self.inflation = 3 * self.data_mss();
        self.rexmit_next = self.snd_una;
        self.rexmit_budget = 1;
        self.rtt_timed = None;
    }

    /// Our FIN was acknowledged.
    fn our_fin_acked(&mut self, now: Nanos) -> Events {
        match self.state {
            State::FinWait1 => {
                self.state = State::FinWait2;
                self.keepalive_deadline = None;
                if self.app_closed {
                    // Nobody will read: do not wait forever for the peer's FIN.
                    self.close_deadline = Some(now + self.config.time_wait);
                }
                Events::WRITABLE
            }
            State::Closing => self.enter_time_wait(now),
            State::LastAck => self.enter_closed(),
            _ => Events::NONE,
        }
    }

    /// Data and FIN of an acceptable segment starting at `seq`.
    fn take_data(&mut self, now: Nanos, seq: Seq, payload: &[u8], fin: bool) -> Events {
        let mut ev = Events::NONE;
        let receiving = matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        );
        if !payload.is_empty() && (!receiving || self.fin_received) {
            // Data after the peer's FIN: ignored (RFC 9293 §3.10.7.4, eighth check).
            self.stats.duplicate_segments += 1;
            self.ack_now = true;
            return ev;
        }
        if self.app_closed && !payload.is_empty() {
            // Nobody will read it: tell the peer at once, as Linux does.
            self.rst_owed = Some(RstOwed {
                seq: self.snd_max,
                ack: Some(self.rcv_nxt),
            });
            return self.enter_closed();
        }
        let mut seq = seq;
        let mut data = payload;
        let mut fin = fin;
        if seq.lt(self.rcv_nxt) {
            let skip = ((self.rcv_nxt - seq) as usize).min(data.len());
            data = &data[skip..];
            seq += skip as u32;
            self.stats.duplicate_segments += 1;
            if seq.lt(self.rcv_nxt) {
                // Only an old FIN is left.
                fin = false;
            }
        }
        let room = self.rbuf.window() - (seq - self.rcv_nxt) as usize;
        if data.len() > room {
            data = &data[..room];
            fin = false;
            self.stats.drop(TcpDrop::BeyondWindow);
            self.ack_now = true;
        }
        if !data.is_empty() {
            let had_ooo = self.rbuf.has_ooo();
            match self.rbuf.store(self.rcv_nxt, seq, data) {
                Stored::InOrder(advanced) => {
                    self.rcv_nxt += advanced;
                    self.stats.bytes_in += data.len() as u64;
                    ev |= Events::READABLE;
                    if had_ooo {
                        // A hole filled: ACK at once (RFC 5681 §4.2).
                        self.ack_now = true;
                    } else {
                        self.schedule_ack(now, data.len());
                    }
                }
                Stored::OutOfOrder => {
                    self.stats.bytes_in += data.len() as u64;
                    self.stats.ooo_segments += 1;
                    self.ack_now = true;
                }
                Stored::QueueFull => {
                    self.stats.drop(TcpDrop::OooQueueFull);
                    self.ack_now = true;
                }
            }
        }
        if fin {
            let fin_seq = seq + data.len() as u32;
            if fin_seq.ge(self.rcv_nxt) {
                self.peer_fin = Some(fin_seq);
            }
            self.ack_now = true;
        }
        if let Some(f) = self.peer_fin
            && f == self.rcv_nxt
            && !self.fin_received
        {
            ev |= self.take_fin(now);
        }
        ev
    }

    /// The peer's FIN, in order.
    fn take_fin(&mut self, now: Nanos) -> Events {
        self.rcv_nxt += 1;
        self.fin_received = true;
        self.peer_fin = None;
        self.ack_now = true;
        let ev = Events::READABLE;
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                // Our FIN unacknowledged (else we would be in FIN-WAIT-2): simultaneous close.
                self.state = State::Closing;
            }
            State::FinWait2 => return ev | self.enter_time_wait(now),
            _ => {}
        }
        ev
    }

    /// Delayed ACK policy (RFC 9293 §3.8.6.3, RFC 5681 §4.2): every second full-sized segment
    /// is acknowledged at once (within a receive batch, at the batch's end, at most every
    /// `ack_stretch` segments), anything else within `delayed_ack`.
    fn schedule_ack(&mut self, now: Nanos, len: usize) {
        if self.config.delayed_ack == 0 {
            self.ack_now = true;
            return;
        }
        if len as u32 >= self.data_mss().min(self.rcv_mss()) {
            self.full_segments_unacked += 1;
            if self.full_segments_unacked >= 2 {
                if self.in_receive_batch && self.full_segments_unacked < self.config.ack_stretch {
                    self.ack_owed_by_batch = true;
                } else {
                    self.ack_now = true;
                    return;
                }
            }
        }
        if self.delack_deadline.is_none() {
            self.delack_deadline = Some(now + self.config.delayed_ack);
        }
    }

    /// The largest payload we expect from the peer: our MSS less the options it sends.
    fn rcv_mss(&self) -> u32 {
        let opts = if self.ts_enabled { 12 } else { 0 };
        u32::from(self.config.mss) - opts
    }
}
