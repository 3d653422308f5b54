//! Requests in flight, in a slab whose slots are reused, so that the hot path does not
//! allocate. A slot is live from its arrival to its completion; completing a slot that is not
//! live is refused, which is how a request completing twice would show.

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub arrival: u64,
    /// Network processing (receiving it, sending its reply) still to run, ns: core time, run
    /// before the service, not useful work.
    pub overhead: u64,
    /// Service time still to run, ns.
    pub remaining: u64,
    live: bool,
}

#[derive(Debug, Default)]
pub struct Requests {
    slots: Vec<Request>,
    free: Vec<u32>,
    live: u64,
}

impl Requests {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new live request with `overhead` ns of network processing before `service` ns of
    /// work; returns its slot.
    pub fn arrive(&mut self, arrival: u64, overhead: u64, service: u64) -> u32 {
        let request = Request {
            arrival,
            overhead,
            remaining: service,
            live: true,
        };
        self.live += 1;
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = request;
                slot
            }
            None => {
                self.slots.push(request);
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn get(&self, slot: u32) -> &Request {
        &self.slots[slot as usize]
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut Request {
        &mut self.slots[slot as usize]
    }

    /// Ends a live request and frees its slot.
    pub fn complete(&mut self, slot: u32) -> Result<Request, String> {
        let request = self
            .slots
            .get_mut(slot as usize)
            .filter(|r| r.live)
            .ok_or_else(|| format!("request slot {slot} completed but not in flight"))?;
        request.live = false;
        let done = *request;
        self.free.push(slot);
        self.live -= 1;
        Ok(done)
    }

    /// Requests arrived and not completed.
    pub fn live(&self) -> u64 {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_complete_once() {
        let mut requests = Requests::new();
        let a = requests.arrive(1, 0, 10);
        let b = requests.arrive(2, 0, 20);
        assert_eq!(requests.live(), 2);
        assert_eq!(requests.complete(a).unwrap().arrival, 1);
        assert!(requests.complete(a).is_err());
        let c = requests.arrive(3, 0, 30);
        assert_eq!(c, a);
        assert_eq!(requests.get(b).remaining, 20);
        assert_eq!(requests.live(), 2);
    }
}
