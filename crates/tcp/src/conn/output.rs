//! What to send next: RSTs owed, SYNs, recovery retransmissions, data within the windows (with
//! Nagle and sender-side silly window avoidance), probes, then bare ACKs. Each segment is built
//! in the caller's buffer with its payload copied once from the send ring.

use corral_wire::{SackList, TcpFlags, TcpHeader, TcpOptionSet, Timestamps};

use super::{Connection, RstOwed, State, timestamp_clock};
use crate::Nanos;
use crate::seq::Seq;

impl Connection {
    /// Writes the next segment to send, header (checksum included) and payload, into `out`,
    /// which must hold at least `MAX_HEADER + mss` bytes; returns its length, or `None` when
    /// nothing is due now.
    pub fn poll_transmit(&mut self, now: Nanos, out: &mut [u8]) -> Option<usize> {
        if let Some(rst) = self.rst_owed.take() {
            return self.emit_rst(now, out, rst);
        }
        match self.state {
            State::Closed | State::SynSent if self.snd_nxt != self.iss => None,
            State::Closed => None,
            State::SynSent | State::SynReceived if self.snd_nxt == self.iss => {
                self.emit_syn(now, out)
            }
            State::SynReceived => {
                if self.ack_now {
                    let opts = self.segment_options(now, false);
                    self.emit(now, out, self.snd_max, TcpFlags::ACK, 0, 0, opts)
                        .map(|(n, _)| n)
                } else {
                    None
                }
            }
            _ => {
                let sent = self.transmit_synchronized(now, out);
                if sent.is_none() {
                    self.update_persist(now);
                }
                sent
            }
        }
    }

    fn transmit_synchronized(&mut self, now: Nanos, out: &mut [u8]) -> Option<usize> {
        if self.in_recovery && self.rexmit_budget > 0 {
            if let Some((seq, len)) = self.next_retransmit() {
                let sent = self.emit_from(now, out, seq, len);
                if let Some((n, payload, fin)) = sent {
                    self.rexmit_budget -= 1;
                    self.rexmit_next = seq + payload + u32::from(fin);
                    self.stats.fast_retransmits += 1;
                    self.rtt_timed = None;
                    return Some(n);
                }
            }
            self.rexmit_budget = 0;
        }
        if let Some(n) = self.transmit_new(now, out) {
            return Some(n);
        }
        if self.ack_now {
            let opts = self.segment_options(now, true);
            return self
                .emit(now, out, self.ack_only_seq(), TcpFlags::ACK, 0, 0, opts)
                .map(|(n, _)| n);
        }
        if self.probe_owed {
            // A segment the peer must answer with an ACK (RFC 9293 §3.8.6.1, §3.8.4): one
            // sequence number below what it expects, and no data. Being unacceptable, it
            // acknowledges nothing, so a delayed ACK still owed stays owed.
            self.probe_owed = false;
            let opts = self.segment_options(now, true);
            let owed = (
                self.delack_deadline,
                self.full_segments_unacked,
                self.ack_owed_by_batch,
            );
            let sent = self
                .emit(now, out, self.snd_una + u32::MAX, TcpFlags::ACK, 0, 0, opts)
                .map(|(n, _)| n);
            (
                self.delack_deadline,
                self.full_segments_unacked,
                self.ack_owed_by_batch,
            ) = owed;
            return sent;
        }
        None
    }

    /// The sequence number of a segment without data: SND.MAX, where the peer's window reaches
    /// it, else the window's right edge (as Linux's `tcp_acceptable_seq`).
    ///
    /// Not SND.NXT: after an RTO's go-back-N it lies below what the peer may have received
    /// already, and a bare segment there would be unacceptable to it. Not SND.MAX beyond the
    /// edge: when what we sent past the edge was lost and the peer's window then closed (its
    /// application stopped reading), the peer takes a zero-length segment only at its
    /// RCV.NXT, which is SND.UNA, the edge of a zero window. There SND.MAX would be dropped as
    /// out of window with the ACK it carries, so the peer would never learn that we received
    /// its data, and, its buffer full of our data that its application cannot drain until it
    /// can send, both sides would wait for each other for good.
    pub(super) fn ack_only_seq(&self) -> Seq {
        let edge = self.snd_una + self.snd_wnd;
        if self.snd_max.le(edge) {
            self.snd_max
        } else {
            edge
        }
    }

    /// The next hole to retransmit in recovery: SND.UNA's segment without SACK information
    /// (NewReno), else the first unSACKed range below the highest SACKed byte.
    pub(super) fn next_retransmit(&self) -> Option<(Seq, u32)> {
        let from = self.rexmit_next.max(self.snd_una);
        let max = self.data_mss();
        if self.scoreboard.is_empty() {
            return (from == self.snd_una && self.snd_una.lt(self.snd_max))
                .then(|| (self.snd_una, (self.snd_max - self.snd_una).min(max)));
        }
        let highest = self.scoreboard.highest()?;
        self.scoreboard.next_hole(from, highest, max)
    }

    /// Sends (again) up to `len` sequence numbers from `seq` below SND.MAX; returns the segment
    /// length, the payload length and whether it carried the FIN.
    fn emit_from(
        &mut self,
        now: Nanos,
        out: &mut [u8],
        seq: Seq,
        len: u32,
    ) -> Option<(usize, u32, bool)> {
        let data_end = self.buf_seq + self.sbuf.len() as u32;
        let opts = self.segment_options(now, true);
        let room = self.send_mss.saturating_sub(opts.len() as u32);
        let payload = len.min(data_end.max(seq) - seq).min(room);
        let fin = self.fin_queued && seq + payload == data_end && self.snd_max.gt(data_end);
        if payload == 0 && !fin {
            return None;
        }
        let flags = self.data_flags(seq, payload, fin);
        let offset = (seq - self.buf_seq) as usize;
        let (n, sent) = self.emit(now, out, seq, flags, offset, payload as usize, opts)?;
        let fin = fin && sent == payload as usize;
        Some((n, sent as u32, fin))
    }

    /// ACK, PSH on the segment that empties the send buffer, and FIN.
    fn data_flags(&self, seq: Seq, len: u32, fin: bool) -> TcpFlags {
        let data_end = self.buf_seq + self.sbuf.len() as u32;
        let mut flags = TcpFlags::ACK;
        if len > 0 && seq + len == data_end {
            flags = flags | TcpFlags::PSH;
        }
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        flags
    }

    /// Data (and the FIN) from SND.NXT, within the send and congestion windows.
    fn transmit_new(&mut self, now: Nanos, out: &mut [u8]) -> Option<usize> {
        let data_end = self.buf_seq + self.sbuf.len() as u32;
        // Resending after an RTO (go-back-N): what the peer SACKed is skipped.
        let mut hole = u32::MAX;
        if self.snd_nxt.lt(self.snd_max) && !self.scoreboard.is_empty() {
            match self
                .scoreboard
                .next_hole(self.snd_nxt, self.snd_max, u32::MAX)
            {
                Some((seq, len)) => {
                    self.snd_nxt = seq;
                    hole = len;
                }
                None => self.snd_nxt = self.snd_max,
            }
        }
        let fin_pending = self.fin_queued && self.snd_nxt.le(data_end);
        let avail = if self.snd_nxt.lt(data_end) {
            (data_end - self.snd_nxt).min(hole)
        } else {
            0
        };
        if avail == 0 && !fin_pending {
            return None;
        }
        let flight = self.snd_nxt - self.snd_una;
        if flight == 0
            && self.snd_nxt == self.snd_max
            && now.saturating_sub(self.last_send) > self.rtt.rto()
        {
            // RFC 5681 §4.1: after an idle period the old window says nothing about the path.
            self.cc.on_idle_restart(now);
        }
        // SACKed bytes still fill the peer's buffer but have left the network: they count
        // against its window, not against cwnd (outside recovery, whose inflation already
        // counts them).
        let in_network = if self.in_recovery {
            flight
        } else {
            flight - self.scoreboard.sacked_below(self.snd_nxt)
        };
        let usable = self
            .snd_wnd
            .saturating_sub(flight)
            .min(self.cwnd().saturating_sub(in_network));
        let opts = self.segment_options(now, true);
        let header = 20 + opts.len();
        let max_payload = self
            .send_mss
            .saturating_sub(opts.len() as u32)
            .min(out.len().saturating_sub(header) as u32);
        let len = avail.min(usable).min(max_payload);
        let fin = fin_pending && self.snd_nxt + len == data_end;
        if len == 0 && !fin {
            return None;
        }
        if len < max_payload && !fin && self.snd_nxt == self.snd_max {
            let all_queued = len == avail;
            let may_send = if all_queued {
                // Nagle (RFC 9293 §3.7.4): one small segment in flight at a time.
                self.config.nodelay || flight == 0
            } else {
                // Sender silly window avoidance (RFC 9293 §3.8.6.2.1).
                flight == 0 || len >= self.max_snd_wnd / 2
            };
            if !may_send {
                return None;
            }
        }
        let seq = self.snd_nxt;
        let flags = self.data_flags(seq, len, fin);
        let offset = (seq - self.buf_seq) as usize;
        let (n, sent) = self.emit(now, out, seq, flags, offset, len as usize, opts)?;
        let sent = sent as u32;
        let fin = fin && sent == len;
        let end = seq + sent + u32::from(fin);
        if seq.lt(self.snd_max) {
            self.stats.rto_retransmits += 1;
        } else if self.rtt_timed.is_none() && !self.ts_enabled {
            self.rtt_timed = Some((end, now));
        }
        self.snd_nxt = end;
        if end.gt(self.snd_max) {
            self.snd_max = end;
        }
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
        self.persist_deadline = None;
        Some(n)
    }

    /// The SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED), first or again.
    fn emit_syn(&mut self, now: Nanos, out: &mut [u8]) -> Option<usize> {
        let active = self.state == State::SynSent;
        let opts = TcpOptionSet {
            mss: Some(self.config.mss),
            window_scale: self.offered_wscale,
            sack_permitted: if active {
                self.config.sack
            } else {
                self.sack_enabled
            },
            timestamps: (if active {
                self.config.timestamps
            } else {
                self.ts_enabled
            })
            .then(|| Timestamps {
                tsval: timestamp_clock(now),
                tsecr: if active { 0 } else { self.ts_recent },
            }),
            sack: SackList::EMPTY,
        };
        let flags = if active {
            TcpFlags::SYN
        } else {
            TcpFlags::SYN | TcpFlags::ACK
        };
        let (n, _) = self.emit(now, out, self.iss, flags, 0, 0, opts)?;
        if self.snd_max != self.iss {
            self.stats.syn_retransmits += 1;
            self.rtt_timed = None;
        } else {
            self.rtt_timed = Some((self.iss + 1, now));
        }
        self.snd_nxt = self.iss + 1;
        self.snd_max = self.snd_max.max(self.snd_nxt);
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
        Some(n)
    }

    fn emit_rst(&mut self, now: Nanos, out: &mut [u8], rst: RstOwed) -> Option<usize> {
        let (flags, ack) = match rst.ack {
            Some(a) => (TcpFlags::RST | TcpFlags::ACK, a),
            None => (TcpFlags::RST, Seq(0)),
        };
        let h = TcpHeader {
            src_port: self.ends.local.port(),
            dst_port: self.ends.remote.port(),
            seq: rst.seq.0,
            ack: ack.0,
            flags,
            window: 0,
            urgent: 0,
            options: TcpOptionSet::default(),
        };
        let n = h
            .emit(out, 0, *self.ends.local.ip(), *self.ends.remote.ip())
            .ok()?;
        self.stats.segments_out += 1;
        self.last_send = now;
        Some(n)
    }

    /// The options of a non-SYN segment: timestamps, and SACK blocks while data is queued out
    /// of order.
    fn segment_options(&self, now: Nanos, ack: bool) -> TcpOptionSet {
        let mut opts = TcpOptionSet::default();
        if self.ts_enabled {
            opts.timestamps = Some(Timestamps {
                tsval: timestamp_clock(now),
                tsecr: self.ts_recent,
            });
        }
        if ack && self.sack_enabled && self.rbuf.has_ooo() {
            self.rbuf.sack_blocks(&mut opts.sack, SackList::MAX);
        }
        opts
    }

    /// Builds one segment in `out` with `len` bytes of the send ring from `offset` (fewer if
    /// `out` is short); returns the segment's length and the payload's.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        now: Nanos,
        out: &mut [u8],
        seq: Seq,
        flags: TcpFlags,
        offset: usize,
        len: usize,
        options: TcpOptionSet,
    ) -> Option<(usize, usize)> {
        let syn = flags.contains(TcpFlags::SYN);
        let has_ack = flags.contains(TcpFlags::ACK);
        let window = if syn {
            self.rbuf.window().min(usize::from(u16::MAX)) as u16
        } else {
            self.window_field()
        };
        let h = TcpHeader {
            src_port: self.ends.local.port(),
            dst_port: self.ends.remote.port(),
            seq: seq.0,
            ack: if has_ack { self.rcv_nxt.0 } else { 0 },
            flags,
            window,
            urgent: 0,
            options,
        };
        let hl = h.header_len();
        let len = len.min(out.len().checked_sub(hl)?);
        let payload = self.sbuf.peek_summed(offset, &mut out[hl..hl + len]);
        let n = h
            .emit_summed(
                out,
                len,
                payload,
                *self.ends.local.ip(),
                *self.ends.remote.ip(),
            )
            .ok()?;
        self.stats.segments_out += 1;
        self.stats.bytes_out += len as u64;
        self.last_send = now;
        if has_ack {
            self.ack_now = false;
            self.delack_deadline = None;
            self.full_segments_unacked = 0;
            self.ack_owed_by_batch = false;
            self.last_ack_sent = self.rcv_nxt;
            if !syn {
                let edge = self.rcv_nxt + (u32::from(window) << self.rcv_wscale);
                if edge.gt(self.rcv_adv) {
                    self.rcv_adv = edge;
                }
            }
        }
        Some((n, len))
    }
}
