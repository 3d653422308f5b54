#[path = "../../src/lib.rs"]
pub mod capi;
