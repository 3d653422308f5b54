//! Network interfaces: index, receive queues and MAC address.
//!
//! The queue count and the address come from sysfs, which shows the devices of the network
//! namespace that mounted it: the root namespace's, for iokerneld.

use std::ffi::CString;
use std::fs;
use std::io;

use crate::error::Error;

/// A network interface of this process's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    name: String,
    index: u32,
}

impl Interface {
    /// The interface named `name`.
    pub fn by_name(name: &str) -> Result<Interface, Error> {
        let c = CString::new(name).map_err(|_| Error::NoSuchInterface(name.to_owned()))?;
        // SAFETY: `c` is a valid zero-terminated string for the duration of the call.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            return Err(Error::NoSuchInterface(name.to_owned()));
        }
        Ok(Interface {
            name: name.to_owned(),
            index,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many receive queues it has (`/sys/class/net/NAME/queues/rx-*`).
    pub fn rx_queues(&self) -> Result<u32, Error> {
        let dir = format!("/sys/class/net/{}/queues", self.name);
        let entries = fs::read_dir(&dir).map_err(|e| Error::os(format!("reading {dir}"), e))?;
        let mut count = 0;
        for entry in entries {
            let entry = entry.map_err(|e| Error::os(format!("reading {dir}"), e))?;
            if entry.file_name().to_string_lossy().starts_with("rx-") {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Its MAC address (`/sys/class/net/NAME/address`).
    pub fn mac(&self) -> Result<[u8; 6], Error> {
        let path = format!("/sys/class/net/{}/address", self.name);
        let text =
            fs::read_to_string(&path).map_err(|e| Error::os(format!("reading {path}"), e))?;
        parse_mac(text.trim()).ok_or_else(|| {
            Error::os(
                format!("reading {path}"),
                io::Error::new(io::ErrorKind::InvalidData, format!("not a MAC: {text:?}")),
            )
        })
    }
}

/// `aa:bb:cc:dd:ee:ff` as bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut out {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("02:00:0a:FF:00:01"),
            Some([2, 0, 0x0a, 0xff, 0, 1])
        );
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
        assert_eq!(parse_mac("2:00:0a:ff:00:01"), None);
        assert_eq!(parse_mac("zz:00:0a:ff:00:01"), None);
    }

    #[test]
    fn missing_interface_is_named() {
        match Interface::by_name("nonexistent-if0") {
            Err(Error::NoSuchInterface(n)) => assert_eq!(n, "nonexistent-if0"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn loopback_exists() {
        let lo = Interface::by_name("lo").unwrap();
        assert_eq!(lo.index(), 1);
        assert!(lo.rx_queues().unwrap() >= 1);
    }
}
