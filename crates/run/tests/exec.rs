//! An exec by a program under corral-run replaces the program, and the new image runs under
//! Corral too, through every exec function, from any thread, with the environment the program
//! passed and nothing of the launcher's in it: the shell-script wrapper case. Children (fork
//! and exec, `posix_spawn`, `system`) run plain, or under Corral with `--children corral`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

struct Programs {
    dir: PathBuf,
    exec_via: PathBuf,
    probe: PathBuf,
}

/// Built once: the tests run in parallel, and rebuilding a program another test is running
/// fails with ETXTBSY.
fn programs() -> &'static Programs {
    static PROGRAMS: std::sync::OnceLock<Programs> = std::sync::OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = support::scratch("exec");
        let exec_via = support::build("gcc", "exec_via.c", &dir, &["-pthread"]);
        let probe = support::build("gcc", "corral_probe.c", &dir, &[]);
        Programs {
            dir,
            exec_via,
            probe,
        }
    })
}

/// `command` with the programs' directory first on `PATH`, for `execlp` and `execvp`.
fn with_path(mut command: Command, dir: &Path) -> Command {
    let path = std::env::var("PATH").unwrap_or_default();
    command.env("PATH", format!("{}:{path}", dir.display()));
    command.env_remove("LD_PRELOAD").env_remove("MARK");
    command
}

/// What the probe prints when run as `probe 1 2 3 4 5 6 7` with `MARK` set to `mark` and none
/// of the launcher's variables left.
fn probe_output(runtime: &str, mark: &str) -> String {
    format!(
        "{runtime}\nargs: 1 2 3 4 5 6 7\nmark: {mark}\nlauncher variables: 0\nLD_PRELOAD: unset\n"
    )
}

fn via(p: &Programs, flags: &[&str], how: &str) -> String {
    let mut command = with_path(support::corral_run(), &p.dir);
    command
        .args(flags)
        .arg("--")
        .arg(&p.exec_via)
        .arg(how)
        .arg(&p.probe);
    support::success(&format!("exec_via {how}"), &support::run(&mut command))
}

fn plain_via(p: &Programs, how: &str) -> String {
    let mut command = with_path(Command::new(&p.exec_via), &p.dir);
    command.arg(how).arg(&p.probe);
    support::success(
        &format!("plain exec_via {how}"),
        &support::run(&mut command),
    )
}

#[test]
fn every_exec_function_keeps_the_program_under_corral() {
    let p = programs();
    for (how, mark) in [
        ("execl", "inherited"),
        ("execlp", "inherited"),
        ("execle", "explicit"),
        ("execv", "inherited"),
        ("execvp", "inherited"),
        ("execvpe", "explicit"),
        ("execve", "explicit"),
        ("fexecve", "inherited"),
        ("thread-execl", "inherited"),
        ("thread-execve", "explicit"),
    ] {
        assert_eq!(plain_via(p, how), probe_output("plain", mark), "{how}");
        assert_eq!(via(p, &[], how), probe_output("corral", mark), "{how}");
    }
}

#[test]
fn a_failed_exec_returns_its_error_and_the_program_goes_on_under_corral() {
    let p = programs();
    let failed = "execl: No such file or directory\n";
    assert_eq!(
        plain_via(p, "missing"),
        format!("{failed}{}", probe_output("plain", "inherited"))
    );
    assert_eq!(
        via(p, &[], "missing"),
        format!("{failed}{}", probe_output("corral", "inherited"))
    );
}

#[test]
fn a_shell_script_wrapper_runs_its_program_under_corral() {
    let p = programs();
    // Kept in the source tree, not written here: a file this process has open for writing is
    // inherited by any child another test forks meanwhile, and exec of it fails with ETXTBSY
    // until that child has exec'd in turn.
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/probe_wrapper.sh");
    let expected = |runtime: &str| {
        format!("{runtime}\nargs: a b\nmark: wrapped\nlauncher variables: 0\nLD_PRELOAD: unset\n")
    };
    let plain = support::run(
        with_path(Command::new(&wrapper), &p.dir)
            .args(["a", "b"])
            .env("PROBE", &p.probe),
    );
    assert_eq!(support::success("plain wrapper", &plain), expected("plain"));
    let mut shimmed = with_path(support::corral_run(), &p.dir);
    shimmed
        .env("PROBE", &p.probe)
        .arg("--")
        .arg(&wrapper)
        .args(["a", "b"]);
    let shimmed = support::run(&mut shimmed);
    assert_eq!(
        support::success("wrapper under corral-run", &shimmed),
        expected("corral")
    );
}

#[test]
fn children_run_plain_unless_asked_to_run_under_corral() {
    let p = programs();
    let shim = support::shim();
    for how in ["fork", "spawn", "system"] {
        assert_eq!(
            via(p, &[], how),
            probe_output("plain", "inherited"),
            "{how}"
        );
        assert_eq!(
            via(p, &["--children", "plain"], how),
            probe_output("plain", "inherited"),
            "{how}"
        );
        // Under Corral the child keeps the launcher's variables, for its own children.
        let out = via(p, &["--children", "corral"], how);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..3],
            ["corral", "args: 1 2 3 4 5 6 7", "mark: inherited"],
            "{how}: {out}"
        );
        assert_ne!(lines[3], "launcher variables: 0", "{how}: {out}");
        assert_eq!(
            lines[4],
            format!(
                "LD_PRELOAD: {}",
                std::path::absolute(&shim).expect("the shim").display()
            ),
            "{how}: {out}"
        );
    }
}

/// The names of process `pid`'s threads.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

/// Debian's `/usr/bin/7z` is a shell script that ends in `exec /usr/lib/p7zip/7z "$@"`: under
/// corral-run the real 7z runs in a Corral runtime (seen from outside while it waits for its
/// input), and its archive holds the data.
#[test]
fn debians_7z_wrapper_runs_7z_under_corral() {
    use std::io::Write;
    use std::process::Stdio;
    let script = std::fs::read_to_string("/usr/bin/7z")
        .expect("/usr/bin/7z (scripts/setup.sh installs p7zip-full)");
    assert!(
        script.starts_with("#!"),
        "/usr/bin/7z is no longer a script"
    );
    let dir = support::scratch("exec-7z");
    let archive = dir.join("data.7z");
    let _ = std::fs::remove_file(&archive);
    let mut data = Vec::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    while data.len() < 4 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(format!("{} {} ", x % 10_000, x % 13).as_bytes());
    }
    let mut seven = support::corral_run()
        .args(["--", "/usr/bin/7z", "a", "-si", "-bd", "-mmt2"])
        .arg(&archive)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start corral-run 7z");
    let pid = seven.id();
    // The launcher, then the shell, then 7z, all in this one process.
    let start = std::time::Instant::now();
    loop {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let names = thread_names(pid);
        if comm.trim() == "7z" && names.iter().any(|n| n == "corral-k0") {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = seven.kill();
            panic!("7z never ran under Corral: process {comm:?}, threads {names:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut stdin = seven.stdin.take().expect("7z's stdin");
    stdin.write_all(&data).expect("write 7z's input");
    drop(stdin);
    let out = seven.wait_with_output().expect("wait for 7z");
    support::success("7z under corral-run", &out);
    let extracted = support::run(Command::new("/usr/bin/7z").args(["x", "-so"]).arg(&archive));
    assert!(extracted.status.success(), "plain 7z x failed");
    assert!(
        extracted.stdout == data,
        "7z's archive does not hold the data"
    );
}
