//! The network settings of a runtime: its address, subnet, gateway and MAC.

use std::net::Ipv4Addr;

use corral_wire::MacAddr;

use crate::config::ConfigError;
use crate::net::tcp::TcpSettings;

/// Environment variables read by [`NetConfig::from_env`].
pub const IP_ENV: &str = "CORRAL_IP";
pub const NETMASK_ENV: &str = "CORRAL_NETMASK";
pub const GATEWAY_ENV: &str = "CORRAL_GATEWAY";
pub const MAC_ENV: &str = "CORRAL_MAC";
pub const STATIC_ARP_ENV: &str = "CORRAL_STATIC_ARP";

/// IPv4 over Ethernet settings of one runtime (one address, one interface).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// The runtime's unicast address.
    pub ip: Ipv4Addr,
    /// Subnet mask: hosts inside it are reached directly, others through `gateway`.
    pub netmask: Ipv4Addr,
    /// Next hop for destinations outside the subnet; without one they are unreachable.
    pub gateway: Option<Ipv4Addr>,
    /// The runtime's MAC; `None` derives a locally administered one from `ip` (see
    /// [`NetConfig::effective_mac`]), the same on every run.
    pub mac: Option<MacAddr>,
    /// Neighbours whose MAC is known in advance: never resolved, never expired.
    pub static_arp: Vec<(Ipv4Addr, MacAddr)>,
    /// TCP: the engine's settings, the connection table bound, backlogs, SYN cookies.
    pub tcp: TcpSettings,
}

impl NetConfig {
    /// `ip` in the subnet of `prefix_len` leading one bits, no gateway, derived MAC.
    pub fn new(ip: Ipv4Addr, prefix_len: u8) -> NetConfig {
        let bits = u32::MAX
            .checked_shl(32 - u32::from(prefix_len.min(32)))
            .unwrap_or(0);
        NetConfig {
            ip,
            netmask: Ipv4Addr::from(bits),
            gateway: None,
            mac: None,
            static_arp: Vec::new(),
            tcp: TcpSettings::default(),
        }
    }

    pub fn tcp(mut self, tcp: TcpSettings) -> Self {
        self.tcp = tcp;
        self
    }

    pub fn netmask(mut self, netmask: Ipv4Addr) -> Self {
        self.netmask = netmask;
        self
    }

    pub fn gateway(mut self, gateway: Ipv4Addr) -> Self {
        self.gateway = Some(gateway);
        self
    }

    pub fn mac(mut self, mac: MacAddr) -> Self {
        self.mac = Some(mac);
        self
    }

    pub fn static_arp(mut self, ip: Ipv4Addr, mac: MacAddr) -> Self {
        self.static_arp.push((ip, mac));
        self
    }

    /// The MAC the runtime uses: the configured one, else `02:43:` followed by the four bytes
    /// of the address. Locally administered and unicast, and distinct for distinct addresses,
    /// so two runtimes on one host never collide and a restart keeps neighbours' caches valid.
    pub fn effective_mac(&self) -> MacAddr {
        self.mac.unwrap_or_else(|| {
            let [a, b, c, d] = self.ip.octets();
            MacAddr([0x02, 0x43, a, b, c, d])
        })
    }

    /// Whether `addr` is in the runtime's subnet.
    pub fn on_link(&self, addr: Ipv4Addr) -> bool {
        let mask = u32::from(self.netmask);
        u32::from(addr) & mask == u32::from(self.ip) & mask
    }

    /// The subnet's directed broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.ip) | !u32::from(self.netmask))
    }

    /// Checks every value; the error names the key and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_unicast(self.ip) {
            return Err(ConfigError::new(
                "net.ip",
                self.ip,
                "a unicast IPv4 address (not 0.0.0.0, loopback, multicast or broadcast)",
            ));
        }
        let mask = u32::from(self.netmask);
        if mask.leading_ones() + mask.trailing_zeros() != 32 || mask.leading_ones() > 30 {
            return Err(ConfigError::new(
                "net.netmask",
                self.netmask,
                "a contiguous mask of 0 to 30 bits (e.g. 255.255.255.0)",
            ));
        }
        if mask != 0 && (self.ip == self.broadcast() || u32::from(self.ip) & !mask == 0) {
            return Err(ConfigError::new(
                "net.ip",
                self.ip,
                format!(
                    "a host address of its subnet (not the network or broadcast address under \
                     netmask {})",
                    self.netmask
                ),
            ));
        }
        if let Some(gw) = self.gateway
            && (!is_unicast(gw) || gw == self.ip || !self.on_link(gw))
        {
            return Err(ConfigError::new(
                "net.gateway",
                gw,
                format!(
                    "a unicast address other than net.ip inside {}/{}",
                    self.ip,
                    mask.leading_ones()
                ),
            ));
        }
        if let Some(mac) = self.mac
            && (!mac.is_unicast() || mac.is_zero())
        {
            return Err(ConfigError::new(
                "net.mac",
                mac,
                "a unicast, non-zero MAC address",
            ));
        }
        for &(ip, mac) in &self.static_arp {
            if !is_unicast(ip) || !mac.is_unicast() || mac.is_zero() {
                return Err(ConfigError::new(
                    "net.static_arp",
                    format!("{ip}={mac}"),
                    "unicast IPv4 and MAC addresses",
                ));
            }
        }
        self.tcp.validate()
    }

    /// Reads `CORRAL_IP` (`a.b.c.d` or `a.b.c.d/len`; default prefix 24), `CORRAL_NETMASK`,
    /// `CORRAL_GATEWAY`, `CORRAL_MAC` (`aa:bb:cc:dd:ee:ff`) and `CORRAL_STATIC_ARP`
    /// (`ip=mac,ip=mac`), and the TCP settings' variables (`CORRAL_TCP_*`, see
    /// [`TcpSettings::apply_env`]). `Ok(None)` when `CORRAL_IP` is unset or empty.
    pub fn from_env() -> Result<Option<NetConfig>, ConfigError> {
        let var = |key: &str| std::env::var(key).ok().filter(|v| !v.trim().is_empty());
        let Some(ip) = var(IP_ENV) else {
            return Ok(None);
        };
        Self::from_strings(
            &ip,
            var(NETMASK_ENV).as_deref(),
            var(GATEWAY_ENV).as_deref(),
            var(MAC_ENV).as_deref(),
            var(STATIC_ARP_ENV).as_deref(),
        )
        .and_then(|mut cfg| {
            cfg.tcp.apply_env(var)?;
            Ok(cfg)
        })
        .map(Some)
    }

    /// Parses the textual forms that [`NetConfig::from_env`] reads, and validates the result.
    pub fn from_strings(
        ip: &str,
        netmask: Option<&str>,
        gateway: Option<&str>,
        mac: Option<&str>,
        static_arp: Option<&str>,
    ) -> Result<NetConfig, ConfigError> {
        let ip = ip.trim();
        let (addr, prefix) = match ip.split_once('/') {
            Some((a, p)) => {
                let p: u8 = p
                    .parse()
                    .ok()
                    .filter(|&p| p <= 32)
                    .ok_or_else(|| ConfigError::new(IP_ENV, ip, "a.b.c.d or a.b.c.d/0-32"))?;
                (a, p)
            }
            None => (ip, 24),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| ConfigError::new(IP_ENV, ip, "a.b.c.d or a.b.c.d/0-32"))?;
        let mut cfg = NetConfig::new(addr, prefix);
        if let Some(m) = netmask {
            cfg.netmask = m
                .trim()
                .parse()
                .map_err(|_| ConfigError::new(NETMASK_ENV, m, "a mask such as 255.255.255.0"))?;
        }
        if let Some(g) = gateway {
            cfg.gateway = Some(
                g.trim()
                    .parse()
                    .map_err(|_| ConfigError::new(GATEWAY_ENV, g, "an IPv4 address"))?,
            );
        }
        if let Some(m) = mac {
            cfg.mac =
                Some(m.trim().parse().map_err(|_| {
                    ConfigError::new(MAC_ENV, m, "a MAC such as 02:00:00:00:00:01")
                })?);
        }
        if let Some(list) = static_arp {
            for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let bad = || ConfigError::new(STATIC_ARP_ENV, item, "ip=mac[,ip=mac...]");
                let (i, m) = item.split_once('=').ok_or_else(bad)?;
                let i: Ipv4Addr = i.trim().parse().map_err(|_| bad())?;
                let m: MacAddr = m.trim().parse().map_err(|_| bad())?;
                cfg.static_arp.push((i, m));
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

fn is_unicast(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_mac_is_stable_unicast_and_local() {
        let c = NetConfig::new(Ipv4Addr::new(10, 1, 2, 3), 24);
        let mac = c.effective_mac();
        assert_eq!(mac, MacAddr([0x02, 0x43, 10, 1, 2, 3]));
        assert!(mac.is_unicast() && mac.is_locally_administered());
        assert_eq!(c.effective_mac(), mac);
        assert_eq!(c.netmask, Ipv4Addr::new(255, 255, 255, 0));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validation_names_key_and_value() {
        let ok = NetConfig::new(Ipv4Addr::new(10, 0, 0, 2), 24);
        let e = NetConfig {
            ip: Ipv4Addr::BROADCAST,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!((e.key, e.value.as_str()), ("net.ip", "255.255.255.255"));
        let e = ok
            .clone()
            .netmask(Ipv4Addr::new(255, 0, 255, 0))
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "net.netmask");
        let e = ok
            .clone()
            .gateway(Ipv4Addr::new(10, 0, 1, 1))
            .validate()
            .unwrap_err();
        assert_eq!((e.key, e.value.as_str()), ("net.gateway", "10.0.1.1"));
        let e = ok
            .clone()
            .mac(MacAddr([1, 0, 0, 0, 0, 1]))
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "net.mac");
        let e = NetConfig::new(Ipv4Addr::new(10, 0, 0, 255), 24)
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "net.ip");
        assert!(ok.gateway(Ipv4Addr::new(10, 0, 0, 1)).validate().is_ok());
    }

    #[test]
    fn parses_environment_forms() {
        let c = NetConfig::from_strings(
            "192.168.7.9/16",
            None,
            Some("192.168.0.1"),
            Some("02:00:00:00:00:07"),
            Some("192.168.0.5=02:00:00:00:00:05, 192.168.0.6=02:00:00:00:00:06"),
        )
        .unwrap();
        assert_eq!(c.netmask, Ipv4Addr::new(255, 255, 0, 0));
        assert_eq!(c.gateway, Some(Ipv4Addr::new(192, 168, 0, 1)));
        assert_eq!(c.effective_mac(), MacAddr([2, 0, 0, 0, 0, 7]));
        assert_eq!(c.static_arp.len(), 2);
        let e = NetConfig::from_strings("10.0.0.1/40", None, None, None, None).unwrap_err();
        assert_eq!((e.key, e.value.as_str()), (IP_ENV, "10.0.0.1/40"));
        let e = NetConfig::from_strings("10.0.0.1", None, None, Some("zz"), None).unwrap_err();
        assert_eq!((e.key, e.value.as_str()), (MAC_ENV, "zz"));
        let e = NetConfig::from_strings("10.0.0.1", None, None, None, Some("1.2.3.4")).unwrap_err();
        assert_eq!(e.key, STATIC_ARP_ENV);
    }
}
