//! Where a request's latency went. A request's life has six instants on one clock
//! (`CLOCK_MONOTONIC`, shared by every process on the machine): the generator's scheduled and
//! actual send times, the server's receipt, service start and service end (stamped into the
//! response, see [`crate::wire::ServerStamps`]), and the moment the generator saw the
//! response. The five gaps between them add up to the latency the recorder measures.

use serde::{Deserialize, Serialize};

use crate::wire::ServerStamps;

/// The six instants of one request, `CLOCK_MONOTONIC` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub scheduled_ns: u64,
    pub sent_ns: u64,
    pub received_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub seen_ns: u64,
}

impl Timeline {
    /// A generator whose schedule times are relative to `epoch_ns` (the `CLOCK_MONOTONIC`
    /// time of its schedule's 0) puts together a response's timeline: `scheduled_rel_ns` as
    /// echoed, `sent_ns` as echoed (absolute), the server's stamps, and when it saw it.
    pub fn of_response(
        epoch_ns: u64,
        scheduled_rel_ns: u64,
        sent_ns: u64,
        server: ServerStamps,
        seen_ns: u64,
    ) -> Timeline {
        Timeline {
            scheduled_ns: epoch_ns.saturating_add(scheduled_rel_ns),
            sent_ns,
            received_ns: server.received_ns,
            start_ns: server.start_ns,
            end_ns: server.end_ns,
            seen_ns,
        }
    }

    /// The gaps, or which instant comes before the one it follows (clocks that are not one
    /// clock, or a stamp that is wrong).
    pub fn split(&self) -> Result<Split, OutOfOrder> {
        let gap = |stage: Stage, from: u64, to: u64| {
            to.checked_sub(from).ok_or(OutOfOrder { stage, from, to })
        };
        Ok(Split {
            send_late_ns: gap(Stage::SendLate, self.scheduled_ns, self.sent_ns)?,
            deliver_ns: gap(Stage::Deliver, self.sent_ns, self.received_ns)?,
            queue_ns: gap(Stage::Queue, self.received_ns, self.start_ns)?,
            service_ns: gap(Stage::Service, self.start_ns, self.end_ns)?,
            return_ns: gap(Stage::Return, self.end_ns, self.seen_ns)?,
        })
    }
}

/// One of the five gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Scheduled to actual send: the generator's own lateness.
    SendLate,
    /// Actual send to the server's receipt: the network path and waking the server.
    Deliver,
    /// Receipt to service start: waiting behind other requests or for a core.
    Queue,
    /// Service start to end: the work, and any time the core was taken away meanwhile.
    Service,
    /// Service end to the generator seeing the response.
    Return,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::SendLate,
        Stage::Deliver,
        Stage::Queue,
        Stage::Service,
        Stage::Return,
    ];

    /// A short column title.
    pub fn title(self) -> &'static str {
        match self {
            Stage::SendLate => "send-late",
            Stage::Deliver => "deliver+wake",
            Stage::Queue => "queue",
            Stage::Service => "service",
            Stage::Return => "return",
        }
    }
}

/// An instant earlier than the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfOrder {
    pub stage: Stage,
    pub from: u64,
    pub to: u64,
}

impl std::fmt::Display for OutOfOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} gap ends at {} ns, before it starts at {} ns: not one clock",
            self.stage.title(),
            self.to,
            self.from
        )
    }
}

impl std::error::Error for OutOfOrder {}

/// Why a matched request's latency was not split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsplit {
    /// Its stamps were missing or damaged.
    Unstamped,
    /// One of its instants came before the one it follows.
    OutOfOrder(Stage),
}

/// The five gaps of one request's latency, ns.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Split {
    pub send_late_ns: u64,
    pub deliver_ns: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
    pub return_ns: u64,
}

impl Split {
    pub fn get(&self, stage: Stage) -> u64 {
        match stage {
            Stage::SendLate => self.send_late_ns,
            Stage::Deliver => self.deliver_ns,
            Stage::Queue => self.queue_ns,
            Stage::Service => self.service_ns,
            Stage::Return => self.return_ns,
        }
    }

    fn set(&mut self, stage: Stage, ns: u64) {
        *match stage {
            Stage::SendLate => &mut self.send_late_ns,
            Stage::Deliver => &mut self.deliver_ns,
            Stage::Queue => &mut self.queue_ns,
            Stage::Service => &mut self.service_ns,
            Stage::Return => &mut self.return_ns,
        } = ns;
    }

    /// The whole latency: scheduled send to response seen.
    pub fn total_ns(&self) -> u64 {
        Stage::ALL
            .iter()
            .fold(0u64, |sum, &s| sum.saturating_add(self.get(s)))
    }

    /// Each gap's median over `splits` (the lower median for an even count); `None` for none.
    /// The gaps are taken one at a time, so the result need not be any one request's split.
    pub fn median_of(splits: &[Split]) -> Option<Split> {
        if splits.is_empty() {
            return None;
        }
        let mut column: Vec<u64> = Vec::with_capacity(splits.len());
        let mut median = Split::default();
        for stage in Stage::ALL {
            column.clear();
            column.extend(splits.iter().map(|s| s.get(stage)));
            let mid = (column.len() - 1) / 2;
            let (_, &mut m, _) = column.select_nth_unstable(mid);
            median.set(stage, m);
        }
        Some(median)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn timeline() -> Timeline {
        Timeline {
            scheduled_ns: 1_000,
            sent_ns: 1_200,
            received_ns: 4_200,
            start_ns: 9_200,
            end_ns: 19_200,
            seen_ns: 21_700,
        }
    }

    #[test]
    fn the_gaps_are_between_consecutive_instants_and_add_up() {
        let s = timeline().split().unwrap();
        assert_eq!(
            s,
            Split {
                send_late_ns: 200,
                deliver_ns: 3_000,
                queue_ns: 5_000,
                service_ns: 10_000,
                return_ns: 2_500,
            }
        );
        assert_eq!(s.total_ns(), 21_700 - 1_000);
    }

    #[test]
    fn a_relative_schedule_is_moved_onto_the_shared_clock() {
        let stamps = ServerStamps {
            received_ns: 5_000_300,
            start_ns: 5_000_400,
            end_ns: 5_010_400,
        };
        // The schedule's 0 is at 5 ms; the request was due 100 ns in, sent 150 ns in.
        let t = Timeline::of_response(5_000_000, 100, 5_000_150, stamps, 5_011_000);
        assert_eq!(t.scheduled_ns, 5_000_100);
        let s = t.split().unwrap();
        assert_eq!(
            (
                s.send_late_ns,
                s.deliver_ns,
                s.queue_ns,
                s.service_ns,
                s.return_ns
            ),
            (50, 150, 100, 10_000, 600)
        );
        assert_eq!(s.total_ns(), 5_011_000 - 5_000_100);
    }

    #[test]
    fn an_instant_out_of_order_is_named() {
        let t = Timeline {
            received_ns: 1_100,
            ..timeline()
        };
        let e = t.split().unwrap_err();
        assert_eq!(
            e,
            OutOfOrder {
                stage: Stage::Deliver,
                from: 1_200,
                to: 1_100
            }
        );
        assert!(e.to_string().contains("deliver+wake"), "{e}");
        let t = Timeline {
            seen_ns: 19_000,
            ..timeline()
        };
        assert_eq!(t.split().unwrap_err().stage, Stage::Return);
    }

    #[test]
    fn the_median_is_taken_per_gap() {
        let s = |a, b, c, d, e| Split {
            send_late_ns: a,
            deliver_ns: b,
            queue_ns: c,
            service_ns: d,
            return_ns: e,
        };
        assert_eq!(Split::median_of(&[]), None);
        assert_eq!(
            Split::median_of(&[s(1, 2, 3, 4, 5)]),
            Some(s(1, 2, 3, 4, 5))
        );
        let m = Split::median_of(&[s(1, 90, 3, 4, 5), s(9, 10, 30, 4, 7), s(5, 20, 2, 40, 6)]);
        assert_eq!(m, Some(s(5, 20, 3, 4, 6)));
        // Lower median of an even count.
        let m = Split::median_of(&[
            s(4, 0, 0, 0, 0),
            s(1, 0, 0, 0, 0),
            s(3, 0, 0, 0, 0),
            s(2, 0, 0, 0, 0),
        ]);
        assert_eq!(m.unwrap().send_late_ns, 2);
    }

    proptest! {
        #[test]
        fn ordered_instants_split_into_gaps_that_sum_to_the_latency(
            start in 0u64..1 << 50,
            gaps in proptest::array::uniform5(0u64..1 << 30),
        ) {
            let mut at = start;
            let mut next = |g: u64| { at += g; at };
            let t = Timeline {
                scheduled_ns: start,
                sent_ns: next(gaps[0]),
                received_ns: next(gaps[1]),
                start_ns: next(gaps[2]),
                end_ns: next(gaps[3]),
                seen_ns: next(gaps[4]),
            };
            let s = t.split().unwrap();
            prop_assert_eq!(s.total_ns(), t.seen_ns - t.scheduled_ns);
            for (stage, g) in Stage::ALL.iter().zip(gaps) {
                prop_assert_eq!(s.get(*stage), g);
            }
        }
    }
}
