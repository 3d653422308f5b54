//! `corral-run [OPTIONS] -- PROGRAM ARGS...`: runs an unmodified, dynamically linked program
//! as a Corral runtime, standalone or under iokerneld, by preloading the shim library
//! (`libcorral_shim.so`, found next to this binary or at `$CORRAL_RUN_SHIM`) and executing the
//! program in this process: its exit status, signals and standard streams are its own.
//!
//! An exec by the program (a shell-script wrapper's `exec`) keeps it under Corral. The programs
//! it starts as children (`fork` and `exec`, `posix_spawn`, `system`) run plain, or with
//! `--children corral` each under Corral as a runtime of its own, with the same options.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: corral-run [--iokerneld SOCK] [--name N] [--kthreads N] \
[--guaranteed N] [--max-cores N] [--preemption idle-class|signal] [--blocking-reserve N] \
[--children plain|corral] -- PROGRAM ARGS...";

/// The shim's file name, next to this binary in a cargo target directory or an install.
const SHIM_FILE: &str = "libcorral_shim.so";
const SHIM_ENV: &str = "CORRAL_RUN_SHIM";

struct Launch {
    env: Vec<(&'static str, String)>,
    program: OsString,
    args: Vec<OsString>,
}

fn number(flag: &str, value: &str) -> Result<String, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 || matches!(flag, "--guaranteed" | "--blocking-reserve") => {
            Ok(n.to_string())
        }
        _ => Err(format!(
            "{flag} {value:?}: expected a positive whole number"
        )),
    }
}

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Launch, String> {
    let mut env = Vec::new();
    let mut seen = Vec::new();
    let program = loop {
        let Some(arg) = args.next() else {
            return Err("no PROGRAM given".into());
        };
        let Some(flag) = arg.to_str().filter(|a| a.starts_with('-')) else {
            break arg;
        };
        if flag == "--" {
            break args.next().ok_or("no PROGRAM after --")?;
        }
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let key = match flag {
            "--iokerneld" => "CORRAL_IOKERNELD",
            "--name" => "CORRAL_RUN_NAME",
            "--kthreads" => "CORRAL_RUN_KTHREADS",
            "--guaranteed" => "CORRAL_RUN_GUARANTEED",
            "--max-cores" => "CORRAL_RUN_MAX_CORES",
            "--preemption" => "CORRAL_RUN_PREEMPTION",
            "--blocking-reserve" => "CORRAL_RUN_BLOCKING_RESERVE",
            "--children" => "CORRAL_RUN_CHILDREN",
            _ => return Err(format!("unknown option {flag}")),
        };
        if seen.contains(&flag.to_owned()) {
            return Err(format!("{flag} given twice"));
        }
        seen.push(flag.to_owned());
        let value = args
            .next()
            .and_then(|v| v.into_string().ok())
            .ok_or(format!("{flag} needs a value"))?;
        let value = match flag {
            "--iokerneld" | "--name" => {
                if value.is_empty() {
                    return Err(format!("{flag} needs a non-empty value"));
                }
                value
            }
            "--preemption" => {
                if !matches!(value.as_str(), "idle-class" | "signal") {
                    return Err(format!(
                        "--preemption {value:?}: expected idle-class or signal"
                    ));
                }
                value
            }
            "--children" => {
                if !matches!(value.as_str(), "plain" | "corral") {
                    return Err(format!("--children {value:?}: expected plain or corral"));
                }
                value
            }
            _ => number(flag, &value)?,
        };
        env.push((key, value));
    };
    let has = |k: &str| env.iter().any(|(key, _)| *key == k);
    for (dependent, flag) in [
        ("CORRAL_RUN_NAME", "--name"),
        ("CORRAL_RUN_GUARANTEED", "--guaranteed"),
        ("CORRAL_RUN_PREEMPTION", "--preemption"),
    ] {
        if has(dependent) && !has("CORRAL_IOKERNELD") {
            return Err(format!("{flag} needs --iokerneld"));
        }
    }
    if has("CORRAL_RUN_BLOCKING_RESERVE") && has("CORRAL_IOKERNELD") {
        return Err("--blocking-reserve is for standalone runs (iokerneld grants cores to registered kthreads only)".into());
    }
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| *key == k)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    if let (Some(k), Some(m)) = (get("CORRAL_RUN_KTHREADS"), get("CORRAL_RUN_MAX_CORES"))
        && k > m
    {
        return Err(format!("--kthreads {k} exceeds --max-cores {m}"));
    }
    Ok(Launch {
        env,
        program,
        args: args.collect(),
    })
}

fn shim_path() -> Result<PathBuf, String> {
    let path = match std::env::var_os(SHIM_ENV) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this program's directory: {e}"))?
            .with_file_name(SHIM_FILE),
    };
    if !path.is_file() {
        return Err(format!(
            "the shim library {} is missing (build it with `cargo build -p corral-run`, or set {SHIM_ENV})",
            path.display()
        ));
    }
    std::path::absolute(&path).map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> ExitCode {
    let launch = match parse(std::env::args_os().skip(1)) {
        Ok(l) => l,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("corral-run: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let shim = match shim_path() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("corral-run: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)));
    let mut preload = shim.into_os_string();
    if let Some(previous) = std::env::var_os("LD_PRELOAD") {
        cmd.env("CORRAL_RUN_LD_PRELOAD", &previous);
        if !previous.is_empty() {
            preload.push(" ");
            preload.push(previous);
        }
    }
    cmd.env("LD_PRELOAD", preload).env("CORRAL_RUN", "1");
    let err = cmd.exec();
    eprintln!(
        "corral-run: cannot run {}: {err}",
        launch.program.to_string_lossy()
    );
    // As shells do: 127 for a program not found, 126 for one that cannot be run.
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
