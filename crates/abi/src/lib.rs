//! Shared-memory layout between iokerneld and Corral runtimes.
