//! eBPF instructions: their 8-byte encoding, and a small assembler that resolves jump labels.
//!
//! Only what the steering program needs is here: 64-bit ALU with an immediate or a register,
//! loads and stores of 1, 2, 4 and 8 bytes, conditional jumps against an immediate or a
//! register, helper calls, exit, and the two-slot 64-bit immediate load that carries a map's
//! file descriptor. The encoding is the kernel's `struct bpf_insn`
//! (`Documentation/bpf/standardization/instruction-set.rst`): opcode, destination register in
//! the low nibble and source register in the high nibble of the second byte, a signed 16-bit
//! offset and a signed 32-bit immediate, both little-endian (this crate only targets
//! little-endian machines: the encoding follows the host's byte order).

use std::collections::HashMap;
use std::fmt;

/// A register: r0 (return value), r1 to r5 (arguments, clobbered by calls), r6 to r9 (kept
/// across calls), r10 (read-only frame pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(u8);

/// Return value of calls and of the program.
pub const R0: Reg = Reg(0);
/// First argument; the program's context on entry.
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Callee-saved.
pub const R6: Reg = Reg(6);
/// Callee-saved.
pub const R7: Reg = Reg(7);
/// Callee-saved.
pub const R8: Reg = Reg(8);
/// Callee-saved.
pub const R9: Reg = Reg(9);
/// Frame pointer: the top of the program's 512-byte stack.
pub const R10: Reg = Reg(10);

impl Reg {
    /// The register's number.
    pub fn number(self) -> u8 {
        self.0
    }
}

// Instruction classes.
const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_JMP: u8 = 0x05;
const CLASS_ALU64: u8 = 0x07;

// Source operand: the immediate or the source register.
const SRC_K: u8 = 0x00;
const SRC_X: u8 = 0x08;

// Load and store modes.
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;

// Jump codes that are not comparisons.
const JMP_JA: u8 = 0x00;
const JMP_CALL: u8 = 0x80;
const JMP_EXIT: u8 = 0x90;

/// `src_reg` of a 64-bit immediate load whose immediate is a map's file descriptor, which the
/// verifier replaces by the map's address.
pub const PSEUDO_MAP_FD: u8 = 1;

/// Width of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
    /// 8 bytes.
    DW,
}

impl Size {
    fn code(self) -> u8 {
        match self {
            Size::W => 0x00,
            Size::H => 0x08,
            Size::B => 0x10,
            Size::DW => 0x18,
        }
    }

    /// Bytes accessed.
    pub fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    fn from_code(code: u8) -> Size {
        match code & 0x18 {
            0x00 => Size::W,
            0x08 => Size::H,
            0x10 => Size::B,
            _ => Size::DW,
        }
    }
}

/// A 64-bit arithmetic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    /// `dst += src`
    Add,
    /// `dst -= src`
    Sub,
    /// `dst |= src`
    Or,
    /// `dst &= src`
    And,
    /// `dst <<= src`
    Lsh,
    /// `dst >>= src` (logical)
    Rsh,
    /// `dst = src`
    Mov,
}

impl Alu {
    fn code(self) -> u8 {
        match self {
            Alu::Add => 0x00,
            Alu::Sub => 0x10,
            Alu::Or => 0x40,
            Alu::And => 0x50,
            Alu::Lsh => 0x60,
            Alu::Rsh => 0x70,
            Alu::Mov => 0xb0,
        }
    }

    fn from_code(code: u8) -> Option<Alu> {
        Some(match code & 0xf0 {
            0x00 => Alu::Add,
            0x10 => Alu::Sub,
            0x40 => Alu::Or,
            0x50 => Alu::And,
            0x60 => Alu::Lsh,
            0x70 => Alu::Rsh,
            0xb0 => Alu::Mov,
            _ => return None,
        })
    }
}

/// A conditional jump's comparison (unsigned where it matters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`, unsigned.
    Gt,
    /// `>=`, unsigned.
    Ge,
    /// `<`, unsigned.
    Lt,
    /// `<=`, unsigned.
    Le,
}

impl Cond {
    fn code(self) -> u8 {
        match self {
            Cond::Eq => 0x10,
            Cond::Gt => 0x20,
            Cond::Ge => 0x30,
            Cond::Ne => 0x50,
            Cond::Lt => 0xa0,
            Cond::Le => 0xb0,
        }
    }

    fn from_code(code: u8) -> Option<Cond> {
        Some(match code & 0xf0 {
            0x10 => Cond::Eq,
            0x20 => Cond::Gt,
            0x30 => Cond::Ge,
            0x50 => Cond::Ne,
            0xa0 => Cond::Lt,
            0xb0 => Cond::Le,
            _ => return None,
        })
    }

    /// Whether `a <cond> b` holds.
    pub fn holds(self, a: u64, b: u64) -> bool {
        match self {
            Cond::Eq => a == b,
            Cond::Ne => a != b,
            Cond::Gt => a > b,
            Cond::Ge => a >= b,
            Cond::Lt => a < b,
            Cond::Le => a <= b,
        }
    }
}

/// One encoded instruction slot (a 64-bit immediate load takes two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode: class, size or operation, source or mode.
    pub code: u8,
    /// Destination register number.
    pub dst: u8,
    /// Source register number (or a pseudo source for `ld_imm64`).
    pub src: u8,
    /// Signed offset: memory displacement, or jump distance in instructions after this one.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// The 8 bytes the kernel reads.
    pub fn encode(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// Decodes 8 bytes (the inverse of [`Insn::encode`]).
    pub fn decode(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// `dst <op>= imm` on 64 bits (the immediate is sign-extended).
    pub fn alu_imm(op: Alu, dst: Reg, imm: i32) -> Insn {
        Insn {
            code: CLASS_ALU64 | op.code() | SRC_K,
            dst: dst.0,
            imm,
            ..Insn::default()
        }
    }

    /// `dst <op>= src` on 64 bits.
    pub fn alu_reg(op: Alu, dst: Reg, src: Reg) -> Insn {
        Insn {
            code: CLASS_ALU64 | op.code() | SRC_X,
            dst: dst.0,
            src: src.0,
            ..Insn::default()
        }
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub fn mov_imm(dst: Reg, imm: i32) -> Insn {
        Insn::alu_imm(Alu::Mov, dst, imm)
    }

    /// `dst = src`
    pub fn mov_reg(dst: Reg, src: Reg) -> Insn {
        Insn::alu_reg(Alu::Mov, dst, src)
    }

    /// `dst = *(size *)(src + off)`, zero-extended.
    pub fn load(size: Size, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn {
            code: CLASS_LDX | MODE_MEM | size.code(),
            dst: dst.0,
            src: src.0,
            off,
            imm: 0,
        }
    }

    /// `*(size *)(dst + off) = src`
    pub fn store_reg(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
        Insn {
            code: CLASS_STX | MODE_MEM | size.code(),
            dst: dst.0,
            src: src.0,
            off,
            imm: 0,
        }
    }

    /// `*(size *)(dst + off) = imm`
    pub fn store_imm(size: Size, dst: Reg, off: i16, imm: i32) -> Insn {
        Insn {
            code: CLASS_ST | MODE_MEM | size.code(),
            dst: dst.0,
            src: 0,
            off,
            imm,
        }
    }

    /// `if dst <cond> imm goto +off`
    pub fn jump_imm(cond: Cond, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn {
            code: CLASS_JMP | cond.code() | SRC_K,
            dst: dst.0,
            src: 0,
            off,
            imm,
        }
    }

    /// `if dst <cond> src goto +off`
    pub fn jump_reg(cond: Cond, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn {
            code: CLASS_JMP | cond.code() | SRC_X,
            dst: dst.0,
            src: src.0,
            off,
            imm: 0,
        }
    }

    /// `goto +off`
    pub fn ja(off: i16) -> Insn {
        Insn {
            code: CLASS_JMP | JMP_JA,
            off,
            ..Insn::default()
        }
    }

    /// Calls kernel helper number `helper`: arguments in r1 to r5, result in r0.
    pub fn call(helper: i32) -> Insn {
        Insn {
            code: CLASS_JMP | JMP_CALL,
            imm: helper,
            ..Insn::default()
        }
    }

    /// Returns r0.
    pub fn exit() -> Insn {
        Insn {
            code: CLASS_JMP | JMP_EXIT,
            ..Insn::default()
        }
    }

    /// `dst = map` for the map open as `fd`: the two slots of a 64-bit immediate load.
    pub fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
        [
            Insn {
                code: CLASS_LD | MODE_IMM | Size::DW.code(),
                dst: dst.0,
                src: PSEUDO_MAP_FD,
                off: 0,
                imm: fd,
            },
            Insn::default(),
        ]
    }

    /// What the instruction does, for interpreting and checking programs.
    pub fn op(self) -> Op {
        let class = self.code & 0x07;
        match class {
            CLASS_ALU64 => match Alu::from_code(self.code) {
                Some(alu) if self.code & SRC_X != 0 => Op::AluReg(alu),
                Some(alu) => Op::AluImm(alu),
                None => Op::Unknown,
            },
            CLASS_LDX if self.code & 0xe0 == MODE_MEM => Op::Load(Size::from_code(self.code)),
            CLASS_STX if self.code & 0xe0 == MODE_MEM => Op::StoreReg(Size::from_code(self.code)),
            CLASS_ST if self.code & 0xe0 == MODE_MEM => Op::StoreImm(Size::from_code(self.code)),
            CLASS_LD if self.code == CLASS_LD | MODE_IMM | Size::DW.code() => Op::LdImm64,
            CLASS_JMP => match self.code & 0xf0 {
                JMP_JA => Op::Ja,
                JMP_CALL => Op::Call,
                JMP_EXIT => Op::Exit,
                _ => match Cond::from_code(self.code) {
                    Some(cond) if self.code & SRC_X != 0 => Op::JumpReg(cond),
                    Some(cond) => Op::JumpImm(cond),
                    None => Op::Unknown,
                },
            },
            _ => Op::Unknown,
        }
    }
}

/// The decoded kind of an instruction (of the subset [`Insn`] builds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// 64-bit ALU with an immediate.
    AluImm(Alu),
    /// 64-bit ALU with a register.
    AluReg(Alu),
    /// Memory load into a register.
    Load(Size),
    /// Register store to memory.
    StoreReg(Size),
    /// Immediate store to memory.
    StoreImm(Size),
    /// First slot of a 64-bit immediate load.
    LdImm64,
    /// Unconditional jump.
    Ja,
    /// Conditional jump against the immediate.
    JumpImm(Cond),
    /// Conditional jump against a register.
    JumpReg(Cond),
    /// Helper call.
    Call,
    /// Program exit.
    Exit,
    /// Anything else.
    Unknown,
}

/// A jump target in an [`Asm`] program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(u32);

/// A label that was jumped to but never placed, or placed twice, or a jump too far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsmError(String);

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AsmError {}

/// Builds a program, with jumps written to labels and resolved by [`Asm::finish`].
#[derive(Default)]
pub struct Asm {
    insns: Vec<Insn>,
    /// Instruction index of each placed label.
    placed: HashMap<Label, usize>,
    /// Jumps to patch: instruction index and the label it goes to.
    fixups: Vec<(usize, Label)>,
    labels: u32,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A new label, to be placed once with [`Asm::place`].
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels)
    }

    /// The next instruction is `label`'s target.
    pub fn place(&mut self, label: Label) -> &mut Asm {
        // A second placement is caught in finish() (it keeps the first).
        if self.placed.contains_key(&label) {
            self.fixups.push((usize::MAX, label));
        } else {
            self.placed.insert(label, self.insns.len());
        }
        self
    }

    /// Appends instructions as they are.
    pub fn push(&mut self, insns: &[Insn]) -> &mut Asm {
        self.insns.extend_from_slice(insns);
        self
    }

    /// `if dst <cond> imm goto label`
    pub fn jump_imm(&mut self, cond: Cond, dst: Reg, imm: i32, label: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), label));
        self.push(&[Insn::jump_imm(cond, dst, imm, 0)])
    }

    /// `if dst <cond> src goto label`
    pub fn jump_reg(&mut self, cond: Cond, dst: Reg, src: Reg, label: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), label));
        self.push(&[Insn::jump_reg(cond, dst, src, 0)])
    }

    /// `goto label`
    pub fn ja(&mut self, label: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), label));
        self.push(&[Insn::ja(0)])
    }

    /// The program, with every jump's offset filled in.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        for &(at, label) in &self.fixups {
            if at == usize::MAX {
                return Err(AsmError(format!("label {} placed twice", label.0)));
            }
            let Some(&target) = self.placed.get(&label) else {
                return Err(AsmError(format!("label {} never placed", label.0)));
            };
            let off = target as i64 - (at as i64 + 1);
            let off = i16::try_from(off)
                .map_err(|_| AsmError(format!("jump at {at} to {target} is too far")))?;
            self.insns[at].off = off;
        }
        Ok(self.insns)
    }
}

/// The program as the bytes `BPF_PROG_LOAD` reads.
pub fn encode_all(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings as `llvm-objdump -d` prints them for clang-built BPF objects.
    #[test]
    fn known_encodings() {
        let cases: [(Insn, [u8; 8]); 12] = [
            // r0 = 2
            (Insn::mov_imm(R0, 2), [0xb7, 0x00, 0, 0, 0x02, 0, 0, 0]),
            // exit
            (Insn::exit(), [0x95, 0, 0, 0, 0, 0, 0, 0]),
            // r6 = r1
            (Insn::mov_reg(R6, R1), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]),
            // r2 = *(u32 *)(r1 + 0)
            (
                Insn::load(Size::W, R2, R1, 0),
                [0x61, 0x12, 0, 0, 0, 0, 0, 0],
            ),
            // r3 = *(u32 *)(r1 + 4)
            (
                Insn::load(Size::W, R3, R1, 4),
                [0x61, 0x13, 0x04, 0, 0, 0, 0, 0],
            ),
            // r5 = *(u16 *)(r2 + 12)
            (
                Insn::load(Size::H, R5, R2, 12),
                [0x69, 0x25, 0x0c, 0, 0, 0, 0, 0],
            ),
            // r5 = *(u8 *)(r2 + 14)
            (
                Insn::load(Size::B, R5, R2, 14),
                [0x71, 0x25, 0x0e, 0, 0, 0, 0, 0],
            ),
            // r2 += -4
            (
                Insn::alu_imm(Alu::Add, R2, -4),
                [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff],
            ),
            // if r4 > r3 goto +20
            (
                Insn::jump_reg(Cond::Gt, R4, R3, 20),
                [0x2d, 0x34, 0x14, 0, 0, 0, 0, 0],
            ),
            // if r0 == 0 goto +3
            (
                Insn::jump_imm(Cond::Eq, R0, 0, 3),
                [0x15, 0x00, 0x03, 0, 0, 0, 0, 0],
            ),
            // *(u16 *)(r10 - 4) = r5
            (
                Insn::store_reg(Size::H, R10, -4, R5),
                [0x6b, 0x5a, 0xfc, 0xff, 0, 0, 0, 0],
            ),
            // call 51 (bpf_redirect_map)
            (Insn::call(51), [0x85, 0, 0, 0, 0x33, 0, 0, 0]),
        ];
        for (insn, bytes) in cases {
            assert_eq!(insn.encode(), bytes, "{insn:?}");
            assert_eq!(Insn::decode(bytes), insn);
        }
    }

    #[test]
    fn map_fd_load_takes_two_slots() {
        let [a, b] = Insn::ld_map_fd(R1, 7);
        // r1 = map[fd 7]: opcode 0x18, src_reg 1 (BPF_PSEUDO_MAP_FD), the fd in the first imm.
        assert_eq!(a.encode(), [0x18, 0x11, 0, 0, 0x07, 0, 0, 0]);
        assert_eq!(b.encode(), [0; 8]);
        assert_eq!(a.op(), Op::LdImm64);
    }

    #[test]
    fn ops_decode_back() {
        assert_eq!(Insn::mov_imm(R0, 1).op(), Op::AluImm(Alu::Mov));
        assert_eq!(Insn::alu_reg(Alu::Or, R5, R7).op(), Op::AluReg(Alu::Or));
        assert_eq!(Insn::load(Size::H, R5, R2, 0).op(), Op::Load(Size::H));
        assert_eq!(
            Insn::store_reg(Size::W, R10, -4, R5).op(),
            Op::StoreReg(Size::W)
        );
        assert_eq!(
            Insn::store_imm(Size::B, R10, -1, 0).op(),
            Op::StoreImm(Size::B)
        );
        assert_eq!(
            Insn::jump_imm(Cond::Ne, R5, 1, 0).op(),
            Op::JumpImm(Cond::Ne)
        );
        assert_eq!(
            Insn::jump_reg(Cond::Ge, R5, R1, 0).op(),
            Op::JumpReg(Cond::Ge)
        );
        assert_eq!(Insn::ja(0).op(), Op::Ja);
        assert_eq!(Insn::call(1).op(), Op::Call);
        assert_eq!(Insn::exit().op(), Op::Exit);
    }

    #[test]
    fn labels_resolve_forward_and_backward() {
        let mut asm = Asm::new();
        let top = asm.label();
        let end = asm.label();
        asm.place(top);
        asm.jump_imm(Cond::Eq, R0, 0, end); // 0 -> 3: off 2
        asm.push(&[Insn::mov_imm(R0, 1)]); // 1
        asm.ja(top); // 2 -> 0: off -3
        asm.place(end);
        asm.push(&[Insn::exit()]); // 3
        let insns = asm.finish().unwrap();
        assert_eq!(insns[0].off, 2);
        assert_eq!(insns[2].off, -3);
    }

    #[test]
    fn unplaced_label_is_an_error() {
        let mut asm = Asm::new();
        let nowhere = asm.label();
        asm.ja(nowhere);
        assert!(asm.finish().is_err());
    }

    #[test]
    fn twice_placed_label_is_an_error() {
        let mut asm = Asm::new();
        let l = asm.label();
        asm.place(l).push(&[Insn::exit()]).place(l);
        assert!(asm.finish().is_err());
    }
}
