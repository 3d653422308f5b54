//! `corral-demo`: Corral against Linux for a co-located spin server and batch job, side by
//! side on this machine. `corral-demo --help` lists the experiments and their options.

use std::process::ExitCode;

use clap::Parser;
use corral_demo::cli::Args;
use corral_demo::error::Error;
use corral_demo::{experiments, procs};

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = procs::install_interrupt_handler() {
        eprintln!("corral-demo: {e}");
        return ExitCode::from(2);
    }
    match experiments::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Interrupted) => {
            eprintln!("corral-demo: interrupted; every process it started has been stopped");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("corral-demo: {e}");
            ExitCode::FAILURE
        }
    }
}
