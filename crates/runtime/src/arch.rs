//! x86-64 specifics: the `%gs` base that points at the current kthread, the cooperative context
//! switch, and the first frame of a new uthread.

use core::arch::{asm, naked_asm};
use core::sync::atomic::{AtomicU8, Ordering};

/// Whether the kernel lets user space use `rdgsbase`/`wrgsbase` (Linux 5.9+ on capable CPUs).
/// 0 = not probed yet, 1 = yes, 2 = no.
static FSGSBASE: AtomicU8 = AtomicU8::new(0);

const HWCAP2_FSGSBASE: u64 = 1 << 1;

#[inline]
fn have_fsgsbase() -> bool {
    match FSGSBASE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => probe_fsgsbase(),
    }
}

#[cold]
fn probe_fsgsbase() -> bool {
    // SAFETY: getauxval has no preconditions.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    let yes = hwcap2 & HWCAP2_FSGSBASE != 0;
    FSGSBASE.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
    yes
}

const ARCH_SET_GS: libc::c_int = 0x1001;
const ARCH_SET_FS: libc::c_int = 0x1002;
const ARCH_GET_GS: libc::c_int = 0x1004;
const ARCH_GET_FS: libc::c_int = 0x1003;

/// Points this OS thread's `%gs` base at `base`.
pub(crate) fn set_gs_base(base: usize) {
    if have_fsgsbase() {
        // SAFETY: wrgsbase only changes this thread's gs base, which nothing else in the process
        // (glibc and Rust use %fs) relies on.
        unsafe { asm!("wrgsbase {}", in(reg) base, options(nostack, preserves_flags)) };
    } else {
        // SAFETY: arch_prctl(ARCH_SET_GS) takes the new base by value and touches no memory.
        let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, base) };
        assert_eq!(rc, 0, "arch_prctl(ARCH_SET_GS) failed");
    }
}

/// Points this OS thread's `%fs` base (its TLS and thread control block) at `base`.
///
/// # Safety
/// `base` is a thread control block that nothing else runs on, laid out as glibc expects, and
/// the caller touches no thread-local data it read through the old base afterwards.
#[inline]
pub(crate) unsafe fn set_fs_base(base: usize) {
    if have_fsgsbase() {
        // SAFETY: per the contract, base is a valid TCB for this thread.
        unsafe { asm!("wrfsbase {}", in(reg) base, options(nostack, preserves_flags)) };
    } else {
        // SAFETY: arch_prctl(ARCH_SET_FS) takes the new base by value and touches no memory.
        let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_FS, base) };
        assert_eq!(rc, 0, "arch_prctl(ARCH_SET_FS) failed");
    }
}

#[inline(always)]
pub(crate) fn gs_base() -> usize {
    if have_fsgsbase() {
        let base: usize;
        // SAFETY: rdgsbase reads a register; enabled by the kernel (checked above).
        unsafe { asm!("rdgsbase {}", out(reg) base, options(nomem, nostack, preserves_flags)) };
        base
    } else {
        slow_get_base(ARCH_GET_GS)
    }
}

#[inline(always)]
pub(crate) fn fs_base() -> usize {
    if have_fsgsbase() {
        let base: usize;
        // SAFETY: rdfsbase reads a register; enabled by the kernel (checked above).
        unsafe { asm!("rdfsbase {}", out(reg) base, options(nomem, nostack, preserves_flags)) };
        base
    } else {
        slow_get_base(ARCH_GET_FS)
    }
}

#[cold]
fn slow_get_base(code: libc::c_int) -> usize {
    let mut base: usize = 0;
    // SAFETY: arch_prctl(ARCH_GET_*) writes one usize to the pointer we pass.
    unsafe { libc::syscall(libc::SYS_arch_prctl, code, &mut base as *mut usize) };
    base
}

/// Reads the u64 at `%gs:OFFSET`.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_read<const OFFSET: usize>() -> usize {
    let v: usize;
    // SAFETY: the caller guarantees gs points at a kthread, which has a usize at OFFSET.
    unsafe {
        asm!("mov {}, qword ptr gs:[{off}]", out(reg) v, off = const OFFSET,
             options(nostack, preserves_flags, readonly))
    };
    v
}

/// Reads the u32 at `%gs:OFFSET` in one instruction, so a migration cannot split it.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_read32<const OFFSET: usize>() -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees gs points at a kthread, which has a u32 at OFFSET.
    unsafe {
        asm!("mov {:e}, dword ptr gs:[{off}]", out(reg) v, off = const OFFSET,
             options(nostack, preserves_flags, readonly))
    };
    v
}

/// One-instruction increment of the u32 at `%gs:OFFSET`: atomic with respect to signals and to
/// migration of the calling uthread, which is what the preemption counter needs.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_inc32<const OFFSET: usize>() {
    // SAFETY: as above; the field is only touched by its own kthread (and its signal handler).
    unsafe { asm!("inc dword ptr gs:[{off}]", off = const OFFSET, options(nostack)) };
}

/// Decrements the u32 at `%gs:OFFSET` and reports whether it became zero.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_dec32_is_zero<const OFFSET: usize>() -> bool {
    let zero: u8;
    // SAFETY: as for gs_inc32.
    unsafe {
        asm!("dec dword ptr gs:[{off}]", "setz {z}", off = const OFFSET, z = out(reg_byte) zero,
             options(nostack))
    };
    zero != 0
}

/// Saves the callee-saved registers on the current stack, stores the stack pointer to
/// `*save_rsp`, moves to the stack `next_rsp`, and only then marks the old context as no longer
/// running (`*prev_running = 0`), so that whoever resumes it next sees a complete context and
/// nothing of ours (not even a signal frame) is still being written to its stack; then resumes
/// the new context.
///
/// Only callee-saved state is kept: this is called like a function, so the caller has already
/// given up every register the System V ABI lets a callee clobber, including all vector state.
/// MXCSR and the x87 control word are left alone; uthreads share the process's defaults.
///
/// # Safety
/// `next_rsp` must be a stack pointer saved by this function or prepared by
/// [`init_stack`], whose context is not running anywhere.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch_context(
    save_rsp: *mut usize,
    next_rsp: usize,
    prev_running: *const AtomicU8,
) {
    naked_asm!(
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov [rdi], rsp",
        // Leave the old stack before publishing that it is free: a signal delivered between
        // the two would otherwise push its frame onto a stack another kthread may already be
        // running the old context on.
        "mov rsp, rsi",
        // x86 stores are not reordered with older stores: this is a release store.
        "mov byte ptr [rdx], 0",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "ret",
    )
}

/// The first instruction a new uthread runs: calls `entry(arg)` with `entry` in r13 and `arg`
/// in r12 (both placed there by [`init_stack`]). `entry` never returns.
#[unsafe(naked)]
unsafe extern "C" fn uthread_trampoline() {
    naked_asm!(
        ".cfi_startproc",
        // Nothing above this frame: stop unwinders and debuggers here.
        ".cfi_undefined rip",
        "xor ebp, ebp",
        "mov rdi, r12",
        "call r13",
        "ud2",
        ".cfi_endproc",
    )
}

/// Lays out a fresh stack so that [`switch_context`] to the returned stack pointer starts
/// `entry(arg)` on it.
///
/// # Safety
/// `top` must be the 16-byte aligned, writable top of a stack with at least 128 bytes below it.
pub(crate) unsafe fn init_stack(
    top: usize,
    entry: unsafe extern "C" fn(usize) -> !,
    arg: usize,
) -> usize {
    debug_assert_eq!(top % 16, 0);
    // switch_context pops six registers and returns: after that rsp = sp + 56 must be 16-byte
    // aligned so the trampoline's `call` leaves the entry function with the ABI's alignment.
    let sp = top - 72;
    let regs = sp as *mut usize;
    // SAFETY: the caller guarantees [top - 128, top) is writable stack memory.
    unsafe {
        regs.add(0).write(0); // r15
        regs.add(1).write(0); // r14
        regs.add(2).write(entry as *const () as usize); // r13
        regs.add(3).write(arg); // r12
        regs.add(4).write(0); // rbx
        regs.add(5).write(0); // rbp
        regs.add(6).write(uthread_trampoline as *const () as usize); // return address
    }
    sp
}

/// Tells the CPU we are in a spin-wait loop.
#[inline(always)]
pub(crate) fn pause() {
    core::hint::spin_loop();
}

/// `and dword gs:[OFFSET], mask`: one instruction, so a signal handler on the same kthread can
/// use it on the preemption word.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_and32<const OFFSET: usize>(mask: u32) {
    // SAFETY: as for gs_inc32.
    unsafe {
        asm!("and dword ptr gs:[{off}], {m:e}", off = const OFFSET, m = in(reg) mask, options(nostack))
    };
}

/// `or dword gs:[OFFSET], bits`.
///
/// # Safety
/// The caller must know that `%gs` points at a live kthread.
#[inline(always)]
pub(crate) unsafe fn gs_or32<const OFFSET: usize>(bits: u32) {
    // SAFETY: as for gs_inc32.
    unsafe {
        asm!("or dword ptr gs:[{off}], {b:e}", off = const OFFSET, b = in(reg) bits, options(nostack))
    };
}
