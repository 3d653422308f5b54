//! The `bpf(2)` commands used here, each behind a safe function taking typed arguments.
//!
//! `union bpf_attr` is laid out per command; each command gets its own `#[repr(C)]` struct
//! holding the fields up to the last one used, and the size passed is that struct's. The
//! kernel treats the fields it knows past that size as zero, so these work on every kernel
//! that has the commands (Linux 5.9 for `BPF_LINK_CREATE` with `BPF_XDP`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::insn::Insn;

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_LINK_CREATE: u32 = 28;

/// `BPF_MAP_TYPE_HASH`
pub const MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_XSKMAP`
pub const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`
pub const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`: the attach type of an XDP link.
pub const ATTACH_TYPE_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on socket buffers after the driver.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before it builds a socket buffer.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `BPF_ANY`: create or update.
pub const UPDATE_ANY: u64 = 0;

/// Object names hold up to 15 bytes and a terminating zero.
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let n = name.len().min(15);
    out[..n].copy_from_slice(&name.as_bytes()[..n]);
    out
}

/// Runs `bpf(cmd, attr, size_of::<A>())`.
///
/// # Safety
/// `attr` is the layout `cmd` reads (its leading fields), and every address in it points to
/// memory valid for what `cmd` does with it (reads or writes of the sizes the other fields
/// give) for the duration of the call.
unsafe fn bpf<A>(cmd: u32, attr: &mut A) -> io::Result<i32> {
    // SAFETY: by the caller's guarantee the kernel accesses only live memory; `attr` itself is
    // a valid object of `size_of::<A>()` bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            libc::c_long::from(cmd as i32),
            attr as *mut A,
            size_of::<A>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

/// Takes ownership of a descriptor the kernel just returned.
fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` is a new descriptor returned to this process by a successful bpf() call;
    // nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `BPF_MAP_CREATE`.
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut attr = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_name: object_name(name),
        ..MapCreate::default()
    };
    // SAFETY: MapCreate is the leading part of the BPF_MAP_CREATE layout and holds no
    // addresses.
    unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.map(owned)
}

#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A map's key and value types, whose sizes the map was created with.
///
/// # Safety
/// `fd` is a map whose key size is `size_of::<K>()` and value size `size_of::<V>()`, so that
/// the kernel never reads or writes past a `K` or a `V`.
pub unsafe trait MapTypes {
    /// Key type.
    type K: Copy;
    /// Value type.
    type V: Copy;
    /// The map.
    fn map_fd(&self) -> BorrowedFd<'_>;
}

/// `BPF_MAP_UPDATE_ELEM`.
pub fn map_update<M: MapTypes>(map: &M, key: &M::K, value: &M::V, flags: u64) -> io::Result<()> {
    let mut attr = MapElem {
        map_fd: map.map_fd().as_raw_fd() as u32,
        key: key as *const M::K as u64,
        value: value as *const M::V as u64,
        flags,
        ..MapElem::default()
    };
    // SAFETY: the kernel reads the map's key size from `key` and value size from `value`,
    // which MapTypes guarantees are the sizes of the referenced objects.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// `BPF_MAP_DELETE_ELEM`; `Ok(false)` if the key was absent.
pub fn map_delete<M: MapTypes>(map: &M, key: &M::K) -> io::Result<bool> {
    let mut attr = MapElem {
        map_fd: map.map_fd().as_raw_fd() as u32,
        key: key as *const M::K as u64,
        ..MapElem::default()
    };
    // SAFETY: the kernel reads the map's key size from `key` (MapTypes).
    match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_LOOKUP_ELEM`; `Ok(None)` if the key is absent.
pub fn map_lookup<M: MapTypes>(map: &M, key: &M::K) -> io::Result<Option<M::V>> {
    let mut value = std::mem::MaybeUninit::<M::V>::uninit();
    let mut attr = MapElem {
        map_fd: map.map_fd().as_raw_fd() as u32,
        key: key as *const M::K as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElem::default()
    };
    // SAFETY: the kernel reads the key size from `key` and writes the value size to `value`
    // (MapTypes), which is room for one `V`.
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
        // SAFETY: a successful lookup wrote the whole value.
        Ok(_) => Ok(Some(unsafe { value.assume_init() })),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `BPF_PROG_LOAD` of an XDP program. With `log`, the verifier writes its log there (a
/// zero-terminated string) whether or not it accepts the program.
pub fn prog_load_xdp(
    insns: &[Insn],
    name: &str,
    license: &std::ffi::CStr,
    log: Option<&mut [u8]>,
) -> io::Result<OwnedFd> {
    let code = crate::insn::encode_all(insns);
    let (log_level, log_size, log_buf) = match log {
        Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = ProgLoad {
        prog_type: PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name: object_name(name),
        expected_attach_type: ATTACH_TYPE_XDP,
        ..ProgLoad::default()
    };
    // SAFETY: the kernel reads insn_cnt 8-byte instructions from `code` (that many bytes long),
    // the license string up to its terminating zero, and writes at most log_size bytes to the
    // log buffer, all alive for the call.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.map(owned)
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `BPF_LINK_CREATE` of an XDP link: attaches `prog` to the interface `ifindex` until the
/// returned descriptor (and every copy of it) is closed.
pub fn link_create_xdp(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: ATTACH_TYPE_XDP,
        flags,
    };
    // SAFETY: LinkCreate is the leading part of the BPF_LINK_CREATE layout and holds no
    // addresses.
    unsafe { bpf(BPF_LINK_CREATE, &mut attr) }.map(owned)
}

#[repr(C)]
#[derive(Default)]
struct InfoByFd {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The leading part of `struct bpf_link_info`, with the XDP member of its union.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct LinkInfo {
    /// `BPF_LINK_TYPE_*` (6 for XDP).
    pub link_type: u32,
    /// The link's id.
    pub id: u32,
    /// The attached program's id.
    pub prog_id: u32,
    _pad: u32,
    /// The interface (for an XDP link).
    pub ifindex: u32,
    _rest: u32,
}

/// `BPF_OBJ_GET_INFO_BY_FD` of a link.
pub fn link_info(link: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    let mut info = LinkInfo::default();
    let mut attr = InfoByFd {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: size_of::<LinkInfo>() as u32,
        info: &mut info as *mut LinkInfo as u64,
    };
    // SAFETY: the kernel writes at most info_len bytes to `info`, which is that big.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_layouts_match_the_kernel() {
        // Offsets from include/uapi/linux/bpf.h.
        assert_eq!(std::mem::offset_of!(MapCreate, map_name), 28);
        assert_eq!(std::mem::offset_of!(MapElem, key), 8);
        assert_eq!(std::mem::offset_of!(MapElem, flags), 24);
        assert_eq!(std::mem::offset_of!(ProgLoad, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(LinkCreate, flags), 12);
        assert_eq!(std::mem::offset_of!(LinkInfo, ifindex), 16);
    }

    #[test]
    fn names_are_cut_to_fifteen_bytes() {
        assert_eq!(&object_name("corral")[..7], b"corral\0");
        assert_eq!(object_name("a_very_long_object_name")[15], 0);
    }
}
