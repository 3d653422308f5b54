//! A minimal logger for iokerneld: one line per record (wall-clock time, level, message) to
//! standard error or appended to a file.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

struct Logger {
    level: LevelFilter,
    out: Mutex<Box<dyn Write + Send>>,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // A poisoned lock only means another thread panicked mid-line; keep logging.
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(
            out,
            "{}.{:06} {:5} {}",
            now.as_secs(),
            now.subsec_micros(),
            record.level(),
            record.args()
        );
        let _ = out.flush();
    }

    fn flush(&self) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.flush();
    }
}

/// Installs the logger. Fails if the log file cannot be opened or a logger is already set.
pub fn init(level: LevelFilter, file: Option<&Path>) -> io::Result<()> {
    let out: Box<dyn Write + Send> = match file {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            Box::new(OpenOptions::new().create(true).append(true).open(path)?)
        }
        None => Box::new(io::stderr()),
    };
    log::set_boxed_logger(Box::new(Logger {
        level,
        out: Mutex::new(out),
    }))
    .map_err(|e| io::Error::other(e.to_string()))?;
    log::set_max_level(level);
    Ok(())
}
