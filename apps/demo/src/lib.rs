//! The demo runner: a latency-critical UDP spin server and a CPU-bound batch job sharing one
//! core, under Corral (iokerneld reallocating the core every few microseconds) and under Linux
//! (the batch job at SCHED_IDLE), measured side by side over a sweep of offered loads. It prints
//! a side-by-side table and the project's targets, and writes results.json, results.csv and
//! plots. Also: the allocation-interval sweep and the load-step experiment of the Shenango
//! paper (Figures 8 and 5).
//!
//! The binary only orchestrates other programs (iokerneld, spin, batch, corral-loadgen-linux);
//! every number it reports comes from their output.

pub mod batch;
pub mod charts;
pub mod cli;
pub mod error;
pub mod experiments;
pub mod kv;
pub mod kvreport;
pub mod machine;
pub mod plot;
pub mod procs;
pub mod replot;
pub mod report;
pub mod results;
pub mod shielding;
pub mod systems;
pub mod veth;
