//! Unmodified Debian binaries with threads: `xz -T2`, `zstd -T2` and `pigz -p 2` compress a
//! generated file under corral-run byte for byte as they do plain, and the result decompresses
//! to the input.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// About 12 MiB of text that compresses a little (so every compressor has work for 2 threads),
/// written once for the tests of this binary, which run in parallel.
fn input(dir: &Path) -> PathBuf {
    static INPUT: OnceLock<PathBuf> = OnceLock::new();
    INPUT.get_or_init(|| write_input(dir)).clone()
}

fn write_input(dir: &Path) -> PathBuf {
    let path = dir.join("input.txt");
    let mut data = Vec::with_capacity(12 << 20);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let words = [
        "corral ", "uthread ", "kthread ", "core ", "grant ", "steal ", "park\n",
    ];
    while data.len() < 12 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(5) {
            data.extend_from_slice(format!("{:016x} ", x).as_bytes());
        } else {
            data.extend_from_slice(words[(x >> 32) as usize % words.len()].as_bytes());
        }
    }
    let tmp = dir.join("input.tmp");
    std::fs::write(&tmp, &data).expect("write the input");
    std::fs::rename(&tmp, &path).expect("rename the input");
    path
}

fn check(program: &str, compress: &[&str], decompress: &[&str]) {
    let dir = support::scratch("compressors");
    let input = input(&dir);
    let exe = Path::new("/usr/bin").join(program);
    assert!(
        exe.is_file(),
        "{} is missing: scripts/setup.sh installs it",
        exe.display()
    );
    let plain = support::run(Command::new(&exe).args(compress).arg(&input));
    support::success(&format!("plain {program}"), &plain);
    let shimmed = support::run(
        support::corral_run()
            .arg("--")
            .arg(&exe)
            .args(compress)
            .arg(&input),
    );
    support::success(&format!("{program} under corral-run"), &shimmed);
    assert!(
        shimmed.stdout == plain.stdout,
        "{program}: output under corral-run ({} bytes) differs from the plain run ({} bytes)",
        shimmed.stdout.len(),
        plain.stdout.len()
    );
    let packed = dir.join(format!("packed.{program}"));
    std::fs::write(&packed, &shimmed.stdout).expect("write the compressed output");
    let unpacked = support::run(Command::new(&exe).args(decompress).arg(&packed));
    support::success(&format!("{program} decompressing"), &unpacked);
    assert!(
        unpacked.stdout == std::fs::read(&input).expect("read the input"),
        "{program}: what corral-run compressed does not decompress to the input"
    );
}

#[test]
fn xz_two_threads() {
    check("xz", &["-T2", "-1", "-c"], &["-d", "-c"]);
}

#[test]
fn zstd_two_threads() {
    check("zstd", &["-T2", "-q", "-c"], &["-d", "-q", "-c"]);
}

#[test]
fn pigz_two_threads() {
    check("pigz", &["-p", "2", "-c"], &["-d", "-c"]);
}
