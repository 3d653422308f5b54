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
