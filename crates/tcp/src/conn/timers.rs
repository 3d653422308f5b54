//! Timers: retransmission (RFC 6298), delayed ACK, persist (zero-window probes), keepalive,
//! TIME-WAIT and the FIN-WAIT-2 bound of a closed connection. Each is one deadline; the caller
//! sleeps until the earliest.

use super::{Connection, Events, State, TcpError, timestamp_clock};
use crate::Nanos;

/// The RTO once data transmission begins after the retransmission timer expired during the
/// handshake, if it was lower (RFC 6298 §5.7).
pub(super) const RTO_AFTER_HANDSHAKE_TIMEOUT: Nanos = 3_000_000_000;

impl Connection {
    /// The earliest time [`Connection::on_timer`] has work to do.
    pub fn next_deadline(&self) -> Option<Nanos> {
        [
            self.rto_deadline,
            self.delack_deadline,
            self.persist_deadline,
            self.keepalive_deadline,
            self.close_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The deadline from [`Connection::next_deadline`] passed: runs every expired timer.
    pub fn on_timer(&mut self, now: Nanos) -> Events {
        let due = |d: Option<Nanos>| d.is_some_and(|d| d <= now);
        let mut ev = Events::NONE;
        if due(self.close_deadline) {
            self.close_deadline = None;
            if matches!(self.state, State::TimeWait | State::FinWait2) {
                return self.enter_closed();
            }
        }
        if due(self.rto_deadline) {
            ev |= self.on_rto(now);
            if self.state == State::Closed {
                return ev;
            }
        }
        if due(self.delack_deadline) {
            self.delack_deadline = None;
            if !self.ack_now {
                self.ack_now = true;
                self.stats.delayed_acks += 1;
            }
        }
        if due(self.persist_deadline) {
            self.probes_unanswered += 1;
            if self.probes_unanswered > self.config.max_retransmits {
                return ev | self.fail(TcpError::TimedOut);
            }
            self.probe_owed = true;
            self.stats.zero_window_probes += 1;
            self.persist_backoff = (self.persist_backoff + 1).min(40);
            self.persist_deadline = Some(now + self.persist_interval());
        }
        if due(self.keepalive_deadline)
            && let Some(k) = self.config.keepalive
        {
            if self.snd_una != self.snd_max || self.persist_deadline.is_some() {
                // Data in flight: the retransmission timer watches the peer.
                self.keepalive_deadline = Some(now + k.idle);
            } else if self.keepalive_sent >= k.probes {
                return ev | self.fail(TcpError::TimedOut);
            } else {
                self.probe_owed = true;
                self.stats.keepalive_probes += 1;
                self.keepalive_sent += 1;
                self.keepalive_deadline = Some(now + k.interval);
            }
        }
        ev
    }

    /// The retransmission timer expired (RFC 6298 §5.4–5.6, RFC 5681 §3.1).
    fn on_rto(&mut self, now: Nanos) -> Events {
        self.rto_deadline = None;
        let handshake = matches!(self.state, State::SynSent | State::SynReceived);
        if !handshake && self.snd_una == self.snd_max {
            return Events::NONE;
        }
        self.stats.timeouts += 1;
        self.retries += 1;
        let limit = if handshake {
            self.config.syn_retransmits
        } else {
            self.config.max_retransmits
        };
        if self.retries > limit {
            return self.fail(TcpError::TimedOut);
        }
        self.rtt.back_off();
        self.rtt_timed = None;
        self.karn_tsval = Some(timestamp_clock(now));
        self.probe_owed = false;
        if handshake {
            self.handshake_timed_out = true;
            self.snd_nxt = self.iss;
            self.rto_deadline = Some(now + self.rtt.rto());
            return Events::NONE;
        }
        self.cc.on_rto(now, self.snd_max - self.snd_una);
        self.in_recovery = false;
        self.inflation = 0;
        self.rexmit_budget = 0;
        self.dup_acks = 0;
        // No fast retransmit for losses of what was in flight when the timer fired (RFC 6582
        // §4.1).
        self.recover = self.snd_max;
        // The resend skips SACKed data (as Linux does), unless a second timeout without
        // progress hints that the peer reneged on it (RFC 2018 §8): then everything goes again.
        if self.retries > 1 {
            self.scoreboard.clear();
        }
        self.snd_nxt = self.snd_una;
        if self.snd_wnd == 0 {
            // The peer's window is closed: nothing can be retransmitted, and the persist timer,
            // not this one, now watches the peer.
            self.retries -= 1;
            self.update_persist(now);
        } else {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
        Events::NONE
    }

    /// Arms the persist timer when data waits behind a zero window with nothing in flight, and
    /// disarms it when the window opens (RFC 9293 §3.8.6.1).
    pub(super) fn update_persist(&mut self, now: Nanos) {
        if !self.synchronized() {
            return;
        }
        let data_end = self.buf_seq + self.sbuf.len() as u32;
        let blocked = self.snd_wnd == 0
            && self.snd_nxt.lt(data_end)
            && self.snd_nxt == self.snd_una
            && self.rto_deadline.is_none();
        if blocked {
            if self.persist_deadline.is_none() {
                self.persist_deadline = Some(now + self.persist_interval());
            }
        } else {
            self.persist_deadline = None;
            self.persist_backoff = 0;
        }
    }

    fn persist_interval(&self) -> Nanos {
        let factor = 1u64 << self.persist_backoff.min(40);
        self.rtt
            .rto()
            .saturating_mul(factor)
            .min(self.config.rto_max)
    }
}
