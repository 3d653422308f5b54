//! The `dns` protocol of a run: queries from a [`QueryMix`] sent over UDP, each client from a
//! source port of its own with a 16-bit DNS ID space of its own, and replies matched back to
//! their requests by (client port, DNS ID) and checked against the question they answer
//! (`corral_loadgen::dns::match_response`, the check `corral-loadgen-linux --protocol dns`
//! makes).
//!
//! Request `n` of a client takes that client's next ID, wrapping after 65,536; a table per
//! client port keeps, under each ID, the request it stands for and when that was scheduled.
//! A reply under an ID no request took, or carrying another question (a reply more than
//! 65,536 requests late on its port, say), is `mismatched`: counted, and not a latency
//! sample. The tables are allocated when the run starts; building a query writes its header,
//! its question (wire bytes computed once, when the mix was read) and the OPT record straight
//! into the frame, and allocates nothing.

use corral_loadgen::dns::{DnsCounts, QueryMix, Reply, match_response};

/// IDs in one client's DNS ID space.
pub const IDS: usize = 1 << 16;

/// Per client port, the request each DNS ID stands for.
#[derive(Debug)]
pub struct IdTables {
    ports: Vec<IdTable>,
}

#[derive(Debug)]
struct IdTable {
    /// The ID the port's next request takes.
    next: u16,
    /// Under each ID, the request's id + 1 (0: no request took the ID). A run has at most
    /// `MAX_REQUESTS` (10^9) requests, so ids fit in 32 bits.
    request: Box<[u32]>,
    /// Under each ID, its request's scheduled send time.
    scheduled_ns: Box<[u64]>,
}

impl IdTables {
    /// Tables for `ports` client ports of a run of at most `request_bound` requests. A port
    /// never sends more than the run's requests, so a run of fewer than 65,536 never wraps an
    /// ID and needs only that many entries per port.
    pub fn new(ports: usize, request_bound: u64) -> IdTables {
        let entries = usize::try_from(request_bound).map_or(IDS, |b| b.clamp(1, IDS));
        IdTables {
            ports: (0..ports)
                .map(|_| IdTable {
                    next: 0,
                    request: vec![0; entries].into_boxed_slice(),
                    scheduled_ns: vec![0; entries].into_boxed_slice(),
                })
                .collect(),
        }
    }

    /// Client ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Bytes the tables take.
    pub fn bytes(&self) -> usize {
        self.ports.iter().map(|t| t.request.len() * 12).sum()
    }

    /// Gives `request`, scheduled at `scheduled_ns`, the next DNS ID of port `port` (an
    /// index, below [`ports`](IdTables::ports)); returns the ID.
    #[inline]
    pub fn put(&mut self, port: usize, request: u64, scheduled_ns: u64) -> u16 {
        let table = &mut self.ports[port];
        let id = table.next;
        table.next = id.wrapping_add(1);
        let slot = usize::from(id);
        // Below `IDS` entries the run has fewer requests than the table has entries, so
        // `slot` is in it.
        if slot < table.request.len() {
            table.request[slot] = u32::try_from(request + 1).unwrap_or(0);
            table.scheduled_ns[slot] = scheduled_ns;
        }
        id
    }

    /// The request (and its scheduled send time) that DNS ID `id` of port `port` stands for:
    /// the last one given it. `None` if none was, or `port` is not a client port.
    #[inline]
    pub fn get(&self, port: usize, id: u16) -> Option<(u64, u64)> {
        let table = self.ports.get(port)?;
        let slot = usize::from(id);
        let request = *table.request.get(slot)?;
        (request != 0).then(|| (u64::from(request - 1), table.scheduled_ns[slot]))
    }
}

/// What a `dns` run keeps besides the spin path's recorders.
#[derive(Debug)]
pub struct DnsRun {
    pub mix: QueryMix,
    pub edns: Option<u16>,
    pub tables: IdTables,
    pub counts: DnsCounts,
}

impl DnsRun {
    pub fn new(mix: QueryMix, edns: Option<u16>, ports: usize, request_bound: u64) -> DnsRun {
        DnsRun {
            mix,
            edns,
            tables: IdTables::new(ports, request_bound),
            counts: DnsCounts::default(),
        }
    }

    /// Writes the query of request `request` from port index `port`, scheduled at
    /// `scheduled_ns`, at the start of `payload`; returns its length, `None` if it does not
    /// fit (it always does in a frame's UDP payload: a question is at most 259 bytes).
    #[inline]
    pub fn write_query(
        &mut self,
        payload: &mut [u8],
        port: usize,
        request: u64,
        scheduled_ns: u64,
    ) -> Option<usize> {
        let id = self.tables.put(port, request, scheduled_ns);
        self.mix.write(request, id, self.edns, payload)
    }

    /// Takes a datagram sent to port index `port`: the reply it is to a request, if it
    /// answers one (for the caller to count with [`DnsCounts::answered`] if it is that
    /// request's first in time); otherwise it is counted as mismatched.
    #[inline]
    pub fn take_reply(&mut self, port: usize, datagram: &[u8]) -> Option<Reply> {
        let tables = &self.tables;
        match_response(datagram, &self.mix, &mut self.counts, |id| {
            tables.get(port, id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_port_has_its_own_ids_and_they_wrap_after_65536() {
        let mut t = IdTables::new(3, 1 << 20);
        assert_eq!(t.bytes(), 3 * IDS * 12);
        assert_eq!(t.get(0, 0), None);
        // Two ports in turn: each counts its own IDs from 0.
        assert_eq!(t.put(0, 10, 100), 0);
        assert_eq!(t.put(1, 11, 110), 0);
        assert_eq!(t.put(0, 12, 120), 1);
        assert_eq!(t.get(0, 0), Some((10, 100)));
        assert_eq!(t.get(1, 0), Some((11, 110)));
        assert_eq!(t.get(0, 1), Some((12, 120)));
        assert_eq!((t.get(1, 1), t.get(2, 0)), (None, None));
        // Not a client port.
        assert_eq!(t.get(3, 0), None);
        // Port 2's 65,536th request takes ID 65,535, and its next ID 0 again: the newer
        // request replaces the older under it.
        for n in 0..IDS as u64 {
            assert_eq!(t.put(2, 1000 + n, n * 7), n as u16);
        }
        assert_eq!(t.get(2, 0), Some((1000, 0)));
        assert_eq!(t.get(2, 65_535), Some((1000 + 65_535, 65_535 * 7)));
        assert_eq!(t.put(2, 999_999, 5), 0);
        assert_eq!(t.get(2, 0), Some((999_999, 5)));
        assert_eq!(t.get(2, 1), Some((1001, 7)));
        // The other ports are as they were.
        assert_eq!(t.get(0, 1), Some((12, 120)));
    }

    #[test]
    fn a_short_run_has_short_tables_and_refuses_ids_beyond_them() {
        let mut t = IdTables::new(2, 10);
        assert_eq!(t.bytes(), 2 * 10 * 12);
        for n in 0..10 {
            assert_eq!(t.put(1, n, n), n as u16);
        }
        assert_eq!(t.get(1, 9), Some((9, 9)));
        assert_eq!(t.get(1, 10), None);
        assert_eq!(t.get(1, 65_535), None);
        // A zero bound still has a table.
        let mut t = IdTables::new(1, 0);
        assert_eq!(t.put(0, 0, 1), 0);
        assert_eq!(t.get(0, 0), Some((0, 1)));
    }

    #[test]
    fn queries_carry_their_ports_next_id_and_replies_find_them() {
        let mix = QueryMix::parse("www.example.com A\nnothing.example.com AAAA\n").unwrap();
        let mut dns = DnsRun::new(mix.clone(), Some(1232), 2, 100);
        let mut frame = [0u8; 1472];
        let len = dns.write_query(&mut frame, 1, 5, 500).unwrap();
        let mut expected = Vec::new();
        mix.encode(5, 0, Some(1232), &mut expected);
        assert_eq!(&frame[..len], &expected[..]);
        let len = dns.write_query(&mut frame, 1, 6, 600).unwrap();
        assert_eq!(&frame[..2], &[0, 1]);
        let mut reply = frame[..len].to_vec();
        reply[2] |= 0x84;
        reply[3] = 3;
        // On its port, under its ID: request 6; on the other port, nothing.
        let taken = dns.take_reply(1, &reply).unwrap();
        assert_eq!(
            (taken.request, taken.scheduled_ns, taken.rcode),
            (6, 600, 3)
        );
        assert_eq!(dns.take_reply(0, &reply), None);
        assert_eq!(dns.take_reply(7, &reply), None);
        // Answers are the caller's to count, mismatches are counted here.
        assert_eq!((dns.counts.answers(), dns.counts.mismatched), (0, 2));
    }
}
