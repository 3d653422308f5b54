//! `corral-demo --replot DIR`: a finished run's plots drawn again from its saved results, with
//! nothing measured. `results.json` holds everything any experiment plots; a sweep's
//! `results.csv` holds enough for its two plots, and is what is left when only the CSV was kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use corral_loadgen::ServiceDist;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::charts::{self, BoundP999, PlotPoint, Series};
use crate::error::{Error, Result};
use crate::experiments;
use crate::kv;
use crate::report;
use crate::results::{BoundPoint, Burst, KvSystemRun, System, SystemRun};

/// Draws the plots of the run whose results are in `dir` into `out`; `service` titles a sweep
/// read from its CSV, which does not record it. Returns the files written.
pub fn replot(dir: &Path, out: &Path, service: &ServiceDist) -> Result<Vec<PathBuf>> {
    let json = dir.join("results.json");
    let csv = dir.join("results.csv");
    if json.exists() {
        from_json(&json, out)
    } else if csv.exists() {
        let text = std::fs::read_to_string(&csv)
            .map_err(|e| Error::msg(format!("cannot read {}: {e}", csv.display())))?;
        let sweep =
            SweepCsv::parse(&text).map_err(|e| Error::msg(format!("{}: {e}", csv.display())))?;
        charts::save_sweep(
            out,
            &report::service_label(service),
            &sweep.loads,
            &sweep.systems,
            &sweep.bound,
        )
    } else {
        Err(Error::msg(format!(
            "{} holds neither results.json nor results.csv",
            dir.display()
        )))
    }
}

fn field<T: DeserializeOwned>(record: &Value, pointer: &str, path: &Path) -> Result<T> {
    let v = record.pointer(pointer).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| Error::msg(format!("{}: {pointer}: {e}", path.display())))
}

fn from_json(path: &Path, out: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::msg(format!("cannot read {}: {e}", path.display())))?;
    let record: Value =
        serde_json::from_str(&text).map_err(|e| Error::msg(format!("{}: {e}", path.display())))?;
    let experiment: String = field(&record, "/experiment", path)?;
    let service = || -> Result<ServiceDist> {
        let s: String = field(&record, "/plan/service", path)?;
        s.parse()
            .map_err(|e| Error::msg(format!("{}: /plan/service: {e}", path.display())))
    };
    match experiment.as_str() {
        "sweep" | "intervals" => {
            let runs: Vec<SystemRun> = field(&record, "/systems", path)?;
            let bounds: Vec<BoundPoint> = field(&record, "/bounds", path)?;
            let loads: Vec<f64> = field(&record, "/plan/loads", path)?;
            let plots = if experiment == "sweep" {
                experiments::sweep_plots
            } else {
                experiments::intervals_plots
            };
            plots(out, &service()?, &loads, &runs, &bounds)
        }
        "burst" => {
            let b: Burst = field(&record, "/burst", path)?;
            experiments::burst_plots(out, &b)
        }
        "kv" | "dns" => {
            let runs: Vec<KvSystemRun> = field(&record, "/systems", path)?;
            let unloaded_rate: f64 = field(&record, "/plan/kv/unloaded_rate", path)?;
            let service = if experiment == "dns" {
                kv::Service::Dns
            } else {
                kv::Service::Kv
            };
            kv::kv_plots(out, service, unloaded_rate, &runs)
        }
        other => Err(Error::msg(format!(
            "{}: unknown experiment {other:?}",
            path.display()
        ))),
    }
}

/// Splits CSV text into records, reading `"..."` quoting the way `report::csv` writes it.
fn csv_records(text: &str) -> std::result::Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is never closed".into());
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

/// What a sweep's plots need from its `results.csv`.
#[derive(Debug)]
struct SweepCsv {
    loads: Vec<f64>,
    systems: Vec<Series>,
    bound: Vec<BoundP999>,
}

impl SweepCsv {
    fn parse(text: &str) -> std::result::Result<SweepCsv, String> {
        let records = csv_records(text)?;
        let (header, rows) = records.split_first().ok_or("the file is empty")?;
        let columns: HashMap<&str, usize> = header
            .iter()
            .enumerate()
            .map(|(i, h)| (h.as_str(), i))
            .collect();
        let systems: Vec<System> = [System::Corral, System::Linux, System::Dedicated]
            .into_iter()
            .filter(|s| columns.contains_key(format!("{}_p50_us", s.name()).as_str()))
            .collect();
        if !columns.contains_key("load") || systems.is_empty() {
            return Err(
                "not a sweep's results.csv (it has no load and p50_us columns); \
                        other experiments are drawn again from their results.json"
                    .into(),
            );
        }
        let mut loads = Vec::new();
        let mut series: Vec<Series> = systems
            .iter()
            .map(|&s| Series {
                name: s.title().to_owned(),
                color: charts::color_of(s),
                points: Vec::new(),
            })
            .collect();
        let mut bound = Vec::new();
        for (n, row) in rows.iter().enumerate() {
            let line = n + 2;
            if row.len() != header.len() {
                return Err(format!(
                    "line {line} has {} fields where the header has {}",
                    row.len(),
                    header.len()
                ));
            }
            let cell = |col: &str| {
                columns
                    .get(col)
                    .map(|&i| row[i].as_str())
                    .filter(|s| !s.is_empty())
            };
            let num = |col: &str| -> std::result::Result<Option<f64>, String> {
                cell(col)
                    .map(|s| {
                        s.parse::<f64>()
                            .map_err(|_| format!("line {line}: {col} = {s:?} is not a number"))
                    })
                    .transpose()
            };
            let count = |col: &str| -> std::result::Result<Option<u64>, String> {
                cell(col)
                    .map(|s| {
                        s.parse::<u64>()
                            .map_err(|_| format!("line {line}: {col} = {s:?} is not a count"))
                    })
                    .transpose()
            };
            let load = num("load")?.ok_or(format!("line {line}: no load"))?;
            loads.push(load);
            if let Some(p999_us) = num("bound_p999_us")? {
                bound.push(BoundP999 { load, p999_us });
            }
            for (system, series) in systems.iter().zip(&mut series) {
                let col = |c: &str| format!("{}_{c}", system.name());
                // A system not measured at this load has empty cells.
                let (Some(matched), Some(sent), Some(lost)) = (
                    count(&col("matched"))?,
                    count(&col("sent"))?,
                    count(&col("lost"))?,
                ) else {
                    continue;
                };
                let answered = matched > 0;
                // The rule of `kvreport::p99_bounded_ns`: more than 1% lost, no finite p99.
                let p99_bounded = answered && lost.saturating_mul(100) <= sent;
                series.points.push(PlotPoint {
                    x: load,
                    p50_us: num(&col("p50_us"))?.filter(|_| answered),
                    p99_us: num(&col("p99_us"))?.filter(|_| p99_bounded),
                    // Empty where the sweep found p99.9 unbounded by losses.
                    p999_us: num(&col("p999_with_losses_us"))?,
                    achieved_krps: num(&col("achieved_rps"))?.map(|r| r / 1e3),
                    batch_fraction: num(&col("batch_fraction"))?,
                });
            }
        }
        series.retain(|s| !s.points.is_empty());
        Ok(SweepCsv {
            loads,
            systems: series,
            bound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_records_read_quoted_fields() {
        let text = "a,b,c\n1,\"x, \"\"y\"\"\",\r\n2,,z";
        assert_eq!(
            csv_records(text).unwrap(),
            vec![
                vec!["a", "b", "c"],
                vec!["1", "x, \"y\"", ""],
                vec!["2", "", "z"]
            ]
        );
        assert!(csv_records("a,\"b\n").is_err());
    }

    const HEADER: &str = "load,corral_p50_us,corral_p99_us,corral_p999_with_losses_us,\
                          corral_achieved_rps,corral_matched,corral_sent,corral_lost,\
                          corral_batch_fraction,linux_p50_us,linux_p99_us,\
                          linux_p999_with_losses_us,linux_achieved_rps,linux_matched,\
                          linux_sent,linux_lost,linux_batch_fraction,bound_p999_us,flags";

    #[test]
    fn a_sweep_csv_gives_each_system_its_points_and_unbounded_tails() {
        let text = format!(
            "{HEADER}\n\
             0.1,20.5,100.0,1000.0,10000.0,10000,10000,0,0.7,50.0,140.0,2000.0,10000.0,\
             10000,10000,0,0.72,76.8,\n\
             0.5,30.0,900.0,,49900.0,9900,10000,100,0.2,60.0,3000.0,,49000.0,9899,10000,101,\
             0.05,137.0,\"C lost 100/10000; L lost 101/10000\"\n\
             0.9,,,,,,,,,0,0,,0,0,10000,10000,,660.0,\n"
        );
        let csv = SweepCsv::parse(&text).unwrap();
        assert_eq!(csv.loads, [0.1, 0.5, 0.9]);
        assert_eq!(csv.bound.len(), 3);
        assert_eq!(csv.systems.len(), 2);
        let (c, l) = (&csv.systems[0], &csv.systems[1]);
        assert_eq!((c.name.as_str(), l.name.as_str()), ("Corral", "Linux"));
        // Corral was not measured at 90%.
        assert_eq!(c.points.len(), 2);
        assert_eq!(c.points[0].p999_us, Some(1000.0));
        assert_eq!(c.points[0].achieved_krps, Some(10.0));
        // Exactly 1% lost: p99 stands; p99.9 does not.
        assert_eq!(c.points[1].p99_us, Some(900.0));
        assert_eq!(c.points[1].p999_us, None);
        // Over 1% lost: no finite p99.
        assert_eq!(l.points[1].p99_us, None);
        assert_eq!(l.points[1].p50_us, Some(60.0));
        // Nothing answered: no percentile at all.
        assert_eq!(
            (l.points[2].p50_us, l.points[2].p99_us, l.points[2].p999_us),
            (None, None, None)
        );
    }

    #[test]
    fn a_csv_that_is_not_a_sweeps_is_refused() {
        let err = SweepCsv::parse("load,interval_5us_p999_us\n0.1,1.0\n").unwrap_err();
        assert!(err.contains("not a sweep's results.csv"), "{err}");
        let err = SweepCsv::parse(&format!("{HEADER}\n0.1,x\n")).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        let bad = format!("{HEADER}\n0.1{}\n", ",abc".repeat(18));
        let err = SweepCsv::parse(&bad).unwrap_err();
        assert!(err.contains("line 2") && err.contains("abc"), "{err}");
    }

    #[test]
    fn a_directory_without_results_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = replot(dir.path(), dir.path(), &"exp:10us".parse().unwrap()).unwrap_err();
        assert!(
            err.to_string()
                .contains("neither results.json nor results.csv"),
            "{err}"
        );
    }
}
