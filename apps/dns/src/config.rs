//! Which zones to serve: `ZONEFILE` or `ORIGIN=ZONEFILE` arguments, or a small TOML file:
//!
//! ```toml
//! listen = "127.0.0.1"   # optional, as -l
//! port = 5353            # optional, as -p
//!
//! [[zone]]
//! name = "example.com"   # optional: else the file's $ORIGIN or SOA owner
//! file = "example.com.zone"
//! ```
//!
//! Zone files named in a config are relative to the config's directory.

use std::path::{Path, PathBuf};

use corral_dns_proto::{Catalog, Name, Zone};
use serde::Deserialize;

/// A zone to load: its file and, when given, its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSpec {
    pub origin: Option<String>,
    pub file: PathBuf,
}

impl ZoneSpec {
    /// `ZONEFILE` or `ORIGIN=ZONEFILE`.
    pub fn parse(arg: &str) -> ZoneSpec {
        match arg.split_once('=') {
            Some((o, f)) if !o.is_empty() && !o.contains('/') => ZoneSpec {
                origin: Some(o.to_string()),
                file: PathBuf::from(f),
            },
            _ => ZoneSpec {
                origin: None,
                file: PathBuf::from(arg),
            },
        }
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<String>,
    pub port: Option<u16>,
    #[serde(default)]
    pub zone: Vec<ConfigZone>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ConfigZone {
    pub name: Option<String>,
    pub file: PathBuf,
}

/// Reads a config file; its zone paths come back relative to where the server runs.
pub fn read_config(path: &Path) -> Result<(ConfigFile, Vec<ZoneSpec>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cfg: ConfigFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let specs = cfg
        .zone
        .iter()
        .map(|z| ZoneSpec {
            origin: z.name.clone(),
            file: dir.join(&z.file),
        })
        .collect();
    Ok((cfg, specs))
}

/// Loads every zone; the first bad one fails with its file, line and reason.
pub fn load(specs: &[ZoneSpec]) -> Result<Catalog, String> {
    let mut catalog = Catalog::new();
    for s in specs {
        let origin = match &s.origin {
            Some(o) => {
                let text = if o.ends_with('.') {
                    o.clone()
                } else {
                    format!("{o}.")
                };
                Some(Name::parse(&text, None).map_err(|e| format!("zone name {o:?}: {e}"))?)
            }
            None => None,
        };
        let zone = Zone::load(&s.file, origin, &mut |p| std::fs::read_to_string(p))
            .map_err(|e| e.to_string())?;
        catalog
            .insert(zone)
            .map_err(|e| format!("{}: {e}", s.file.display()))?;
    }
    Ok(catalog)
}
