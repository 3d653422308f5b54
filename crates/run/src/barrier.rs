//! `pthread_barrier_*`: arrivals counted in the object; the last one of a round resets the count
//! and bumps the round number, on which the others sleep.
//!
//! Layout inside glibc's 32-byte object: offset 0 the round, 4 the arrivals, 8 the count.

use core::sync::atomic::Ordering;

use crate::{futex, layout};

const OFF_ROUND: usize = 0;
const OFF_ARRIVED: usize = 4;
const OFF_COUNT: usize = 8;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_barrier_init(
    b: *mut libc::pthread_barrier_t,
    _attr: *const libc::pthread_barrierattr_t,
    count: u32,
) -> i32 {
    if count == 0 {
        return libc::EINVAL;
    }
    // SAFETY: b points at the program's barrier storage.
    unsafe {
        b.write_bytes(0, 1);
        layout::word(b, OFF_COUNT).store(count, Ordering::Release);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_barrier_destroy(b: *mut libc::pthread_barrier_t) -> i32 {
    // SAFETY: b is a live barrier.
    if unsafe { layout::word(b, OFF_ARRIVED).load(Ordering::Relaxed) } != 0 {
        return libc::EBUSY;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_barrier_wait(b: *mut libc::pthread_barrier_t) -> i32 {
    // SAFETY: b is a live barrier.
    let (round, arrived, count) = unsafe {
        (
            layout::word(b, OFF_ROUND),
            layout::word(b, OFF_ARRIVED),
            layout::word(b, OFF_COUNT).load(Ordering::Relaxed),
        )
    };
    // Nobody of the next round arrives before this round's leader bumps the round, so the
    // round read here is the one our arrival counts towards.
    let mine = round.load(Ordering::Acquire);
    if arrived.fetch_add(1, Ordering::AcqRel) + 1 == count {
        arrived.store(0, Ordering::Relaxed);
        round.fetch_add(1, Ordering::Release);
        futex::wake(round, usize::MAX);
        return libc::PTHREAD_BARRIER_SERIAL_THREAD;
    }
    while round.load(Ordering::Acquire) == mine {
        let _ = futex::wait(round, mine, None);
    }
    0
}
