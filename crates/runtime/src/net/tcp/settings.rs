//! The runtime's TCP settings: the engine's per-connection [`TcpConfig`] plus what the runtime
//! itself bounds (the connection table, listener backlogs, SYN cookies).

use corral_tcp::TcpConfig;

use crate::config::ConfigError;

/// Environment variables read by [`TcpSettings::apply_env`] (through `NetConfig::from_env`).
pub const TCP_MAX_CONNECTIONS_ENV: &str = "CORRAL_TCP_MAX_CONNECTIONS";
pub const TCP_SYN_BACKLOG_ENV: &str = "CORRAL_TCP_SYN_BACKLOG";
pub const TCP_ACCEPT_BACKLOG_ENV: &str = "CORRAL_TCP_ACCEPT_BACKLOG";
pub const TCP_SYN_COOKIES_ENV: &str = "CORRAL_TCP_SYN_COOKIES";
pub const TCP_BUFFER_ENV: &str = "CORRAL_TCP_BUFFER";
pub const TCP_RTO_MIN_US_ENV: &str = "CORRAL_TCP_RTO_MIN_US";
pub const TCP_TIME_WAIT_MS_ENV: &str = "CORRAL_TCP_TIME_WAIT_MS";
pub const TCP_NODELAY_ENV: &str = "CORRAL_TCP_NODELAY";
pub const TCP_ACK_STRETCH_ENV: &str = "CORRAL_TCP_ACK_STRETCH";

/// TCP settings of one runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSettings {
    /// Settings of every connection (listeners' and outgoing ones).
    pub tcp: TcpConfig,
    /// Most connections in the table at once, half-open and TIME-WAIT ones included; beyond
    /// it new ones are refused (counted as `table_full`).
    pub max_connections: usize,
    /// Half-open connections a listener holds before it answers with SYN cookies (or drops).
    pub syn_backlog: usize,
    /// Established connections waiting for `accept`, per listener (`TcpListener::bind`'s).
    pub accept_backlog: usize,
    /// Answer SYNs with cookies once a listener's SYN backlog is full.
    pub syn_cookies: bool,
}

impl Default for TcpSettings {
    fn default() -> Self {
        TcpSettings {
            tcp: TcpConfig::default(),
            max_connections: 65_536,
            syn_backlog: 1024,
            accept_backlog: 1024,
            syn_cookies: true,
        }
    }
}

/// Largest table a runtime may ask for.
const MAX_CONNECTIONS: usize = 1 << 22;

impl TcpSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tcp.validate().map_err(|e| {
            ConfigError::new(
                "net.tcp.tcp",
                e.field,
                format!("a valid value ({})", e.problem),
            )
        })?;
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(ConfigError::new(
                "net.tcp.max_connections",
                self.max_connections,
                format!("1..={MAX_CONNECTIONS}"),
            ));
        }
        if self.syn_backlog > 1 << 20 {
            return Err(ConfigError::new(
                "net.tcp.syn_backlog",
                self.syn_backlog,
                "at most 1048576",
            ));
        }
        if !(1..=1 << 20).contains(&self.accept_backlog) {
            return Err(ConfigError::new(
                "net.tcp.accept_backlog",
                self.accept_backlog,
                "1..=1048576",
            ));
        }
        Ok(())
    }

    /// Overrides settings from the environment (unset or empty variables leave them alone).
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn num<T: std::str::FromStr>(key: &'static str, v: &str) -> Result<T, ConfigError> {
            v.trim()
                .parse()
                .map_err(|_| ConfigError::new(key, v, "a non-negative integer"))
        }
        fn flag(key: &'static str, v: &str) -> Result<bool, ConfigError> {
            match v.trim() {
                "1" | "true" | "on" | "yes" => Ok(true),
                "0" | "false" | "off" | "no" => Ok(false),
                _ => Err(ConfigError::new(key, v, "1 or 0")),
            }
        }
        if let Some(v) = var(TCP_MAX_CONNECTIONS_ENV) {
            self.max_connections = num(TCP_MAX_CONNECTIONS_ENV, &v)?;
        }
        if let Some(v) = var(TCP_SYN_BACKLOG_ENV) {
            self.syn_backlog = num(TCP_SYN_BACKLOG_ENV, &v)?;
        }
        if let Some(v) = var(TCP_ACCEPT_BACKLOG_ENV) {
            self.accept_backlog = num(TCP_ACCEPT_BACKLOG_ENV, &v)?;
        }
        if let Some(v) = var(TCP_SYN_COOKIES_ENV) {
            self.syn_cookies = flag(TCP_SYN_COOKIES_ENV, &v)?;
        }
        if let Some(v) = var(TCP_BUFFER_ENV) {
            let n: usize = num(TCP_BUFFER_ENV, &v)?;
            self.tcp.send_buffer = n;
            self.tcp.recv_buffer = n;
        }
        if let Some(v) = var(TCP_RTO_MIN_US_ENV) {
            let us: u64 = num(TCP_RTO_MIN_US_ENV, &v)?;
            self.tcp.rto_min = us.saturating_mul(1000);
        }
        if let Some(v) = var(TCP_TIME_WAIT_MS_ENV) {
            let ms: u64 = num(TCP_TIME_WAIT_MS_ENV, &v)?;
            self.tcp.time_wait = ms.saturating_mul(1_000_000);
        }
        if let Some(v) = var(TCP_NODELAY_ENV) {
            self.tcp.nodelay = flag(TCP_NODELAY_ENV, &v)?;
        }
        if let Some(v) = var(TCP_ACK_STRETCH_ENV) {
            self.tcp.ack_stretch = num(TCP_ACK_STRETCH_ENV, &v)?;
        }
        self.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_env_overrides_apply() {
        TcpSettings::default().validate().unwrap();
        let mut s = TcpSettings::default();
        let env = |k: &str| match k {
            TCP_MAX_CONNECTIONS_ENV => Some("100".to_string()),
            TCP_SYN_COOKIES_ENV => Some("0".to_string()),
            TCP_TIME_WAIT_MS_ENV => Some("5".to_string()),
            TCP_ACK_STRETCH_ENV => Some("2".to_string()),
            _ => None,
        };
        s.apply_env(env).unwrap();
        assert_eq!(s.max_connections, 100);
        assert!(!s.syn_cookies);
        assert_eq!(s.tcp.time_wait, 5_000_000);
        assert_eq!(s.tcp.ack_stretch, 2);
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut s = TcpSettings::default();
        let e = s
            .apply_env(|k| (k == TCP_SYN_COOKIES_ENV).then(|| "maybe".to_string()))
            .unwrap_err();
        assert_eq!(e.key, TCP_SYN_COOKIES_ENV);
        let mut s = TcpSettings::default();
        let e = s
            .apply_env(|k| (k == TCP_MAX_CONNECTIONS_ENV).then(|| "0".to_string()))
            .unwrap_err();
        assert_eq!(e.key, "net.tcp.max_connections");
        let mut s = TcpSettings::default();
        let e = s
            .apply_env(|k| (k == TCP_BUFFER_ENV).then(|| "10".to_string()))
            .unwrap_err();
        assert_eq!(e.key, "net.tcp.tcp");
        let mut s = TcpSettings::default();
        let e = s
            .apply_env(|k| (k == TCP_ACK_STRETCH_ENV).then(|| "1".to_string()))
            .unwrap_err();
        assert_eq!(e.key, "net.tcp.tcp");
        assert!(e.to_string().contains("ack_stretch"), "{e}");
    }
}
