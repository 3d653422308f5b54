//! C ABI of the Corral runtime: uthreads, mutexes, condition variables, wait groups, UDP
//! sockets and TCP connections for C and C++ programs. `include/corral.h` is generated from
//! this crate by cbindgen (settings in `cbindgen.toml`), so the doc comments here are the C
//! documentation;
//! `include/corral.hpp` wraps it for C++. The header is committed, and `tests/header.rs` fails
//! when it no longer matches the code (it says how to regenerate it).
//!
//! Every function that can fail returns 0 or a negative errno value. Nothing unwinds into C: a
//! Rust panic is caught at the boundary, reported on stderr by the panic hook, and returned as
//! `-ENOTRECOVERABLE`.
//!
//! The modules name each other through `super::`, never `crate::`: `tests/support/testlib.rs`
//! compiles this file as a module of another crate, where `crate` is that crate's root.

// What every call shares: panics and errors at the boundary, memory crossing it.
mod error;
mod memory;

// The calls. cbindgen emits functions in the order it reads them, module by module, so this
// order is the header's; rustfmt sorts adjacent `mod` lines, hence one per paragraph.
mod runtime;

mod thread;

mod mutex;

mod condvar;

mod waitgroup;

mod udp;

mod tcp;

// C code on uthreads allocates with preemption disabled: this defines malloc and its family for
// programs linking libcorral.
use corral_preempt_malloc as _;
