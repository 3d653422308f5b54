//! One memcached conversation over a byte stream, with no I/O of its own: requests are
//! encoded into the caller's outgoing bytes, received bytes are handed in, and every reply is
//! checked against its request (in order: memcached answers a connection's requests in the
//! order they came) and recorded. The Linux client drives it over a `TcpStream`; a generator
//! with its own TCP (the sans-I/O `corral-tcp` engine) drives it over that.

use std::collections::VecDeque;

use crate::kv::{Expect, Keyspace, KvChecks, Op, Ordering, ReplyCheck, Verdict, Versions};
use crate::memcache::{ParseError, ReplyStream};
use crate::recorder::ResponseRecorder;

/// A request waiting for its reply. Requests outside the timed run (a preload) have no id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub id: Option<u64>,
    pub scheduled_ns: u64,
    pub expect: Expect,
}

/// Why a conversation cannot go on: its replies no longer line up with its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    Unparsable(ParseError),
    /// A reply arrived with no request in flight.
    UnaskedReply,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamSession {
    queue: VecDeque<InFlight>,
    stream: ReplyStream,
    check: ReplyCheck,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl StreamSession {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `op`'s request to `out` and remembers what its reply must be.
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &mut self,
        space: &Keyspace,
        versions: &mut Versions,
        op: Op,
        id: Option<u64>,
        scheduled_ns: u64,
        out: &mut Vec<u8>,
        checks: &mut KvChecks,
    ) {
        let expect = crate::kv::encode_request(
            space,
            versions,
            Ordering::InOrder,
            op,
            out,
            &mut self.key,
            &mut self.value,
        );
        checks.count_op(&expect);
        self.queue.push_back(InFlight {
            id,
            scheduled_ns,
            expect,
        });
    }

    /// Room for at least `min` received bytes; say how many arrived with
    /// [`filled`](Self::filled), then call [`take_replies`](Self::take_replies).
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        self.stream.spare(min)
    }

    pub fn filled(&mut self, n: usize) {
        self.stream.filled(n);
    }

    /// Appends received bytes (a copy; [`spare`](Self::spare) avoids it).
    pub fn received(&mut self, bytes: &[u8]) {
        self.stream.extend(bytes);
    }

    /// Checks every complete reply received, in order, and records the right ones at
    /// `now_ns` (on the schedule's clock) in `rec`. After an error nothing more is parsed.
    pub fn take_replies(
        &mut self,
        space: &Keyspace,
        now_ns: u64,
        checks: &mut KvChecks,
        mut rec: Option<&mut ResponseRecorder>,
    ) -> Result<(), Broken> {
        loop {
            let element = match self.stream.next_element() {
                Ok(None) => return Ok(()),
                Ok(Some(e)) => e,
                Err(e) => {
                    checks.unparsable += 1;
                    return Err(Broken::Unparsable(e));
                }
            };
            let Some(front) = self.queue.front() else {
                checks.wrong_reply += 1;
                return Err(Broken::UnaskedReply);
            };
            if let Some(v) = self.check.on_element(space, &front.expect, &element) {
                let done = self.queue.pop_front().expect("the front exists");
                settle(checks, rec.as_deref_mut(), &done, v, now_ns);
            }
        }
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Forgets every request in flight (the connection is gone; they are lost).
    pub fn abandon(&mut self) {
        self.queue.clear();
    }
}

/// Counts a reply's verdict; a right one is a latency sample, a wrong one is counted by the
/// recorder as `malformed` and not timed.
pub fn settle(
    checks: &mut KvChecks,
    rec: Option<&mut ResponseRecorder>,
    done: &InFlight,
    v: Verdict,
    now_ns: u64,
) {
    checks.count(v);
    let (Some(rec), Some(id)) = (rec, done.id) else {
        return;
    };
    if v.is_correct() {
        rec.record_response(id, done.scheduled_ns, now_ns);
    } else {
        rec.record_malformed();
    }
}
