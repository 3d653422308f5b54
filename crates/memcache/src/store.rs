//! The item store: a hash table split into independently locked shards, each with its own
//! LRU list, under one global memory limit. Time is a memcached-style relative clock (seconds
//! since `process_started`) that the caller supplies, so tests can drive it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError, TryLockResult,
};

/// memcached's boundary between relative and absolute expiry times: 30 days.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// `sizeof(item)` in memcached 1.6 on a 64-bit host; with the CAS word, the per-item header that
/// `-I` and the `bytes` statistic count.
const ITEM_HEADER: usize = 48;
const CAS_SIZE: usize = 8;
/// What this store spends per item beyond memcached's own accounting: the key copy the hash map
/// holds, and the map slot and list links.
const INDEX_OVERHEAD: usize = 48;
const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `-m`: the most memory items may take, in bytes.
    pub max_bytes: usize,
    /// `-I`: the largest item, counted as memcached counts it (header, key, flags, value, CRLF).
    pub item_size_max: usize,
    /// Number of independently locked shards.
    pub shards: usize,
    /// Unix time that relative time 0 stands for.
    pub process_started: i64,
    /// What `stats` and `stats settings` report about the server around the store.
    pub threads: usize,
    pub max_connections: usize,
    pub tcp_port: u16,
    pub udp_port: u16,
    /// How a thread waits for a shard another thread holds.
    pub wait: ShardWait,
}

/// How a thread waits for a shard that another thread holds. Shards are held only for a hash
/// lookup and a few list links (and, for `flush_all`, one pass over a shard), so waits are short.
#[derive(Clone, Copy, Debug)]
pub enum ShardWait {
    /// Sleep in the kernel until the shard is free: right for OS threads, where the holder
    /// may itself be descheduled by the kernel.
    Block,
    /// Never sleep in the kernel: retry, spinning briefly and then calling `relax` between
    /// tries. For user-level threads, where a kernel sleep would stall the kernel thread and
    /// every user-level thread queued on it; `relax` is the runtime's yield, so that a holder
    /// preempted on the same kernel thread gets to run and release the shard.
    Spin { relax: fn() },
}

impl StoreConfig {
    pub fn new(max_bytes: usize, item_size_max: usize, process_started: i64) -> Self {
        StoreConfig {
            max_bytes,
            item_size_max,
            shards: 64,
            process_started,
            threads: 1,
            max_connections: 1024,
            tcp_port: 0,
            udp_port: 0,
            wait: ShardWait::Block,
        }
    }
}

/// One stored value and its metadata.
#[derive(Clone, Debug)]
pub struct Item {
    /// The data without its trailing CRLF.
    pub value: Arc<[u8]>,
    pub flags: u32,
    /// Relative expiry time; 0 never expires.
    pub exptime: u32,
    pub cas: u64,
    /// Relative time of the last access (store or bump).
    pub time: u32,
    /// Fetched since stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by `md ... I` or a stale `ms`.
    pub stale: bool,
    /// A recache token was handed out (meta `W`/`Z`).
    pub token_sent: bool,
    /// The key was given base64-encoded (meta `b`) when the item was created: meta `k` and `me`
    /// echo it re-encoded, followed by ` b`. Kept when the item's value changes.
    pub key_binary: bool,
}

impl Item {
    pub fn new(value: Arc<[u8]>, flags: u32, exptime: u32) -> Self {
        Item {
            value,
            flags,
            exptime,
            cas: 0,
            time: 0,
            fetched: false,
            stale: false,
            token_sent: false,
            key_binary: false,
        }
    }
}

/// memcached's `ITEM_ntotal` (with CAS): what `-I` limits and the `bytes` statistic sums.
pub fn item_total_size(nkey: usize, value_len: usize, flags: u32) -> usize {
    ITEM_HEADER + nkey + 1 + value_len + 2 + if flags != 0 { 4 } else { 0 } + CAS_SIZE
}

fn charge(nkey: usize, item: &Item) -> usize {
    item_total_size(nkey, item.value.len(), item.flags) + nkey + INDEX_OVERHEAD
}

struct Node {
    key: Box<[u8]>,
    item: Item,
    charge: usize,
    prev: u32,
    next: u32,
}

#[derive(Default)]
struct Shard {
    index: HashMap<Box<[u8]>, u32>,
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next to evict.
    tail: u32,
}

impl Shard {
    fn new() -> Self {
        Shard {
            head: NIL,
            tail: NIL,
            ..Default::default()
        }
    }

    fn node(&self, slot: u32) -> &Node {
        self.nodes[slot as usize]
            .as_ref()
            .expect("linked slot holds a node")
    }

    fn node_mut(&mut self, slot: u32) -> &mut Node {
        self.nodes[slot as usize]
            .as_mut()
            .expect("linked slot holds a node")
    }

    fn detach(&mut self, slot: u32) {
        let (prev, next) = {
            let n = self.node(slot);
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
    }

    fn push_front(&mut self, slot: u32) {
        let head = self.head;
        {
            let n = self.node_mut(slot);
            n.prev = NIL;
            n.next = head;
        }
        if head == NIL {
            self.tail = slot;
        } else {
            self.node_mut(head).prev = slot;
        }
        self.head = slot;
    }

    fn remove(&mut self, slot: u32) -> Node {
        self.detach(slot);
        let node = self.nodes[slot as usize]
            .take()
            .expect("linked slot holds a node");
        self.index.remove(&node.key);
        self.free.push(slot);
        node
    }

    fn insert(&mut self, key: &[u8], item: Item, charge: usize) -> u32 {
        let node = Node {
            key: key.into(),
            item,
            charge,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.nodes[s as usize] = Some(node);
                s
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as u32
            }
        };
        self.index.insert(key.into(), slot);
        self.push_front(slot);
        slot
    }
}

/// Counters behind `stats`; relaxed, as memcached's per-thread counters are.
#[derive(Default)]
pub struct Counters {
    pub cmd_get: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub total_items: AtomicU64,
    pub evictions: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub curr_items: AtomicU64,
    pub bytes: AtomicU64,
    pub meta_cmds: AtomicU64,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
}

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One shard and the count of writers spinning for it ([`ShardWait::Spin`]): while there are
/// any, new readers hold back, so that a stream of readers cannot starve a writer.
struct ShardCell {
    lock: RwLock<Shard>,
    writers_waiting: AtomicU32,
}

/// Tries spent spinning in place before each retry calls [`ShardWait::Spin`]'s `relax`.
const SPINS_BEFORE_RELAX: u32 = 64;

fn unpoisoned<G>(result: LockResult<G>) -> G {
    // Poisoning is ignored: one connection's panic must not fail every later request that
    // lands on the same shard.
    result.unwrap_or_else(|e| e.into_inner())
}

fn try_unpoisoned<G>(result: TryLockResult<G>) -> Option<G> {
    match result {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl ShardCell {
    fn new() -> Self {
        ShardCell {
            lock: RwLock::new(Shard::new()),
            writers_waiting: AtomicU32::new(0),
        }
    }

    fn read(&self, wait: ShardWait) -> RwLockReadGuard<'_, Shard> {
        let ShardWait::Spin { relax } = wait else {
            return unpoisoned(self.lock.read());
        };
        let mut tries = 0u32;
        loop {
            if self.writers_waiting.load(Ordering::Relaxed) == 0
                && let Some(g) = try_unpoisoned(self.lock.try_read())
            {
                return g;
            }
            backoff(&mut tries, relax);
        }
    }

    fn write(&self, wait: ShardWait) -> RwLockWriteGuard<'_, Shard> {
        let ShardWait::Spin { relax } = wait else {
            return unpoisoned(self.lock.write());
        };
        if let Some(g) = self.try_write() {
            return g;
        }
        self.writers_waiting.fetch_add(1, Ordering::Relaxed);
        let mut tries = 0u32;
        let g = loop {
            if let Some(g) = self.try_write() {
                break g;
            }
            backoff(&mut tries, relax);
        };
        self.writers_waiting.fetch_sub(1, Ordering::Relaxed);
        g
    }

    /// Never waits, in either mode: with [`ShardWait::Spin`] no thread ever sleeps on the
    /// lock, so releasing it never needs a kernel wake-up either.
    fn try_write(&self) -> Option<RwLockWriteGuard<'_, Shard>> {
        try_unpoisoned(self.lock.try_write())
    }
}

fn backoff(tries: &mut u32, relax: fn()) {
    *tries = tries.saturating_add(1);
    if *tries < SPINS_BEFORE_RELAX {
        std::hint::spin_loop();
    } else {
        relax();
    }
}

/// The table. Shareable across threads (`&Store` is all a connection needs).
pub struct Store {
    cfg: StoreConfig,
    shards: Box<[ShardCell]>,
    /// Sum of the charges of every linked item.
    used: AtomicUsize,
    /// The last CAS handed out; memcached's `get_cas_id`.
    last_cas: AtomicU64,
    /// `settings.oldest_live`: relative time up to which items count as flushed (0: none).
    oldest_live: AtomicU32,
    /// `settings.oldest_cas`: items with a lower CAS count as flushed.
    oldest_cas: AtomicU64,
    pub counters: Counters,
}

/// Why an item could not be linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    TooLarge,
    OutOfMemory,
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Self {
        let shards = (0..cfg.shards.max(1)).map(|_| ShardCell::new()).collect();
        Store {
            cfg,
            shards,
            used: AtomicUsize::new(0),
            last_cas: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            oldest_cas: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// Memory charged to items now, in bytes.
    pub fn used_bytes(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// A fresh CAS value (memcached's `get_cas_id`).
    pub fn next_cas(&self) -> u64 {
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// memcached's `realtime()` on an already range-fixed exptime: 0 never; up to 30 days is
    /// relative to now; beyond that an absolute Unix time (at or before the start: already past).
    pub fn realtime(&self, exptime: i64, now: u32) -> u32 {
        if exptime == 0 {
            0
        } else if exptime > REALTIME_MAXDELTA {
            if exptime <= self.cfg.process_started {
                1
            } else {
                (exptime - self.cfg.process_started) as u32
            }
        } else {
            (exptime + i64::from(now)) as u32
        }
    }

    /// `realtime(EXPTIME_TO_POSITIVE_TIME(t))`: negative times expire at once.
    pub fn expiry_from_wire(&self, exptime: i32, now: u32) -> u32 {
        let t = if exptime < 0 {
            REALTIME_MAXDELTA + 1
        } else {
            i64::from(exptime)
        };
        self.realtime(t, now)
    }

    /// `flush_all [delay]` as memcached 1.6.18 does it, with CAS in use.
    ///
    /// Flushed items are reaped here rather than left to be found dead later: a later delayed
    /// flush moves `oldest_live` into the future, which would otherwise revive them (memcached's
    /// LRU crawler reaps them in the background).
    pub fn flush_all(&self, delay: i32, now: u32) {
        self.reap_flushed(now);
        let new_oldest = if delay > 0 {
            self.realtime(i64::from(delay), now)
        } else {
            now
        };
        let oldest_live = new_oldest.wrapping_sub(1);
        self.oldest_live.store(oldest_live, Ordering::Relaxed);
        if oldest_live <= now {
            let cas = self.next_cas();
            self.oldest_cas.store(cas, Ordering::Relaxed);
            self.reap_flushed(now);
        }
    }

    fn reap_flushed(&self, now: u32) {
        for shard in self.shards.iter() {
            let mut shard = shard.write(self.cfg.wait);
            let mut slot = shard.head;
            while slot != NIL {
                let next = shard.node(slot).next;
                if self.is_flushed(&shard.node(slot).item, now) {
                    let node = shard.remove(slot);
                    self.forget(&node, false);
                }
                slot = next;
            }
        }
    }

    fn is_flushed(&self, item: &Item, now: u32) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        item.time <= oldest_live || (oldest_cas != 0 && item.cas != 0 && item.cas < oldest_cas)
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        // FNV-1a: cheap, and keys are client-chosen but the shard only spreads lock traffic.
        let mut h: u64 = 0xcbf29ce484222325;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        (h % self.shards.len() as u64) as usize
    }

    /// The read-mostly path of a plain get: under the shard's read lock, a live item that is
    /// already marked fetched and was bumped within [`BUMP_INTERVAL`] needs no write, so
    /// concurrent gets of it share the lock. `Peek::NeedsWrite` sends the caller to [`lock`].
    ///
    /// [`lock`]: Store::lock
    pub fn peek(&self, key: &[u8], now: u32) -> Peek {
        let shard = self.shards[self.shard_of(key)].read(self.cfg.wait);
        let Some(&slot) = shard.index.get(key) else {
            return Peek::Miss;
        };
        let item = &shard.node(slot).item;
        let dead = (item.exptime != 0 && item.exptime <= now) || self.is_flushed(item, now);
        if dead || !item.fetched || needs_bump(item, now) {
            return Peek::NeedsWrite;
        }
        Peek::Hit(item.value.clone(), item.flags, item.cas)
    }

    /// Locks the shard holding `key` for a read-modify-write on that key.
    pub fn lock<'a>(&'a self, key: &'a [u8], now: u32) -> KeyGuard<'a> {
        let shard_ix = self.shard_of(key);
        let shard = self.shards[shard_ix].write(self.cfg.wait);
        KeyGuard {
            store: self,
            shard,
            shard_ix,
            key,
            now,
        }
    }

    /// Whether an item of this shape fits under `-I`.
    pub fn size_ok(&self, nkey: usize, value_len: usize, flags: u32) -> bool {
        item_total_size(nkey, value_len, flags) <= self.cfg.item_size_max
    }

    /// Evicts from shards other than `skip` until `need` more bytes fit; true if they do.
    fn evict_elsewhere(&self, skip: usize, need: usize) -> bool {
        let n = self.shards.len();
        let mut idle_rounds = 0;
        let mut ix = (skip + 1) % n;
        while self.used.load(Ordering::Relaxed) + need > self.cfg.max_bytes {
            if ix == skip {
                idle_rounds += 1;
                if idle_rounds > 1 {
                    return false;
                }
                ix = (ix + 1) % n;
                continue;
            }
            // try_lock: another thread may hold that shard while it evicts from ours.
            if let Some(mut shard) = self.shards[ix].try_write()
                && shard.tail != NIL
            {
                let tail = shard.tail;
                let node = shard.remove(tail);
                self.forget(&node, true);
                idle_rounds = 0;
                continue;
            }
            ix = (ix + 1) % n;
        }
        true
    }

    fn forget(&self, node: &Node, evicted: bool) {
        self.used.fetch_sub(node.charge, Ordering::Relaxed);
        self.counters.curr_items.fetch_sub(1, Ordering::Relaxed);
        let size = item_total_size(node.key.len(), node.item.value.len(), node.item.flags) as u64;
        self.counters.bytes.fetch_sub(size, Ordering::Relaxed);
        if evicted {
            bump(&self.counters.evictions);
        }
    }
}

/// What [`Store::peek`] found.
pub enum Peek {
    /// Value, flags and CAS of a live item.
    Hit(Arc<[u8]>, u32, u64),
    Miss,
    /// The item must be reaped, marked fetched or bumped: take the write path.
    NeedsWrite,
}

/// memcached's `ITEM_UPDATE_INTERVAL`: an item is moved to the LRU front (and its access time
/// stamped) at most this often, which keeps repeated gets of hot items read-only.
pub const BUMP_INTERVAL: u32 = 60;

fn needs_bump(item: &Item, now: u32) -> bool {
    item.time < now.saturating_sub(BUMP_INTERVAL)
}

/// A locked shard, focused on one key.
pub struct KeyGuard<'a> {
    store: &'a Store,
    shard: RwLockWriteGuard<'a, Shard>,
    shard_ix: usize,
    key: &'a [u8],
    now: u32,
}

impl KeyGuard<'_> {
    pub fn now(&self) -> u32 {
        self.now
    }

    fn slot(&mut self) -> Option<u32> {
        let slot = *self.shard.index.get(self.key)?;
        let dead = {
            let item = &self.shard.node(slot).item;
            let expired = item.exptime != 0 && item.exptime <= self.now;
            if expired {
                bump(&self.store.counters.get_expired);
                if !item.fetched {
                    bump(&self.store.counters.expired_unfetched);
                }
            }
            expired || self.store.is_flushed(item, self.now)
        };
        if dead {
            let node = self.shard.remove(slot);
            self.store.forget(&node, false);
            return None;
        }
        Some(slot)
    }

    /// The live item under the key, if any (expired or flushed items are reaped here).
    pub fn get(&mut self) -> Option<&mut Item> {
        let slot = self.slot()?;
        Some(&mut self.shard.node_mut(slot).item)
    }

    /// Marks the item most recently used and stamps its access time, unless that was done
    /// within [`BUMP_INTERVAL`] (memcached's `do_item_bump`/`do_item_update` rule).
    pub fn bump(&mut self) {
        if let Some(slot) = self.slot() {
            let now = self.now;
            let item = &mut self.shard.node_mut(slot).item;
            if needs_bump(item, now) {
                item.time = now;
                self.shard.detach(slot);
                self.shard.push_front(slot);
            }
        }
    }

    /// Marks the item most recently used and stamps its access time now, whatever the interval:
    /// what a write that keeps the item (an in-place incr/decr, an add that finds it) does, as
    /// memcached's `do_item_update` under its default segmented LRU.
    pub fn stamp(&mut self) {
        if let Some(slot) = self.slot() {
            self.shard.node_mut(slot).item.time = self.now;
            self.shard.detach(slot);
            self.shard.push_front(slot);
        }
    }

    /// Removes the key's item; true if a live one was there.
    pub fn unlink(&mut self) -> bool {
        match self.slot() {
            Some(slot) => {
                let node = self.shard.remove(slot);
                self.store.forget(&node, false);
                true
            }
            None => false,
        }
    }

    /// Links `item` under the key, replacing any old one, with a fresh CAS unless `keep_cas`;
    /// evicts least recently used items to stay within the memory limit. Returns the CAS.
    pub fn link(&mut self, mut item: Item, keep_cas: bool) -> Result<u64, LinkError> {
        let nkey = self.key.len();
        if !self.store.size_ok(nkey, item.value.len(), item.flags) {
            return Err(LinkError::TooLarge);
        }
        if let Some(&slot) = self.shard.index.get(self.key) {
            let node = self.shard.remove(slot);
            self.store.forget(&node, false);
        }
        let need = charge(nkey, &item);
        let store = self.store;
        while store.used.load(Ordering::Relaxed) + need > store.cfg.max_bytes {
            let tail = self.shard.tail;
            if tail == NIL {
                if !store.evict_elsewhere(self.shard_ix, need) {
                    return Err(LinkError::OutOfMemory);
                }
                break;
            }
            let node = self.shard.remove(tail);
            store.forget(&node, true);
        }
        if !keep_cas {
            item.cas = store.next_cas();
        }
        item.time = self.now;
        let cas = item.cas;
        let size = item_total_size(nkey, item.value.len(), item.flags) as u64;
        store.used.fetch_add(need, Ordering::Relaxed);
        store.counters.curr_items.fetch_add(1, Ordering::Relaxed);
        store.counters.bytes.fetch_add(size, Ordering::Relaxed);
        bump(&store.counters.total_items);
        self.shard.insert(self.key, item, need);
        Ok(cas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(max: usize) -> Store {
        Store::new(StoreConfig {
            shards: 4,
            ..StoreConfig::new(max, 1 << 20, 1_700_000_000)
        })
    }

    fn put(s: &Store, key: &[u8], v: &[u8], now: u32) -> u64 {
        s.lock(key, now)
            .link(Item::new(v.into(), 0, 0), false)
            .unwrap()
    }

    #[test]
    fn cas_counts_up_from_one() {
        let s = store(1 << 20);
        assert_eq!(put(&s, b"a", b"1", 10), 1);
        assert_eq!(put(&s, b"b", b"1", 10), 2);
        assert_eq!(put(&s, b"a", b"2", 10), 3);
        assert_eq!(&*s.lock(b"a", 10).get().unwrap().value, b"2");
    }

    #[test]
    fn expiry_relative_and_absolute() {
        let s = store(1 << 20);
        let rel = s.expiry_from_wire(5, 100);
        assert_eq!(rel, 105);
        assert_eq!(s.expiry_from_wire(-1, 100), 1);
        assert_eq!(s.realtime(1_700_000_050, 100), 50);
        assert_eq!(s.realtime(999_000, 100), 999_100);
        assert_eq!(s.realtime(1_800_000_000, 100), 100_000_000);
        assert_eq!(s.realtime(1_600_000_000, 100), 1);
        s.lock(b"k", 100)
            .link(Item::new(b"v"[..].into(), 0, rel), false)
            .unwrap();
        assert!(s.lock(b"k", 104).get().is_some());
        assert!(s.lock(b"k", 105).get().is_none());
        assert_eq!(s.used_bytes(), 0);
    }

    #[test]
    fn repeated_gets_take_the_read_path() {
        let s = store(1 << 20);
        put(&s, b"k", b"v", 100);
        assert!(
            matches!(s.peek(b"k", 100), Peek::NeedsWrite),
            "not yet fetched"
        );
        s.lock(b"k", 100).get().unwrap().fetched = true;
        assert!(matches!(s.peek(b"k", 159), Peek::Hit(..)));
        assert!(
            matches!(s.peek(b"k", 161), Peek::NeedsWrite),
            "due for an LRU bump"
        );
        s.lock(b"k", 161).bump();
        assert!(matches!(s.peek(b"k", 161), Peek::Hit(..)));
        assert!(matches!(s.peek(b"nope", 161), Peek::Miss));
    }

    #[test]
    fn flush_now_and_later() {
        let s = store(1 << 20);
        put(&s, b"a", b"1", 100);
        s.flush_all(0, 100);
        assert!(s.lock(b"a", 100).get().is_none());
        put(&s, b"b", b"1", 100);
        assert!(s.lock(b"b", 100).get().is_some());
        s.flush_all(10, 100);
        assert!(s.lock(b"b", 108).get().is_some());
        assert!(s.lock(b"b", 109).get().is_none());
    }

    #[test]
    fn evicts_least_recently_used() {
        let per_item = charge(2, &Item::new(vec![0u8; 100].into(), 0, 0));
        let s = Store::new(StoreConfig {
            shards: 1,
            ..StoreConfig::new(per_item * 10, 1 << 20, 0)
        });
        for i in 0..10u8 {
            s.lock(&[b'k', i], 1)
                .link(Item::new(vec![0u8; 100].into(), 0, 0), false)
                .unwrap();
        }
        s.lock(&[b'k', 0], 100).bump();
        s.lock(&[b'k', 10], 100)
            .link(Item::new(vec![0u8; 100].into(), 0, 0), false)
            .unwrap();
        assert!(s.lock(&[b'k', 0], 100).get().is_some());
        assert!(s.lock(&[b'k', 1], 100).get().is_none());
        assert!(s.used_bytes() <= per_item * 10);
    }

    #[test]
    fn spinning_shards_serialize_writers_and_share_readers() {
        let s = Store::new(StoreConfig {
            shards: 2,
            wait: ShardWait::Spin {
                relax: std::thread::yield_now,
            },
            ..StoreConfig::new(64 << 20, 1 << 20, 1_700_000_000)
        });
        put(&s, b"shared", b"0", 10);
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..2000u32 {
                        let key = format!("k{t}-{}", i % 50);
                        put(s, key.as_bytes(), &i.to_le_bytes(), 10);
                        let mut g = s.lock(b"shared", 10);
                        let n: u32 = std::str::from_utf8(&g.get().unwrap().value)
                            .unwrap()
                            .parse()
                            .unwrap();
                        g.link(
                            Item::new((n + 1).to_string().as_bytes().into(), 0, 0),
                            false,
                        )
                        .unwrap();
                        drop(g);
                        assert!(!matches!(s.peek(key.as_bytes(), 10), Peek::Miss));
                    }
                });
            }
        });
        assert_eq!(&*s.lock(b"shared", 10).get().unwrap().value, b"8000");
        assert_eq!(s.counters.curr_items.load(Ordering::Relaxed), 1 + 4 * 50);
    }
}
