//! Property tests: slots round-trip, and the header validator never panics and never accepts a
//! layout whose areas escape the region or overlap.
#![cfg(not(loom))]

use std::ptr::NonNull;

use proptest::prelude::*;

use corral_abi::control::{MAX_REGISTER_KTHREADS, Registration, Reply, Request};

use corral_abi::{
    Command, Header, KthreadLayout, Layout, MAGIC, MAX_KTHREADS, OwnedRegion, PacketArea,
    RawRegion, RegionBuilder, RingKind, SLOT_SIZE, Slot, SlotCell,
};

const HEADER_WORDS: usize = size_of::<Header>() / 8;
const HEADER_SIZE: u64 = size_of::<Header>() as u64;

fn command() -> impl Strategy<Value = Command> {
    proptest::sample::select(Command::ALL.to_vec())
}

/// A 64-aligned buffer of `words` u64s.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u64; 8]);

fn aligned(words: &[u64]) -> Vec<Line> {
    let mut v = vec![Line([0; 8]); words.len().div_ceil(8)];
    for (i, &w) in words.iter().enumerate() {
        v[i / 8].0[i % 8] = w;
    }
    v
}

fn header_words(h: &Header) -> Vec<u64> {
    let mut words = vec![0u64; HEADER_WORDS];
    // Header is plain integers; going through its bytes keeps the test independent of field
    // order.
    let bytes: &[u8] =
        // SAFETY: reading a repr(C) all-integer struct with no padding as bytes.
        unsafe { std::slice::from_raw_parts((h as *const Header).cast::<u8>(), HEADER_SIZE as usize) };
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_ne_bytes(chunk.try_into().unwrap());
    }
    words
}

/// Everything validation promises about an accepted layout.
fn assert_sound(l: &Layout, mapped: u64) {
    let region = l.region_size();
    assert!(region <= mapped && region >= HEADER_SIZE);
    let k = l.kthreads();
    assert!(k >= 1 && k as usize <= MAX_KTHREADS);
    for kind in [
        RingKind::Ingress,
        RingKind::EgressPacket,
        RingKind::EgressCommand,
    ] {
        assert!(l.ring_slots(kind).is_power_of_two());
    }
    let need = KthreadLayout::new(
        l.ring_slots(RingKind::Ingress),
        l.ring_slots(RingKind::EgressPacket),
        l.ring_slots(RingKind::EgressCommand),
    );
    assert_eq!(l.kthread_layout(), need);
    let size = l.kthread_area_size();
    assert!(size >= need.size && size.is_multiple_of(64));
    let mut areas = vec![(0u64, HEADER_SIZE)];
    for i in 0..k {
        let off = l.kthread_offset(i).unwrap();
        assert!(off.is_multiple_of(64));
        assert!(off.checked_add(size).unwrap() <= region);
        areas.push((off, size));
    }
    assert_eq!(l.kthread_offset(k), None);
    let PacketArea { offset, size } = l.packet_area();
    assert!(offset.is_multiple_of(64));
    assert!(offset.checked_add(size).unwrap() <= region);
    if size > 0 {
        areas.push((offset, size));
    }
    areas.sort_unstable();
    for w in areas.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {w:?}");
    }
}

/// A header built the way a runtime would, then nudged: areas shifted by a cache line or a few
/// bytes, sizes off by a line, counts out of range. Most cases get deep into validation, and a
/// fair share are accepted.
fn plausible_header() -> impl Strategy<Value = (Header, u64)> {
    let ring = || proptest::sample::select(vec![4u32, 4, 8, 8, 16, 16, 64, 64, 2, 12, 1 << 17]);
    let nudge =
        || proptest::sample::select(vec![0i64, 0, 0, 0, 0, 0, 0, 0, 64, 4096, -64, 8, -4096]);
    (
        proptest::sample::select(vec![1u32, 2, 3, 4, 4, 4, 0, 257]),
        (ring(), ring(), ring()),
        nudge(),
        proptest::collection::vec(nudge(), 5),
        proptest::sample::select(vec![0u64, 100, 5000, 40_000]),
        nudge(),
        proptest::sample::select(vec![0u64, 0, 4096, 1 << 20]),
    )
        .prop_map(
            |(kthreads, (i, e, c), area_nudge, gaps, psize, size_nudge, slack)| {
                let mut h = Header::zeroed();
                h.magic = MAGIC;
                h.version = corral_abi::LAYOUT_VERSION;
                h.header_size = HEADER_SIZE as u32;
                h.slot_size = SLOT_SIZE as u32;
                h.kthreads = kthreads;
                h.ingress_slots = i;
                h.egress_packet_slots = e;
                h.egress_command_slots = c;
                let area = KthreadLayout::new(i.min(1 << 16), e.min(1 << 16), c.min(1 << 16)).size;
                h.kthread_area_size = area.wrapping_add_signed(area_nudge);
                let mut at = HEADER_SIZE;
                let n = (kthreads as usize).min(4);
                for (slot, &gap) in h.kthread_offsets[..n].iter_mut().zip(&gaps) {
                    at = at.wrapping_add_signed(gap);
                    *slot = at;
                    at = at.wrapping_add(area);
                }
                h.packet_area_offset = at.wrapping_add_signed(gaps[4]);
                h.packet_area_size = psize;
                h.region_size = h
                    .packet_area_offset
                    .wrapping_add(psize)
                    .wrapping_add_signed(size_nudge);
                (h, h.region_size.wrapping_add(slack))
            },
        )
}

#[derive(Clone, Copy, Debug)]
enum Change {
    Set(u64),
    Xor(u64),
    AddLines(i64),
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn slot_fields_round_trip(cmd in command(), flags in any::<u16>(), len in any::<u32>(), payload in any::<u64>()) {
        let s = Slot::new(cmd, flags, len, payload);
        prop_assert_eq!(s.command(), Ok(cmd));
        prop_assert_eq!(s.command_on(cmd.ring()), Ok(cmd));
        prop_assert_eq!(s.flags(), flags & 0x7fff);
        prop_assert_eq!(s.length(), len);
        prop_assert_eq!(s.payload(), payload);
        let (d, p) = s.to_raw();
        prop_assert_eq!(Slot::from_raw(d, p), s);
    }

    #[test]
    fn raw_words_decode_without_panicking(desc in any::<u64>(), payload in any::<u64>(), size in any::<u64>()) {
        let s = Slot::from_raw(desc, payload);
        prop_assert_eq!(s.to_raw(), (desc & !(1 << 31), payload));
        if let Ok(c) = s.command() {
            prop_assert_eq!(Slot::new(c, s.flags(), s.length(), s.payload()), s);
        }
        for ring in [RingKind::Ingress, RingKind::EgressPacket, RingKind::EgressCommand] {
            let _ = s.command_on(ring).map_err(|e| e.to_string());
        }
        let area = PacketArea { offset: 0, size };
        let fits = u128::from(payload) + u128::from(s.length()) <= u128::from(size);
        match s.packet_in(area) {
            Ok(r) => {
                prop_assert!(fits);
                prop_assert_eq!((r.offset(), r.length()), (payload, s.length()));
            }
            Err(e) => {
                prop_assert!(!fits);
                let _ = e.to_string();
            }
        }
    }

    #[test]
    fn slots_survive_a_ring_unchanged(words in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..40)) {
        let cells: Vec<SlotCell> = (0..8).map(|_| SlotCell::new()).collect();
        let (head, tail) = (Default::default(), Default::default());
        let mut p = corral_abi::Producer::new(&cells, &tail, &head).unwrap();
        let mut c = corral_abi::Consumer::new(&cells, &head, &tail).unwrap();
        for &(d, w) in &words {
            let s = Slot::from_raw(d, w);
            p.try_push(s).unwrap();
            prop_assert_eq!(c.try_pop(), Some(s));
            prop_assert_eq!(c.try_pop(), None);
        }
    }

    #[test]
    fn random_bytes_never_panic_the_validator(words in proptest::collection::vec(any::<u64>(), 0..HEADER_WORDS + 64), mapped in any::<u64>()) {
        let mut words = words;
        // Half the time, start right so that the random rest is looked at.
        if words.len() > 2 && words[0] & 1 == 0 {
            words[0] = MAGIC;
            words[1] = u64::from(corral_abi::LAYOUT_VERSION) | HEADER_SIZE << 32;
        }
        let buf = aligned(&words);
        let len = words.len() * 8;
        let raw = {
            let base = NonNull::new(buf.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
            // SAFETY: `buf` holds at least `len` bytes, outlives `raw`, and is only read here.
            unsafe { RawRegion::new(base, len) }
        };
        match raw.read_header() {
            Ok(h) => {
                if let Ok(l) = h.validate(mapped) {
                    assert_sound(&l, mapped);
                }
                if let Ok(l) = h.validate(len as u64) {
                    assert_sound(&l, len as u64);
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }

    #[test]
    fn plausible_headers_are_accepted_only_when_sound((h, mapped) in plausible_header()) {
        match h.validate(mapped) {
            Ok(l) => assert_sound(&l, mapped),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn one_word_changed_in_a_good_header(
        kthreads in 1u32..6,
        word in prop_oneof![0..24usize, 0..HEADER_WORDS],
        change in prop_oneof![
            any::<u64>().prop_map(Change::Set),
            any::<u64>().prop_map(Change::Xor),
            (-3i64..=3).prop_map(Change::AddLines),
        ],
    ) {
        let owned = OwnedRegion::new(&RegionBuilder::new(kthreads).ingress_slots(8).egress_packet_slots(8).egress_command_slots(4).packet_area_size(5000)).unwrap();
        let h = owned.raw().read_header().unwrap();
        let mut words = header_words(&h);
        words[word] = match change {
            Change::Set(v) => v,
            Change::Xor(v) => words[word] ^ v,
            Change::AddLines(n) => words[word].wrapping_add_signed(n * 64),
        };
        let mut bytes = words.clone();
        bytes.resize(owned.raw().len() / 8 + 1024, 0);
        let buf = aligned(&bytes);
        let raw = {
            // SAFETY: `buf` holds the whole region, outlives `raw`, and is only accessed through it.
            unsafe { RawRegion::new(NonNull::new(buf.as_ptr() as *mut u8).unwrap(), bytes.len() * 8) }
        };
        if let Ok(region) = raw.attach() {
            assert_sound(region.layout(), raw.len() as u64);
            // An accepted layout is usable: every ring of every kthread works.
            for i in 0..region.layout().kthreads() {
                let k = region.kthread(i).unwrap();
                let (mut p, mut c) = (k.ingress_producer(), k.ingress_consumer());
                p.try_push(Slot::value(Command::Grant, 1)).unwrap();
                prop_assert_eq!(c.try_pop(), Some(Slot::value(Command::Grant, 1)));
                let (mut p, mut c) = (k.egress_command_producer(), k.egress_command_consumer());
                p.try_push(Slot::value(Command::Park, 0)).unwrap();
                prop_assert!(c.try_pop().is_some());
            }
        }
    }

    #[test]
    fn builder_layouts_are_sound_and_attach(
        kthreads in 0u32..20,
        i in prop_oneof![Just(4u32), Just(64), Just(1024), 0u32..2000],
        e in prop_oneof![Just(4u32), Just(64), Just(1 << 16), Just(1 << 17)],
        c in prop_oneof![Just(4u32), Just(3), Just(64)],
        packets in prop_oneof![Just(0u64), 0u64..1_000_000],
    ) {
        let b = RegionBuilder::new(kthreads).ingress_slots(i).egress_packet_slots(e).egress_command_slots(c).packet_area_size(packets);
        match b.layout() {
            Ok(l) => {
                assert_sound(&l, l.region_size());
                prop_assert_eq!(l.region_size() % 4096, 0);
                prop_assert_eq!(l.packet_area().size, packets);
                if l.region_size() <= 8 << 20 {
                    let owned = OwnedRegion::new(&b).unwrap();
                    let region = owned.attach().unwrap();
                    prop_assert_eq!(region.layout(), &l);
                }
            }
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
    }

    #[test]
    fn control_decoder_never_panics_on_random_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..1200),
        descriptors in 0usize..300,
    ) {
        if let Err(err) = Request::decode(&bytes, descriptors) {
            prop_assert!(!err.to_string().is_empty());
        }
        let _ = Reply::decode(&bytes);
    }

    #[test]
    fn valid_registrations_round_trip_and_corruptions_never_panic(
        kthreads in 1usize..=MAX_REGISTER_KTHREADS,
        name in "[a-z][a-z0-9-]{0,31}",
        flip in any::<(usize, u8)>(),
    ) {
        let reg = Registration {
            name,
            guaranteed_cores: 0,
            max_cores: kthreads as u16,
            spinning_kthreads: 0,
            run_queue_capacity: 256,
            preemption: corral_abi::control::PreemptionMode::Cooperative,
            tids: (1..=kthreads as i32).collect(),
            net: None,
        };
        let request = Request::Register(reg);
        let mut bytes = request.encode();
        // The region is the one descriptor, however many kthreads there are.
        prop_assert_eq!(Request::decode(&bytes, 1), Ok(request));
        let refused = Request::decode(&bytes, kthreads + 1);
        prop_assert!(refused.is_err(), "{:?}", refused);
        let at = flip.0 % bytes.len();
        bytes[at] ^= flip.1 | 1;
        if let Err(err) = Request::decode(&bytes, 1) {
            prop_assert!(!err.to_string().is_empty());
        }
    }
}
