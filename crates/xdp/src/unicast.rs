//! The interface's unicast address filter: a NIC drops frames for MAC addresses that are not
//! its own before any XDP program sees them, and each Corral runtime has a MAC of its own.
//!
//! Each address is added as a `PACKET_MR_UNICAST` membership of a packet socket that receives
//! nothing (protocol 0, never bound). The kernel counts such memberships and removes them when
//! the socket closes, so, like the XDP link, they never outlive the process however it ends. A
//! device without a unicast filter (veth, many virtual devices) is put in promiscuous mode
//! instead, by the same count.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::Error;
use crate::iface::Interface;

/// Extra unicast MAC addresses the interface accepts while this lives.
pub struct UnicastFilter {
    socket: OwnedFd,
    ifindex: u32,
    interface: String,
}

impl UnicastFilter {
    /// A filter for `iface` with no addresses added yet.
    pub fn new(iface: &Interface) -> Result<UnicastFilter, Error> {
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Error::os(
                "opening a packet socket for the unicast filter",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(UnicastFilter {
            socket,
            ifindex: iface.index(),
            interface: iface.name().to_owned(),
        })
    }

    /// Makes the interface accept frames to `mac`.
    pub fn add(&self, mac: [u8; 6]) -> Result<(), Error> {
        self.change(libc::PACKET_ADD_MEMBERSHIP, mac).map_err(|e| {
            Error::os(
                format!("adding {} to {}'s filter", show(mac), self.interface),
                e,
            )
        })
    }

    /// Undoes one [`UnicastFilter::add`] of `mac`.
    pub fn remove(&self, mac: [u8; 6]) -> Result<(), Error> {
        self.change(libc::PACKET_DROP_MEMBERSHIP, mac).map_err(|e| {
            Error::os(
                format!("removing {} from {}'s filter", show(mac), self.interface),
                e,
            )
        })
    }

    fn change(&self, option: libc::c_int, mac: [u8; 6]) -> std::io::Result<()> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac);
        let request = libc::packet_mreq {
            mr_ifindex: self.ifindex as libc::c_int,
            mr_type: libc::PACKET_MR_UNICAST as libc::c_ushort,
            mr_alen: 6,
            mr_address: address,
        };
        // SAFETY: the option reads one packet_mreq, which `request` is, for the call's length.
        let r = unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_PACKET,
                option,
                (&raw const request).cast(),
                size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

fn show(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}
