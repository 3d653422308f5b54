//! A small `figure1` sweep end to end: the bound and Corral at a few loads, short runs.

use corral_sim::Costs;
use corral_sim::bound::BoundParams;
use corral_sim::figure1::{self, Figure1Config};

fn small_sweep() -> Figure1Config {
    Figure1Config {
        loads: vec![0.1, 0.5, 1.5, 3.0],
        max_cores: 4,
        bound: BoundParams {
            requests: 20_000,
            ..BoundParams::default()
        },
        costs: Costs::measured(),
        batch_runtimes: 0,
        duration_ns: 5_000_000,
        seed: 3,
    }
}

#[test]
fn every_load_gets_a_bound_and_a_corral_efficiency() {
    let config = small_sweep();
    let rows = figure1::run(&config).unwrap();
    assert_eq!(rows.len(), config.loads.len());
    for (row, &load) in rows.iter().zip(&config.loads) {
        assert_eq!(row.bound.load, load);
        assert!(f64::from(row.bound.cores) >= load.ceil(), "{row:?}");
        for efficiency in [row.bound.efficiency, row.corral_efficiency] {
            assert!(efficiency > 0.0 && efficiency <= 1.0, "{row:?}");
        }
        assert!(row.corral_p999_ns > 0, "{row:?}");
        assert!(row.corral_cores > 0.0, "{row:?}");
    }
    let csv = figure1::csv(&rows);
    assert_eq!(csv.lines().count(), rows.len() + 1);
    let columns = figure1::CSV_HEADER.split(',').count();
    assert!(csv.lines().all(|line| line.split(',').count() == columns));
    assert_eq!(figure1::table(&rows).lines().count(), rows.len() + 1);
}

#[test]
fn a_batch_runtime_beside_it_still_gives_defined_efficiencies() {
    let config = Figure1Config {
        batch_runtimes: 1,
        loads: vec![0.5, 2.0],
        ..small_sweep()
    };
    for row in figure1::run(&config).unwrap() {
        assert!(
            row.corral_efficiency > 0.0 && row.corral_efficiency <= 1.0,
            "{row:?}"
        );
    }
}

#[test]
fn the_command_draws_the_measured_points_beside_the_sweep() {
    let dir = std::env::temp_dir().join(format!("corral-sim-figure1-cmd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let measured = dir.join("measured.csv");
    std::fs::write(
        &measured,
        "load,cores,offered_cores,requests,completed,efficiency,p50_us,p99_us,p999_us,\
         core_seconds_held,service_seconds,wall_seconds,grants_per_s,parks_per_s,late_arrivals\n\
         0.3,1,0.3,600,600,0.6,20.0,100.0,300.0,0.5,0.3,1.0,1000.0,1000.0,0\n",
    )
    .unwrap();
    let out = dir.join("out");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_corral-sim"))
        .args([
            "figure1",
            "--max-cores",
            "1",
            "--loads",
            "0.5",
            "--bound-requests",
            "20000",
        ])
        .args(["--seconds", "0.005", "--measured"])
        .arg(&measured)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("corral-sim runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for file in [
        "figure1.csv",
        "figure1-measured.csv",
        "figure1.png",
        "figure1.svg",
    ] {
        assert!(out.join(file).is_file(), "{file} missing: {stderr}");
    }
    let table = std::fs::read_to_string(out.join("figure1-measured.csv")).unwrap();
    assert!(table.lines().any(|l| l.starts_with("0.3,")), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}
