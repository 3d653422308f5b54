//! `pthread_once`: 0 not run, 1 running, 2 done, in the program's `pthread_once_t`. Threads
//! arriving while the routine runs sleep until it is done.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::futex;

const NOT_RUN: u32 = 0;
const RUNNING: u32 = 1;
const DONE: u32 = 2;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_once(
    once: *mut libc::pthread_once_t,
    routine: Option<unsafe extern "C" fn()>,
) -> i32 {
    // SAFETY: pthread_once_t is an int the program set to PTHREAD_ONCE_INIT (0).
    let w = unsafe { &*(once as *const AtomicU32) };
    loop {
        match w.compare_exchange(NOT_RUN, RUNNING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                if let Some(routine) = routine {
                    // SAFETY: the program's once routine, called once as POSIX says.
                    unsafe { routine() };
                }
                w.store(DONE, Ordering::Release);
                futex::wake(w, usize::MAX);
                return 0;
            }
            Err(DONE) => return 0,
            Err(_) => {
                let _ = futex::wait(w, RUNNING, None);
            }
        }
    }
}
