//! iokerneld's building blocks: the core allocator (`alloc`).

pub mod alloc;
