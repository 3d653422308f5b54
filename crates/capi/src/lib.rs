//! C ABI of the Corral runtime.
