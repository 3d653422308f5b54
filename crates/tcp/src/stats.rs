//! Why a segment was dropped, and what a connection did: one counter per reason and event.
//!
//! A connection keeps its own [`ConnStats`]; the runtime sums them, with its own drops (no
//! connection, checksum, table full), into [`TcpCounters`] for `net_stats()` and iokerneld's
//! stats.

/// Every reason the engine or the runtime's TCP layer discards a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TcpDrop {
    /// No connection or listener for the segment (answered with a RST unless it was one).
    NoConnection,
    /// Sequence number outside the receive window (RFC 9293 §3.10.7.4); acked unless RST.
    OutOfWindow,
    /// Timestamp older than TS.Recent (RFC 7323 §5, PAWS).
    PawsRejected,
    /// A RST whose sequence number is in the window but not exactly RCV.NXT: answered with a
    /// challenge ACK (RFC 5961 §3).
    RstChallenged,
    /// A RST outside the window (RFC 5961 §3).
    RstOutOfWindow,
    /// A SYN on a synchronized connection: answered with a challenge ACK (RFC 5961 §4).
    SynChallenged,
    /// An ACK of data never sent (RFC 9293 §3.10.7.4, RFC 5961 §5).
    AckOfUnsentData,
    /// An ACK older than the window of acceptable ACKs (RFC 5961 §5).
    AckTooOld,
    /// A segment without ACK on a synchronized connection.
    NoAckFlag,
    /// An illegal flag combination (e.g. SYN with FIN or RST).
    BadFlags,
    /// Payload past the right edge of the window was trimmed or dropped.
    BeyondWindow,
    /// The out-of-order queue already held its most ranges.
    OooQueueFull,
    /// The listener's SYN backlog was full and SYN cookies were off.
    SynBacklogFull,
    /// The listener's accept queue was full.
    AcceptQueueFull,
    /// An ACK that claimed to complete a SYN cookie handshake and did not.
    BadCookie,
    /// The connection table was full.
    TableFull,
    /// The TCP checksum did not verify (counted by the runtime before the engine sees it).
    BadChecksum,
    /// The header or its options were malformed.
    BadHeader,
}

impl TcpDrop {
    /// Every variant, in declaration order, so `ALL[d as usize] == d`.
    pub const ALL: [TcpDrop; 18] = [
        TcpDrop::NoConnection,
        TcpDrop::OutOfWindow,
        TcpDrop::PawsRejected,
        TcpDrop::RstChallenged,
        TcpDrop::RstOutOfWindow,
        TcpDrop::SynChallenged,
        TcpDrop::AckOfUnsentData,
        TcpDrop::AckTooOld,
        TcpDrop::NoAckFlag,
        TcpDrop::BadFlags,
        TcpDrop::BeyondWindow,
        TcpDrop::OooQueueFull,
        TcpDrop::SynBacklogFull,
        TcpDrop::AcceptQueueFull,
        TcpDrop::BadCookie,
        TcpDrop::TableFull,
        TcpDrop::BadChecksum,
        TcpDrop::BadHeader,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// A stable snake_case name for counters.
    pub const fn as_str(self) -> &'static str {
        match self {
            TcpDrop::NoConnection => "no_connection",
            TcpDrop::OutOfWindow => "out_of_window",
            TcpDrop::PawsRejected => "paws_rejected",
            TcpDrop::RstChallenged => "rst_challenged",
            TcpDrop::RstOutOfWindow => "rst_out_of_window",
            TcpDrop::SynChallenged => "syn_challenged",
            TcpDrop::AckOfUnsentData => "ack_of_unsent_data",
            TcpDrop::AckTooOld => "ack_too_old",
            TcpDrop::NoAckFlag => "no_ack_flag",
            TcpDrop::BadFlags => "bad_flags",
            TcpDrop::BeyondWindow => "beyond_window",
            TcpDrop::OooQueueFull => "ooo_queue_full",
            TcpDrop::SynBacklogFull => "syn_backlog_full",
            TcpDrop::AcceptQueueFull => "accept_queue_full",
            TcpDrop::BadCookie => "bad_cookie",
            TcpDrop::TableFull => "table_full",
            TcpDrop::BadChecksum => "bad_checksum",
            TcpDrop::BadHeader => "bad_header",
        }
    }
}

/// What one connection did. Plain integers: a connection is only touched under its lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub segments_in: u64,
    pub segments_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Segments retransmitted because the RTO expired.
    pub rto_retransmits: u64,
    /// Segments retransmitted by fast retransmit or during fast recovery.
    pub fast_retransmits: u64,
    /// SYN or SYN-ACK retransmissions.
    pub syn_retransmits: u64,
    /// RTO expirations (each may retransmit one segment and backs the timer off).
    pub timeouts: u64,
    /// Entries into fast recovery.
    pub recoveries: u64,
    pub dup_acks_in: u64,
    /// Segments that arrived out of order and were queued.
    pub ooo_segments: u64,
    /// Duplicate data already received (fully or partly).
    pub duplicate_segments: u64,
    pub delayed_acks: u64,
    /// Challenge ACKs sent (RFC 5961 §3–5), within the rate limit.
    pub challenge_acks: u64,
    /// Duplicate ACKs answering a segment outside the window or one PAWS rejected (RFC 9293
    /// §3.10.7.4, RFC 7323 §5.3): those within the rate limit, and those answering old
    /// segments just below RCV.NXT, which are never limited.
    pub out_of_window_acks: u64,
    /// Challenge ACKs and duplicate ACKs withheld by the per-connection rate limit (RFC 5961
    /// §7).
    pub acks_rate_limited: u64,
    pub zero_window_probes: u64,
    pub keepalive_probes: u64,
    /// Segments dropped, by [`TcpDrop`] (indexed by `reason as usize`).
    pub drops: [u64; TcpDrop::COUNT],
}

impl ConnStats {
    /// Counts one drop.
    #[inline]
    pub fn drop(&mut self, why: TcpDrop) {
        self.drops[why as usize] += 1;
    }

    /// Adds every count of `other`.
    pub fn add(&mut self, other: &ConnStats) {
        self.combine(other, u64::wrapping_add);
    }

    /// Adds what each count grew by from `then` to `now` (two readings of one connection's
    /// stats; counts only grow).
    pub fn add_growth(&mut self, now: &ConnStats, then: &ConnStats) {
        self.combine(now, u64::wrapping_add);
        self.combine(then, u64::wrapping_sub);
    }

    /// Applies `op` to each count and its counterpart in `other`; the one list of the fields.
    fn combine(&mut self, other: &ConnStats, op: fn(u64, u64) -> u64) {
        let ConnStats {
            segments_in,
            segments_out,
            bytes_in,
            bytes_out,
            rto_retransmits,
            fast_retransmits,
            syn_retransmits,
            timeouts,
            recoveries,
            dup_acks_in,
            ooo_segments,
            duplicate_segments,
            delayed_acks,
            challenge_acks,
            out_of_window_acks,
            acks_rate_limited,
            zero_window_probes,
            keepalive_probes,
            drops,
        } = self;
        for (total, n) in [
            (segments_in, other.segments_in),
            (segments_out, other.segments_out),
            (bytes_in, other.bytes_in),
            (bytes_out, other.bytes_out),
            (rto_retransmits, other.rto_retransmits),
            (fast_retransmits, other.fast_retransmits),
            (syn_retransmits, other.syn_retransmits),
            (timeouts, other.timeouts),
            (recoveries, other.recoveries),
            (dup_acks_in, other.dup_acks_in),
            (ooo_segments, other.ooo_segments),
            (duplicate_segments, other.duplicate_segments),
            (delayed_acks, other.delayed_acks),
            (challenge_acks, other.challenge_acks),
            (out_of_window_acks, other.out_of_window_acks),
            (acks_rate_limited, other.acks_rate_limited),
            (zero_window_probes, other.zero_window_probes),
            (keepalive_probes, other.keepalive_probes),
        ] {
            *total = op(*total, n);
        }
        for (total, &n) in drops.iter_mut().zip(&other.drops) {
            *total = op(*total, n);
        }
    }
}

/// Totals over a stack's connections, plus what happened outside any connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Sum of every connection's stats (closed ones included).
    pub conns: ConnStats,
    pub active_opens: u64,
    pub passive_opens: u64,
    pub failed_opens: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
    pub syn_cookies_sent: u64,
    pub syn_cookies_accepted: u64,
    /// Connections currently in the table, and the most there at once.
    pub established_now: u64,
    pub table_peak: u64,
}

impl TcpCounters {
    /// Adds a connection's stats (when it closes, or for a snapshot).
    pub fn absorb(&mut self, s: &ConnStats) {
        self.conns.add(s);
    }

    /// Counts a drop outside any connection.
    #[inline]
    pub fn drop(&mut self, why: TcpDrop) {
        self.conns.drop(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_between_two_readings_adds_up_to_the_last_reading() {
        let mut first = ConnStats {
            segments_in: 3,
            bytes_out: 700,
            keepalive_probes: 1,
            ..ConnStats::default()
        };
        first.drop(TcpDrop::ALL[0]);
        let mut second = first.clone();
        second.segments_in += 4;
        second.bytes_out += 1_000;
        second.delayed_acks += 2;
        second.drop(TcpDrop::ALL[TcpDrop::COUNT - 1]);
        let mut total = ConnStats::default();
        total.add_growth(&first, &ConnStats::default());
        total.add_growth(&second, &first);
        assert_eq!(total, second);
        let mut sum = first.clone();
        sum.add(&second);
        assert_eq!(sum.bytes_out, 2_400);
        assert_eq!(sum.drops[0], 2);
        assert_eq!(sum.keepalive_probes, 2);
    }

    #[test]
    fn all_is_in_declaration_order_with_unique_names() {
        for (i, d) in TcpDrop::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
        let mut names: Vec<_> = TcpDrop::ALL.iter().map(|d| d.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TcpDrop::COUNT);
    }
}
