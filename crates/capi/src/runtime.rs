//! Starting a runtime from C: its settings and `corral_run`, which runs the program's first
//! uthread.

use core::ffi::{c_int, c_void};
use std::time::Duration;

use corral::net::NetConfig;
use corral::{Builder, Config, Runtime};

use super::error::{PANICKED, errno_of, ffi_guard, report};
use super::memory::SendPtr;

/// Settings of a runtime started by `corral_run`. Start from `corral_config_default` and change
/// the fields you need.
#[repr(C)]
pub struct CorralConfig {
    /// How many kernel threads run uthreads (the most cores used at once); 1 to 1024.
    pub kthreads: u32,
    /// Usable stack bytes of each uthread, rounded up to whole pages; one page to 1 GiB.
    pub stack_size: usize,
    /// How long an idle kernel thread polls for work before it sleeps, in nanoseconds; at most
    /// one second.
    pub spin_before_park_ns: u32,
    /// Nonzero pins kernel thread i to the i-th CPU this process may run on.
    pub pin: c_int,
}

impl CorralConfig {
    fn to_config(&self) -> Config {
        let mut cfg = Config::from_env()
            .kthreads(self.kthreads as usize)
            .stack_size(self.stack_size)
            .spin_before_park(Duration::from_nanos(self.spin_before_park_ns.into()));
        if self.pin != 0 {
            cfg = cfg.pinned();
        }
        cfg
    }
}

/// Fills `config` with the defaults: one kernel thread per CPU this process may use, 256 KiB
/// stacks, 2 microseconds of polling before sleeping, no pinning. Does nothing if `config` is
/// NULL.
///
/// # Safety
/// `config` is NULL or points to writable memory for one `corral_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_config_default(config: *mut CorralConfig) {
    ffi_guard((), || {
        if config.is_null() {
            return;
        }
        let d = Config::default();
        let c = CorralConfig {
            kthreads: u32::try_from(d.kthreads).unwrap_or(u32::MAX),
            stack_size: d.stack_size,
            spin_before_park_ns: u32::try_from(d.spin_before_park.as_nanos()).unwrap_or(u32::MAX),
            pin: c_int::from(d.cpus.is_some()),
        };
        // SAFETY: non-null and writable per the contract; `write` because C may pass
        // uninitialized memory.
        unsafe { config.write(c) };
    });
}

/// Starts a runtime configured by `config` (NULL: the defaults), runs `main_fn(arg)` in a
/// uthread on it, and returns when `main_fn` returns, after shutting the runtime down. The
/// calling OS thread blocks meanwhile.
///
/// When the environment variable `CORRAL_IOKERNELD` names iokerneld's control socket, the
/// runtime registers with iokerneld, which then grants and takes back its cores; `pin` must
/// then be 0.
///
/// The network (for the `corral_udp_*` functions) is configured by environment variables:
/// - `CORRAL_IP`: the runtime's IPv4 address, `a.b.c.d` or `a.b.c.d/prefix` (default prefix
///   24). Without it the runtime has no network and `corral_udp_bind` fails with `-ENETDOWN`.
/// - `CORRAL_NETMASK`: overrides the prefix, e.g. `255.255.0.0`.
/// - `CORRAL_GATEWAY`: next hop for addresses outside the subnet.
/// - `CORRAL_MAC`: `aa:bb:cc:dd:ee:ff`; by default `02:43:` followed by the address's bytes.
/// - `CORRAL_STATIC_ARP`: `ip=mac,ip=mac,...` neighbours that are never resolved.
///
/// Under iokerneld, frames reach the runtime through it; without iokerneld only the runtime's
/// own address is reachable.
///
/// Join or wait for the uthreads you spawn before `main_fn` returns: at shutdown, uthreads that
/// can still run are run to completion, but ones blocked then are abandoned.
///
/// Returns 0, or:
/// - `-EINVAL`: `main_fn` is NULL, or a setting is out of range (a message naming the setting
///   and its value is written to stderr);
/// - a negative errno value from the OS if the kernel threads or the first uthread cannot be
///   started (e.g. `-EAGAIN`, `-ENOMEM`);
/// - `-ENOTRECOVERABLE`: an internal error (a Rust panic, reported on stderr).
///
/// # Safety
/// `config` is NULL or points to a valid `corral_config`; `main_fn` may be called with `arg`
/// on another OS thread and must not unwind (no C++ exception or `longjmp` may leave it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_run(
    config: *const CorralConfig,
    main_fn: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> c_int {
    ffi_guard(PANICKED, || {
        let Some(main_fn) = main_fn else {
            report(format_args!("corral_run: main_fn is NULL"));
            return -libc::EINVAL;
        };
        // SAFETY: NULL or valid per the contract.
        let mut cfg = match unsafe { config.as_ref() } {
            Some(c) => c.to_config(),
            None => Config::from_env(),
        };
        match NetConfig::from_env() {
            Ok(Some(net)) => cfg = cfg.net(net),
            Ok(None) => {}
            Err(e) => {
                report(format_args!("corral_run: {e}"));
                return -libc::EINVAL;
            }
        }
        if let Err(e) = cfg.validate() {
            report(format_args!("corral_run: {e}"));
            return -libc::EINVAL;
        }
        let rt = match Runtime::new(cfg) {
            Ok(rt) => rt,
            Err(e) => {
                report(format_args!("corral_run: cannot start the runtime: {e}"));
                return -errno_of(&e);
            }
        };
        let arg = SendPtr(arg);
        let main = move || {
            // SAFETY: the caller promised main_fn accepts arg on any thread and never unwinds.
            unsafe { main_fn(arg.get()) }
        };
        match rt.spawn_with(Builder::new().name("main"), main) {
            Ok(handle) => match handle.join() {
                Ok(()) => 0,
                Err(_) => PANICKED,
            },
            Err(e) => {
                report(format_args!("corral_run: cannot spawn main_fn: {e}"));
                -errno_of(&e)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_round_trips() {
        let mut c = core::mem::MaybeUninit::<CorralConfig>::uninit();
        // SAFETY: writable memory for one config.
        unsafe { corral_config_default(c.as_mut_ptr()) };
        // SAFETY: initialized by the call.
        let c = unsafe { c.assume_init() };
        assert!(c.kthreads >= 1);
        assert_eq!(c.stack_size, corral::DEFAULT_STACK_SIZE);
        assert_eq!(c.pin, 0);
        assert!(c.to_config().validate().is_ok());
        let bad = CorralConfig { kthreads: 0, ..c };
        let err = bad.to_config().validate().unwrap_err();
        assert_eq!(err.key, "kthreads");
    }
}
