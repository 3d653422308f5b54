//! A listening port as the runtime holds it: the engine's [`Listener`] (SYN backlog, cookies,
//! accept bound) and the queue of established connections waiting for `accept`.

use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::sync::Arc;

use corral_tcp::{Listener, ListenerConfig, TcpCounters};

use super::conn::ConnCell;
use crate::sync::spin::SpinLock;
use crate::sync::waitq::WaitQueue;

pub(crate) struct ListenState {
    pub engine: Listener,
    pub queue: VecDeque<Arc<ConnCell>>,
    pub closed: bool,
}

pub(crate) struct ListenerCell {
    local: SocketAddrV4,
    pub state: SpinLock<ListenState>,
    pub acceptors: WaitQueue,
}

impl ListenerCell {
    /// `local` as bound (perhaps `0.0.0.0`); `ours` with the runtime's address, which the
    /// engine's cookies, ISNs and SYN-ACK checksums need.
    pub fn new(local: SocketAddrV4, ours: SocketAddrV4, config: ListenerConfig) -> ListenerCell {
        ListenerCell {
            local,
            state: SpinLock::new(ListenState {
                engine: Listener::new(ours, config),
                queue: VecDeque::new(),
                closed: false,
            }),
            acceptors: WaitQueue::new(),
        }
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    /// A half-open connection left SYN-RECEIVED.
    pub fn half_open_done(&self) {
        self.state.lock().engine.half_open_done();
    }

    /// Queues an established connection for `accept`; false when the queue is full or the
    /// listener closed (the caller resets the connection).
    pub fn push_accepted(&self, conn: Arc<ConnCell>) -> bool {
        {
            let mut s = self.state.lock();
            if s.closed || !s.engine.push_accept() {
                return false;
            }
            s.queue.push_back(conn);
        }
        // An acceptor registers under the state lock, which we took after it.
        if self.acceptors.maybe_waiters() {
            self.acceptors.wake_one();
        }
        true
    }

    pub fn counters(&self) -> TcpCounters {
        self.state.lock().engine.counters().clone()
    }

    /// `Listener::needs_prompt_acks`.
    pub fn needs_prompt_acks(&self, now: u64) -> bool {
        self.state.lock().engine.needs_prompt_acks(now)
    }
}
