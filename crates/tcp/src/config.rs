//! Every tunable of the engine, with defaults for a datacenter and validation for untrusted
//! settings.

use core::fmt;

use crate::Nanos;
use crate::cc::CcAlgorithm;

const MS: Nanos = 1_000_000;
const S: Nanos = 1_000_000_000;

/// Keepalive probing of an idle connection (RFC 9293 §3.8.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Nanos,
    /// Time between unanswered probes.
    pub interval: Nanos,
    /// Unanswered probes before the connection is declared dead.
    pub probes: u32,
}

/// Settings of one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// MSS advertised in our SYN: the largest payload we accept in one segment.
    pub mss: u16,
    /// Send buffer: the most bytes the application may have queued and unacknowledged.
    pub send_buffer: usize,
    /// Receive buffer: the most bytes held for the application, in order or not. It bounds the
    /// advertised window.
    pub recv_buffer: usize,
    /// Most distinct out-of-order ranges held; beyond it, new ranges are dropped and counted.
    pub max_ooo_ranges: usize,
    /// Offer window scaling (RFC 7323 §2).
    pub window_scaling: bool,
    /// Offer timestamps (RFC 7323 §3, §5: RTTM and PAWS).
    pub timestamps: bool,
    /// Offer SACK (RFC 2018).
    pub sack: bool,
    /// RTO before any RTT sample (RFC 6298 §2.1).
    pub rto_initial: Nanos,
    /// Floor of the RTO (RFC 6298 §2.4 says 1 s; datacenter round trips are microseconds).
    pub rto_min: Nanos,
    /// Ceiling of the RTO after backoff.
    pub rto_max: Nanos,
    /// Retransmissions of one segment before the connection is aborted (R2, RFC 9293 §3.8.3).
    pub max_retransmits: u32,
    /// Retransmissions of a SYN before a connect fails.
    pub syn_retransmits: u32,
    /// Longest delay of an ACK (RFC 9293 §3.8.6.3); every second full segment is acked at once.
    pub delayed_ack: Nanos,
    /// Most full-sized segments one ACK may cover within a receive batch (segments given to
    /// [`Connection::on_segment_in_batch`](crate::Connection::on_segment_in_batch)): a batch is
    /// acknowledged at its end, as a receiver does after coalescing segments, rather than every
    /// second segment. 2 acknowledges every second segment in batches too.
    pub ack_stretch: u32,
    /// Time spent in TIME-WAIT (2 MSL).
    pub time_wait: Nanos,
    /// Keepalive, off by default as RFC 9293 requires.
    pub keepalive: Option<Keepalive>,
    /// Disable Nagle's algorithm (RFC 9293 §3.7.4).
    pub nodelay: bool,
    /// Congestion control.
    pub congestion_control: CcAlgorithm,
    /// Initial congestion window in segments (RFC 6928).
    pub initial_window_segments: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            send_buffer: 256 * 1024,
            recv_buffer: 256 * 1024,
            max_ooo_ranges: 64,
            window_scaling: true,
            timestamps: true,
            sack: true,
            rto_initial: S,
            rto_min: 5 * MS,
            rto_max: 60 * S,
            max_retransmits: 15,
            syn_retransmits: 6,
            delayed_ack: MS / 2,
            ack_stretch: 16,
            time_wait: 60 * S,
            keepalive: None,
            nodelay: false,
            congestion_control: CcAlgorithm::NewReno,
            initial_window_segments: 10,
        }
    }
}

/// Largest buffer a connection may ask for: the largest window scaling can advertise.
pub const MAX_BUFFER: usize = 1 << 30;

/// A setting out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tcp setting `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

fn bad(field: &'static str, problem: impl Into<String>) -> Result<(), ConfigError> {
    Err(ConfigError {
        field,
        problem: problem.into(),
    })
}

impl TcpConfig {
    /// Checks every setting; the engine assumes a validated config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(88..=9000).contains(&self.mss) {
            return bad("mss", format!("{} is outside 88..=9000", self.mss));
        }
        let mss = usize::from(self.mss);
        for (field, len) in [
            ("send_buffer", self.send_buffer),
            ("recv_buffer", self.recv_buffer),
        ] {
            if len < 2 * mss || len > MAX_BUFFER {
                return bad(
                    field,
                    format!("{len} bytes is outside {}..={MAX_BUFFER}", 2 * mss),
                );
            }
        }
        if !self.window_scaling && self.recv_buffer > usize::from(u16::MAX) {
            return bad(
                "recv_buffer",
                "above 65535 bytes needs window_scaling = true",
            );
        }
        if self.max_ooo_ranges == 0 || self.max_ooo_ranges > 4096 {
            return bad("max_ooo_ranges", "must be within 1..=4096");
        }
        if self.rto_min == 0 || self.rto_min > self.rto_max {
            return bad("rto_min", "must be positive and at most rto_max");
        }
        if self.rto_initial < self.rto_min || self.rto_initial > self.rto_max {
            return bad("rto_initial", "must lie within rto_min..=rto_max");
        }
        if self.rto_max > 3600 * S {
            return bad("rto_max", "must be at most an hour");
        }
        if self.max_retransmits == 0 || self.max_retransmits > 64 {
            return bad("max_retransmits", "must be within 1..=64");
        }
        if self.syn_retransmits > 64 {
            return bad("syn_retransmits", "must be at most 64");
        }
        if self.delayed_ack > 500 * MS {
            return bad("delayed_ack", "must be at most 500 ms (RFC 9293 §3.8.6.3)");
        }
        if !(2..=64).contains(&self.ack_stretch) {
            return bad("ack_stretch", "must be within 2..=64");
        }
        if self.time_wait > 600 * S {
            return bad("time_wait", "must be at most 600 s");
        }
        if let Some(k) = self.keepalive
            && (k.idle == 0 || k.interval == 0 || k.probes == 0)
        {
            return bad("keepalive", "idle, interval and probes must be positive");
        }
        if !(1..=100).contains(&self.initial_window_segments) {
            return bad("initial_window_segments", "must be within 1..=100");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        TcpConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_out_of_range_settings() {
        type Breaker = fn(&mut TcpConfig);
        let cases: [(&str, Breaker); 8] = [
            ("ack_stretch", |c| c.ack_stretch = 1),
            ("ack_stretch", |c| c.ack_stretch = 65),
            ("mss", |c| c.mss = 10),
            ("recv_buffer", |c| c.recv_buffer = 100),
            ("recv_buffer", |c| {
                c.window_scaling = false;
                c.recv_buffer = 1 << 20;
            }),
            ("rto_min", |c| c.rto_min = 0),
            ("rto_initial", |c| c.rto_initial = c.rto_max + 1),
            ("keepalive", |c| {
                c.keepalive = Some(Keepalive {
                    idle: 1,
                    interval: 0,
                    probes: 1,
                })
            }),
        ];
        for (field, break_it) in cases {
            let mut c = TcpConfig::default();
            break_it(&mut c);
            assert_eq!(c.validate().unwrap_err().field, field);
        }
    }
}
