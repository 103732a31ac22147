//! The kernel IR: one GPU kernel per fusion group, at the level of PTX instructions but
//! with structured control flow.
//!
//! Data model: a [`Kernel`] owns its virtual registers ([`Kernel::regs`], typed by
//! [`RegType`]), its shared-memory buffers and a body of [`Stmt`]s. Registers are mutable
//! variables, not SSA values: an accumulator is assigned in a loop. Every [`Op`] maps to one
//! PTX instruction (after `legalize`), except [`Op::Math`], a placeholder for a math-library
//! function that the `expand-math` pass replaces by its sequence of plain ops. The ops and
//! their one signature table ([`Op::signature`]) are in the `ops` submodule, re-exported here.
//!
//! Semantics are per thread, executed by every thread of a CTA of `block` threads, over a
//! grid of `grid` CTAs. Floating point is IEEE-754 binary32 with round-to-nearest-even on
//! every operation and denormals kept (PTX `.rn`, never `.ftz`); `FMin`/`FMax` propagate NaN
//! (PTX `min.NaN`/`max.NaN`); `FFma` rounds once. Integer arithmetic wraps modulo 2^32 (2^64
//! for addresses). The CPU executor (`tessel-ref`) and the PTX writer (`tessel-ptx`) both
//! implement exactly these semantics, so a kernel's result is the same bits on either —
//! except [`Stmt::Mma`], whose accumulation NVIDIA does not specify: the executor runs a
//! documented model of it and the GPU is compared with that by tolerance (the `exact`
//! profile never uses it), and [`Stmt::Wgmma`], the same. Warp-wide statements
//! ([`Op::ShflBfly`], [`Stmt::Mma`], [`Stmt::Ldmatrix`]) are executed by all 32 lanes of a
//! warp together, warpgroup-wide ones ([`Stmt::Wgmma`] and its fence, commit and wait) by
//! the four warps of an aligned group of 128 threads.
//!
//! A [`Program`] is a step: the buffers (inputs, outputs, intermediates), the kernels, and
//! the launches in order.

pub mod griddep;
mod ops;

pub use ops::{ArgRule, FCmp, ICmp, MathFn, Op, SigType, Signature, Special};

use crate::entities::{BufferId, KernelId, Reg, SharedBuf};
use crate::types::{DType, TensorType};
use cranelift_entity::PrimaryMap;

/// The type of a virtual register (PTX register classes `.pred`, `.b32`, `.b64`, `.f32`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum RegType {
    Pred,
    /// 32-bit integer; signedness is given by the op (`ShrS`, `ICmp::LtS`, `CvtF32S32`, ...).
    U32,
    /// 64-bit integer, used for global addresses.
    U64,
    F32,
}

impl RegType {
    pub fn name(self) -> &'static str {
        match self {
            RegType::Pred => "pred",
            RegType::U32 => "u32",
            RegType::U64 => "u64",
            RegType::F32 => "f32",
        }
    }
}

/// An instruction operand: a register or an immediate.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Operand {
    Reg(Reg),
    U32(u32),
    U64(u64),
    /// An f32 immediate, stored as its bits so that `-0.0` and NaN payloads survive.
    F32(u32),
}

impl Operand {
    pub fn f32(x: f32) -> Operand {
        Operand::F32(x.to_bits())
    }
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Self {
        Operand::Reg(r)
    }
}

/// The shape and input type of a warp-level [`Stmt::Mma`]: `D[16×N] = A[16×K]·B[K×N] + C`
/// with f32 accumulators, A row-major and B column-major (PTX `mma.sync.aligned` with
/// `.row.col` layouts and `.f32` C/D types; PTX ISA §9.7.14.5.7–8, "Matrix Fragments for
/// mma.m16n8k8 / mma.m16n8k16").
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum MmaShape {
    /// `m16n8k16`, bf16 inputs: A is 4 × u32, B 2 × u32, each u32 two packed bf16 (the
    /// lower-indexed element in bits 15..0).
    M16N8K16Bf16,
    /// `m16n8k16`, f16 inputs, packed as for bf16.
    M16N8K16F16,
    /// `m16n8k8`, tf32 inputs: A is 4 × u32, B 2 × u32, each u32 one f32 bit pattern of
    /// which only the TF32 bits (31..13) are used (round first with [`Op::CvtRnaTf32F32`]).
    M16N8K8Tf32,
}

impl MmaShape {
    pub const ALL: [MmaShape; 3] = [
        MmaShape::M16N8K16Bf16,
        MmaShape::M16N8K16F16,
        MmaShape::M16N8K8Tf32,
    ];

    /// Rows of A and D.
    pub fn m(self) -> usize {
        16
    }

    /// Columns of B and D.
    pub fn n(self) -> usize {
        8
    }

    /// The reduction length: columns of A, rows of B.
    pub fn k(self) -> usize {
        match self {
            MmaShape::M16N8K16Bf16 | MmaShape::M16N8K16F16 => 16,
            MmaShape::M16N8K8Tf32 => 8,
        }
    }

    /// u32 registers of A per lane.
    pub fn a_regs(self) -> usize {
        4
    }

    /// u32 registers of B per lane.
    pub fn b_regs(self) -> usize {
        2
    }

    /// The textual name: `m16n8k16.bf16`, `m16n8k16.f16`, `m16n8k8.tf32`.
    pub fn name(self) -> &'static str {
        match self {
            MmaShape::M16N8K16Bf16 => "m16n8k16.bf16",
            MmaShape::M16N8K16F16 => "m16n8k16.f16",
            MmaShape::M16N8K8Tf32 => "m16n8k8.tf32",
        }
    }

    /// Where lane `lane` holds A: for register `i` (0..4), the `(row, col)` of the element in
    /// its low half (bf16/f16; the high half is `col + 1`) or of its one element (tf32).
    /// With `g = lane / 4`, `t = lane % 4`:
    /// - m16n8k16: reg 0 `(g, 2t)`, reg 1 `(g + 8, 2t)`, reg 2 `(g, 2t + 8)`, reg 3
    ///   `(g + 8, 2t + 8)`;
    /// - m16n8k8.tf32: reg 0 `(g, t)`, reg 1 `(g + 8, t)`, reg 2 `(g, t + 4)`, reg 3
    ///   `(g + 8, t + 4)`.
    pub fn a_pos(self, lane: usize, i: usize) -> (usize, usize) {
        let (g, t) = (lane / 4, lane % 4);
        let row = g + 8 * (i & 1);
        match self {
            MmaShape::M16N8K8Tf32 => (row, t + 4 * (i >> 1)),
            _ => (row, 2 * t + 8 * (i >> 1)),
        }
    }

    /// Where lane `lane` holds B: for register `i` (0..2), the `(k, n)` of its low-half
    /// element (the high half is `k + 1`) or of its one element (tf32). m16n8k16: reg 0
    /// `(2t, g)`, reg 1 `(2t + 8, g)`; m16n8k8.tf32: reg 0 `(t, g)`, reg 1 `(t + 4, g)`.
    pub fn b_pos(self, lane: usize, i: usize) -> (usize, usize) {
        let (g, t) = (lane / 4, lane % 4);
        match self {
            MmaShape::M16N8K8Tf32 => (t + 4 * i, g),
            _ => (2 * t + 8 * i, g),
        }
    }

    /// Where lane `lane` holds C and D: register `i` (0..4) is element
    /// `(g + 8·(i / 2), 2t + i % 2)` (the same for every shape).
    pub fn cd_pos(lane: usize, i: usize) -> (usize, usize) {
        (lane / 4 + 8 * (i >> 1), 2 * (lane % 4) + (i & 1))
    }
}

/// The input type of a [`Stmt::Wgmma`]: bf16 or f16 (`k16`), or tf32 (`k8`; f32 bit
/// patterns of which the tensor core reads bits 31..13, as for
/// [`MmaShape::M16N8K8Tf32`]).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum WgmmaInput {
    Bf16,
    F16,
    Tf32,
}

impl WgmmaInput {
    pub const ALL: [WgmmaInput; 3] = [WgmmaInput::Bf16, WgmmaInput::F16, WgmmaInput::Tf32];

    pub fn name(self) -> &'static str {
        match self {
            WgmmaInput::Bf16 => "bf16",
            WgmmaInput::F16 => "f16",
            WgmmaInput::Tf32 => "tf32",
        }
    }

    /// Bytes of one element in shared memory.
    pub fn bytes(self) -> u32 {
        match self {
            WgmmaInput::Bf16 | WgmmaInput::F16 => 2,
            WgmmaInput::Tf32 => 4,
        }
    }

    /// The reduction length of one instruction: 16 for 16-bit inputs, 8 for tf32 — 32
    /// bytes of K either way.
    pub fn k(self) -> u32 {
        32 / self.bytes()
    }
}

/// The shape of a warpgroup-level [`Stmt::Wgmma`]: `D[64×n] += A[64×k]·B[k×n]`, `k` 16
/// (bf16, f16) or 8 (tf32), `n` a multiple of 8 from 8 to 256 (PTX ISA §9.7.15.5.1,
/// "Matrix shape": `.m64nNk16`, `.m64nNk8`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct WgmmaShape {
    pub n: u32,
    pub input: WgmmaInput,
}

impl WgmmaShape {
    /// Rows of A and D.
    pub const M: u32 = 64;

    /// Whether PTX has this shape: `n` in 8, 16, ..., 256.
    pub fn is_valid(self) -> bool {
        self.n % 8 == 0 && (8..=256).contains(&self.n)
    }

    /// The reduction length.
    pub fn k(self) -> u32 {
        self.input.k()
    }

    /// F32 accumulator registers per thread: the 64·n outputs over the warpgroup's 128
    /// threads.
    pub fn d_regs(self) -> usize {
        self.n as usize / 2
    }

    /// The textual name: `m64n128k16.bf16`, `m64n64k8.tf32`.
    pub fn name(self) -> String {
        format!("m64n{}k{}.{}", self.n, self.k(), self.input.name())
    }

    /// Where thread `t` (0..128) of the warpgroup holds accumulator register `i`: row
    /// `16·(t / 32) + g + 8·((i / 2) mod 2)` and column `8·(i / 4) + 2·(t mod 4) + i mod 2`,
    /// with `g = (t mod 32) / 4` — warp `w` of the warpgroup holds rows `16w .. 16w + 16`,
    /// each 8 columns of them as one [`MmaShape::cd_pos`] fragment (PTX ISA §9.7.15.5.1,
    /// "Register Fragments", the D matrix of `.m64nNk16`).
    pub fn d_pos(t: usize, i: usize) -> (usize, usize) {
        let (r, c) = MmaShape::cd_pos(t % 32, i % 4);
        (16 * (t / 32) + r, 8 * (i / 4) + c)
    }
}

/// The swizzle mode of a [`SmemDesc`] (the descriptor's bits 63..62): how the 16-byte
/// chunks of each row of a K-major operand are permuted, as TMA's
/// `CU_TENSOR_MAP_SWIZZLE_32B/64B/128B` write them (chunk `c` of the `span`-byte row `r`
/// at chunk `c ^ (r mod span/16)`, on shared-memory address bits).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum WgmmaSwizzle {
    B128,
    B64,
    B32,
}

impl WgmmaSwizzle {
    /// Bytes of one swizzled row: 128, 64 or 32.
    pub fn span(self) -> u32 {
        match self {
            WgmmaSwizzle::B128 => 128,
            WgmmaSwizzle::B64 => 64,
            WgmmaSwizzle::B32 => 32,
        }
    }

    /// The descriptor's mode field (PTX ISA §9.7.15.5.1.2.2, "Matrix Descriptor Format":
    /// 1 128-byte, 2 64-byte, 3 32-byte swizzle; 0, no swizzle, is not used).
    fn code(self) -> u64 {
        match self {
            WgmmaSwizzle::B128 => 1,
            WgmmaSwizzle::B64 => 2,
            WgmmaSwizzle::B32 => 3,
        }
    }

    /// The byte address of byte `logical` of a swizzled operand: address bits 4.. of the
    /// 16-byte chunk XORed with bits 7.. (the row within the 8-row pattern), as many bits
    /// as the span has chunks (3, 2, 1) — CUTLASS's `Swizzle<3|2|1, 4, 3>`.
    pub fn apply(self, logical: u32) -> u32 {
        let mask = self.span() / 16 - 1;
        logical ^ (((logical >> 7) & mask) << 4)
    }
}

/// A wgmma shared-memory matrix descriptor for a K-major swizzled operand (PTX ISA
/// §9.7.15.5.1.2.2, "Matrix Descriptor Format"), each byte count stored divided by 16:
/// bits 13..0 the start address, 29..16 the leading-dimension byte offset, 45..32 the
/// stride-dimension byte offset, 51..49 the base offset (0: every pattern starts at a
/// multiple of its `8 · span` bytes), 63..62 the swizzle mode.
///
/// The operand it describes: row `r` (of M or N), byte `b` of its K slice at the logical
/// address `start + (r / 8)·sbo + (r mod 8)·span + b`, stored at that address swizzled
/// ([`WgmmaSwizzle::apply`]). `lbo` is not read by the swizzled K-major layouts (one
/// instruction's K, 32 bytes, never leaves a row's span); it is encoded as given.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct SmemDesc {
    /// Shared-window byte address, a multiple of 16, below 2^18.
    pub start: u32,
    pub lbo: u32,
    pub sbo: u32,
    pub swizzle: WgmmaSwizzle,
}

impl SmemDesc {
    /// The 64-bit descriptor. Fields are taken modulo their widths; [`SmemDesc::decode`]
    /// of the result gives `self` back when each is in range (16-byte multiples below
    /// 2^18).
    pub fn encode(self) -> u64 {
        let f = |x: u32| (x as u64 >> 4) & 0x3fff;
        f(self.start) | f(self.lbo) << 16 | f(self.sbo) << 32 | self.swizzle.code() << 62
    }

    /// The bits of the descriptor that do not depend on the start address: what a
    /// kernel adds to `start >> 4` to make one.
    pub fn fixed_bits(self) -> u64 {
        SmemDesc { start: 0, ..self }.encode()
    }

    /// Reads a descriptor, or says why it is not one of the layouts the model knows
    /// (no swizzle, or a nonzero base offset).
    pub fn decode(d: u64) -> Result<SmemDesc, String> {
        let f = |shift: u32| (((d >> shift) & 0x3fff) << 4) as u32;
        let swizzle = match d >> 62 {
            1 => WgmmaSwizzle::B128,
            2 => WgmmaSwizzle::B64,
            3 => WgmmaSwizzle::B32,
            _ => return Err(format!("descriptor {d:#018x} has no swizzle (mode 0)")),
        };
        if (d >> 49) & 7 != 0 {
            return Err(format!("descriptor {d:#018x} has a nonzero base offset"));
        }
        Ok(SmemDesc {
            start: f(0),
            lbo: f(16),
            sbo: f(32),
            swizzle,
        })
    }

    /// The shared-memory address of byte `b` (below the span) of row `r`.
    pub fn address(self, r: u32, b: u32) -> u32 {
        let logical = self.start + (r / 8) * self.sbo + (r % 8) * self.swizzle.span() + b;
        self.swizzle.apply(logical)
    }

    /// For an MN-major operand (PTX ISA §9.7.15.5.1.2.1, "Canonical Layouts": for
    /// 128-byte swizzle `((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))` in elements, `T` the
    /// elements of 16 bytes), the shared-memory address of byte `b` of K row `k`: each K
    /// row holds `span` bytes of MN, 8 K rows one swizzle pattern, `sbo` bytes between
    /// patterns along K and `lbo` bytes between the `span`-byte column panels along MN.
    pub fn address_mn(self, k: u32, b: u32) -> u32 {
        let span = self.swizzle.span();
        let logical =
            self.start + (b / span) * self.lbo + (k / 8) * self.sbo + (k % 8) * span + b % span;
        self.swizzle.apply(logical)
    }
}

/// Where a [`Stmt::Wgmma`] reads its A operand.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum WgmmaA {
    /// A K-major shared-memory descriptor in a `U64` register: 64 rows of K.
    Desc(Reg),
    /// Four `U32` registers per thread, two 16-bit elements each (low half first), at
    /// [`WgmmaA::reg_pos`]: PTX's `{a0, a1, a2, a3}` operand of a 16-bit `.m64nNk16`.
    Regs(Vec<Reg>),
}

impl WgmmaA {
    /// Registers of A per thread in the register form (16-bit inputs).
    pub const REGS: usize = 4;

    /// Where thread `t` (0..128) of the warpgroup holds A in register `i` (0..4): the
    /// `(row, col)` of the element in its low half (the high half is `col + 1`) — warp
    /// `w` holds rows `16w .. 16w + 16` as one m16n8k16 A fragment ([`MmaShape::a_pos`];
    /// PTX ISA §9.7.15.5.1.1.1, Figure "WGMMA .m64nNk16 register fragment layout for
    /// matrix A"). With `g = (t mod 32) / 4`, `c = t mod 4`: reg 0 `(16w + g, 2c)`, reg 1
    /// `(16w + g + 8, 2c)`, reg 2 `(16w + g, 2c + 8)`, reg 3 `(16w + g + 8, 2c + 8)` — the
    /// accumulator's layout ([`WgmmaShape::d_pos`]) for a 16-column block, so an
    /// accumulator packed in pairs is an A operand with no shuffles.
    pub fn reg_pos(t: usize, i: usize) -> (usize, usize) {
        let (r, c) = MmaShape::M16N8K16Bf16.a_pos(t % 32, i);
        (16 * (t / 32) + r, c)
    }
}

/// How a [`Stmt::Wgmma`]'s B operand lies in shared memory (PTX ISA §9.7.15.5.1.2,
/// "Shared Memory Matrix Layout").
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum WgmmaMajor {
    /// Each of the n rows holds its K elements contiguously (`imm-trans-b` 0).
    K,
    /// Each of the K rows holds its n elements contiguously (`imm-trans-b` 1): the
    /// `[keys, d]` V tile as the B operand of `P·V`. 16-bit inputs only.
    Mn,
}

/// The cache mode of a [`Stmt::CpAsync`]: PTX `cp.async.ca` (cache in L1 and L2; 4, 8 or
/// 16 bytes) or `cp.async.cg` (L2 only; 16 bytes).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CpAsyncCache {
    Ca,
    Cg,
}

impl CpAsyncCache {
    pub fn name(self) -> &'static str {
        match self {
            CpAsyncCache::Ca => "ca",
            CpAsyncCache::Cg => "cg",
        }
    }

    /// Whether a copy of `bytes` bytes exists in this mode.
    pub fn allows(self, bytes: u32) -> bool {
        match self {
            CpAsyncCache::Ca => matches!(bytes, 4 | 8 | 16),
            CpAsyncCache::Cg => bytes == 16,
        }
    }
}

/// Memory state space of a load or store.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Space {
    /// Addressed by a `U64` register.
    Global,
    /// Addressed by a `U32` register (the shared window).
    Shared,
}

/// Width of a memory access. `B8` and `B16` zero-extend into a `U32` register on load and
/// store its low bits; `B32` moves one 32-bit register (`U32` or `F32`); `V2`/`V4` move two
/// or four 32-bit registers as one 8/16-byte access (address aligned to that size).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Width {
    B8,
    B16,
    B32,
    V2,
    V4,
}

impl Width {
    /// Bytes accessed.
    pub fn bytes(self) -> u32 {
        match self {
            Width::B8 => 1,
            Width::B16 => 2,
            Width::B32 => 4,
            Width::V2 => 8,
            Width::V4 => 16,
        }
    }

    /// Registers moved.
    pub fn regs(self) -> usize {
        match self {
            Width::V2 => 2,
            Width::V4 => 4,
            _ => 1,
        }
    }
}

/// A statement of a kernel body.
#[derive(Clone, PartialEq, Debug)]
pub enum Stmt {
    /// `dst = op(args)`.
    Op {
        dst: Reg,
        op: Op,
        args: Vec<Operand>,
    },
    /// `dsts = [addr + offset]`, `width.regs()` registers.
    Load {
        dsts: Vec<Reg>,
        space: Space,
        width: Width,
        addr: Reg,
        offset: i32,
    },
    /// `[addr + offset] = values`.
    Store {
        space: Space,
        width: Width,
        addr: Reg,
        offset: i32,
        values: Vec<Operand>,
    },
    /// `var = start; while var < end (unsigned) { body; var += step }`. `var` is a `U32`
    /// register the body does not assign.
    For {
        var: Reg,
        start: Operand,
        end: Operand,
        step: Operand,
        body: Vec<Stmt>,
    },
    /// Per-thread branch on a `Pred` register.
    If {
        cond: Reg,
        then_body: Vec<Stmt>,
        else_body: Vec<Stmt>,
    },
    /// CTA-wide barrier (PTX `bar.sync 0`); every thread of the CTA must reach it, at this
    /// one statement, with no lane of its warp inactive.
    Barrier,
    /// Named barrier `id` (1 to 15), waiting (PTX `bar.sync id, threads`): the warp arrives
    /// and waits until `threads` threads have arrived at barrier `id`, by `bar.sync` or
    /// [`Stmt::BarArrive`], from this statement or any other. Barriers count whole warps:
    /// `threads` is a nonzero multiple of 32 (at most the CTA's threads), and every lane of
    /// an arriving warp executes the statement together (PTX's `.aligned` form). Every
    /// arrival of one phase names the same `threads`; the phase completes when they have
    /// all arrived, and the barrier is then free for the next. Memory: what a thread wrote
    /// before it arrived is visible to every thread of the phase after it waits (PTX ISA
    /// §9.7.13.1, "bar, barrier"). Barrier 0 is [`Stmt::Barrier`]'s.
    ///
    /// This is how the roles of a warp-specialised kernel meet: a producer warp arrives
    /// with `bar.arrive` where its consumers wait with `bar.sync`.
    BarSync { id: u32, threads: u32 },
    /// Named barrier `id`, arriving without waiting (PTX `bar.arrive id, threads`): as
    /// [`Stmt::BarSync`], but the warp goes on at once.
    BarArrive { id: u32, threads: u32 },
    /// Warp-level matrix multiply-accumulate, `D = A·B + C` on a 16×N×K tile held in the
    /// registers of the warp's 32 lanes (PTX `mma.sync.aligned.<shape>.row.col.f32.<t>.<t>.f32`).
    /// Every lane of the warp must execute it together (no lane inactive or absent: the
    /// verifier requires whole warps, the executor checks the active mask). Which element
    /// each lane's registers hold: [`MmaShape::a_pos`], [`MmaShape::b_pos`],
    /// [`MmaShape::cd_pos`].
    ///
    /// `d` and `c` are `F32` registers (four each; `d` may be `c`, accumulating in place),
    /// `a` and `b` are `shape.a_regs()` / `shape.b_regs()` `U32` registers. C is registers,
    /// not immediates, because PTX takes none there: a zero accumulator is a `Mov` first.
    ///
    /// Numerics: products of the inputs are exact (bf16·bf16, f16·f16 and tf32·tf32 fit in
    /// f32's significand), but NVIDIA does not specify the order or the precision in which
    /// the tensor core adds them. The executor's model: for each output element,
    /// `acc = c; for k in 0..K { acc = fma(a[i][k], b[k][j], acc) }`, one f32
    /// round-to-nearest-even per step, denormals kept, NaN canonical. Results on the GPU may
    /// differ from the model by accumulation rounding: they are compared by tolerance, never
    /// bit for bit, and the `exact` profile never uses this statement.
    Mma {
        shape: MmaShape,
        d: [Reg; 4],
        a: Vec<Reg>,
        b: Vec<Reg>,
        c: [Reg; 4],
    },
    /// Warp-level load of `dsts.len()` (1, 2 or 4) 8×8 matrices of 16-bit elements from
    /// shared memory (PTX `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`). Every
    /// lane of the warp must execute it together, as for [`Stmt::Mma`].
    ///
    /// Row `r` of matrix `m` is the 16 bytes at `addr + offset` of lane `8m + r` (16-byte
    /// aligned, inside a shared buffer); lanes `8·len..32` supply no address. Lane `l` gets
    /// in `dsts[m]` the elements `M[l / 4][2(l % 4)]` (bits 15..0) and
    /// `M[l / 4][2(l % 4) + 1]` (bits 31..16) of matrix `m`; with `trans`, `M[2(l % 4)][l / 4]`
    /// and `M[2(l % 4) + 1][l / 4]` (the transposed matrix). For x4 from a row-major 16×16
    /// bf16 tile with lane `l` pointing at row `l % 16`, column `8·(l / 16)`, this is exactly
    /// the A fragment of an m16n8k16 [`Stmt::Mma`].
    Ldmatrix {
        dsts: Vec<Reg>,
        trans: bool,
        addr: Reg,
        offset: i32,
    },
    /// Warpgroup-level asynchronous matrix multiply-accumulate, `D += A·B` on a
    /// `64 × n × k` tile (PTX ISA §9.7.15.5.2, `wgmma.mma_async.sync.aligned.m64nNk16.f32.<t>.<t>
    /// {d}, a, b_desc, 1, 1, 1{, 0}, trans_b` — D accumulated, no negation). B is read from
    /// shared memory through the [`SmemDesc`] in the `U64` register `b_desc`, laid out as
    /// `b_major` says: K-major (n rows of K, [`SmemDesc::address`]) or, 16-bit inputs only,
    /// MN-major (`imm-trans-b` 1: k rows of N, [`SmemDesc::address_mn`]). A ([`WgmmaA`]) is
    /// either a K-major descriptor of 64 rows of K or, 16-bit inputs only, four `U32`
    /// registers per thread holding A's fragment ([`WgmmaA::reg_pos`]; PTX ISA
    /// §9.7.15.5.1.1.1, "Register Fragments", matrix A of `.m64nNk16`). tf32 takes neither
    /// transpose operand. The four warps of a warpgroup (threads `128g .. 128g + 128`)
    /// execute it together, each lane with the same descriptors; `d` is the
    /// `shape.d_regs()` `F32` registers, laid out by [`WgmmaShape::d_pos`].
    ///
    /// Asynchronous: the instruction belongs to the warpgroup's next
    /// [`Stmt::WgmmaCommit`] group, and until a [`Stmt::WgmmaWait`] completes that group
    /// its `d` registers (and A's registers) may not be read or written by other statements
    /// (a later wgmma may accumulate into them: the tensor core keeps issue order), nor the
    /// shared memory it reads written. A [`Stmt::WgmmaFence`] must come between any other
    /// access to `d` or A's registers and the first wgmma after it, and shared memory
    /// written by ordinary stores or `cp.async` is visible to it only after the writing
    /// thread's [`Stmt::FenceProxyAsync`] (wgmma reads through the async proxy; PTX ISA
    /// §9.7.15.5.2, "Asynchronous warpgroup level matrix multiply-accumulate").
    ///
    /// Numerics as [`Stmt::Mma`]: exact products, an accumulation order NVIDIA does not
    /// specify; the executor's model is the same per-element fma chain over k, in order
    /// (compared with the GPU by tolerance). The executor reads the shared-memory operands
    /// at issue and accumulates into `d` (reading A's registers then) at the `WgmmaWait`
    /// that completes the group, so an access to `d` or A's registers before it changes
    /// the model's result; it reports a store into shared memory that a wgmma not yet
    /// waited for reads, and a read of bytes written by the generic proxy without a proxy
    /// fence.
    Wgmma {
        shape: WgmmaShape,
        d: Vec<Reg>,
        a: WgmmaA,
        b_desc: Reg,
        b_major: WgmmaMajor,
    },
    /// Orders the warpgroup's earlier register and shared-memory accesses before its next
    /// wgmma (PTX `wgmma.fence.sync.aligned`).
    WgmmaFence,
    /// Closes the warpgroup's group of wgmma issued since the last commit (PTX
    /// `wgmma.commit_group.sync.aligned`).
    WgmmaCommit,
    /// Waits until at most `n` of the warpgroup's committed wgmma groups are pending (PTX
    /// `wgmma.wait_group.sync.aligned n`).
    WgmmaWait(u32),
    /// Orders the thread's earlier shared-memory accesses through the generic proxy (loads,
    /// stores, `cp.async`) with later ones through the async proxy (wgmma operand reads,
    /// TMA) (PTX `fence.proxy.async.shared::cta`, PTX ISA §9.7.13.4, "membar/fence").
    FenceProxyAsync,
    /// Per-thread asynchronous copy of `bytes` bytes from global to shared memory (PTX
    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes{, src_bytes}`). `dst` is a `U32`
    /// shared address, `src` a `U64` global address, both aligned to `bytes`; `bytes` is
    /// 4, 8 or 16 for `Ca`, 16 for `Cg`. With `src_bytes` (a `U32`, at most `bytes`), only the
    /// first `src_bytes` bytes are read and the rest of the destination is zero-filled;
    /// with 0 no global byte is read at all, which is how K tails and M/N edges of a tile
    /// are made safe.
    ///
    /// The copy belongs to the thread's next [`Stmt::CpAsyncCommit`] group; its destination
    /// bytes may be neither read nor written (by any thread) until the thread's
    /// [`Stmt::CpAsyncWait`] / [`Stmt::CpAsyncWaitAll`] has completed that group (and, for
    /// other threads to read them, a [`Stmt::Barrier`] follows). The executor copies at
    /// once but tracks the pending bytes and reports an access before the matching wait.
    CpAsync {
        cache: CpAsyncCache,
        bytes: u32,
        dst: Reg,
        dst_offset: i32,
        src: Reg,
        src_offset: i32,
        src_bytes: Option<Operand>,
    },
    /// Closes the thread's group of pending [`Stmt::CpAsync`] copies issued since the last
    /// commit (possibly none: an empty group still counts; PTX `cp.async.commit_group`).
    CpAsyncCommit,
    /// Waits until at most `n` of the thread's most recent committed groups are pending:
    /// every older group is complete (PTX `cp.async.wait_group n`). Uncommitted copies are
    /// not waited for.
    CpAsyncWait(u32),
    /// Waits for every copy of the thread, committed or not (PTX `cp.async.wait_all`, the
    /// same as a commit and `wait_group 0`).
    CpAsyncWaitAll,
    // --- mbarrier, TMA and setmaxnreg (sm_90). Kept together at the end of the enum. ---
    /// Initialises the mbarrier object at shared address `addr` (a `U32` register, 8-byte
    /// aligned, the 8 bytes inside one shared buffer) for `count` arrivals per phase (a
    /// `U32`, 1 to 2^20 − 1; PTX `mbarrier.init.shared::cta.b64 [addr], count`, PTX ISA
    /// §9.7.13.15.9). Executed per thread: a kernel initialises each barrier from one thread,
    /// then makes the initialisation visible ([`Stmt::FenceMbarrierInit`] and a
    /// [`Stmt::Barrier`]) before any other thread or a TMA copy uses it.
    ///
    /// An mbarrier (PTX ISA §9.7.13.15.1–4) has a current phase (its parity is the phase
    /// number mod 2, starting at 0), a pending arrival count (`count` at the start of every
    /// phase) and a transaction count (tx-count, bytes; 0 at the start of every phase). The
    /// phase completes when both are 0: the next phase begins, with `count` pending
    /// arrivals again. From its init on, its 8 bytes belong to the barrier: ordinary loads
    /// and stores to them are errors (the executor reports them), and initialising it again
    /// while in use is undefined.
    MbarInit { addr: Reg, count: Operand },
    /// Adds `bytes` (a `U32`, below 2^20) to the current phase's tx-count of the mbarrier at
    /// `addr`, then arrives on it (PTX `mbarrier.arrive.expect_tx.shared::cta.b64 _, [addr],
    /// bytes`, PTX ISA §9.7.13.15.12): how a producer announces the bytes its
    /// [`Stmt::TmaLoad`]s will deliver to the phase. Per thread; an arrival on a phase
    /// with no pending arrival left is an error.
    MbarArriveExpectTx { addr: Reg, bytes: Operand },
    /// Arrives on the mbarrier at `addr` (one arrival per executing thread; PTX
    /// `mbarrier.arrive.shared::cta.b64 _, [addr]`, PTX ISA §9.7.13.15.12), with release
    /// semantics at CTA scope: what the thread wrote before is visible to the threads that
    /// observe the phase complete.
    MbarArrive { addr: Reg },
    /// Waits until the phase of parity `parity` (a `U32`, 0 or 1) of the mbarrier at `addr`
    /// has completed, that is until the current phase's parity is not `parity` (PTX
    /// `mbarrier.try_wait.parity.shared::cta.b64` in a loop, PTX ISA §9.7.13.15.16; acquire
    /// semantics at CTA scope). The usual producer/consumer convention follows: a wait for
    /// parity 1 on a fresh barrier returns at once. Per thread; the executor runs it as a
    /// blocking wait of the warp (every active lane's phase must have completed), and a wait
    /// that no warp can satisfy is a deadlock error.
    MbarWait { addr: Reg, parity: Operand },
    /// Makes the thread's preceding [`Stmt::MbarInit`]s visible to the async proxy (TMA)
    /// and to the cluster (PTX `fence.mbarrier_init.release.cluster`, PTX ISA §9.7.13.4).
    /// The executor has nothing to order: a no-op there.
    FenceMbarrierInit,
    /// A TMA tiled load (PTX `cp.async.bulk.tensor.{N}d.shared::cluster.global.tile.
    /// mbarrier::complete_tx::bytes [dst], [tmap, {c0, ..}], [mbar]`, PTX ISA §9.7.9.25.5.1):
    /// the box of the tensor map whose generic address is in `tmap` (a `U64`, from
    /// [`Op::Param`] of a [`ParamKind::TensorMap`] parameter) at element coordinates
    /// `coords` (one `U32` per dimension of the map, read as signed i32, innermost first)
    /// is copied to shared memory at `dst` (a `U32`), and the mbarrier at `mbar` gets a
    /// complete-tx of the box's bytes when the copy lands. Issued per executing thread
    /// (kernels issue from one).
    ///
    /// The box lands as `box[r-1] × .. × box[0]` elements, dimension 0 contiguous, then
    /// (for a swizzled map) with the 16-byte chunks of the shared address permuted as
    /// [`TensorMapSwizzle`] says; elements outside the tensor are written as zero bits.
    /// `dst` must be 128-byte aligned, and aligned to the swizzle's pattern (256, 512, 1024
    /// bytes for 32, 64, 128) in a buffer declared with that alignment. The destination
    /// bytes may not be read or written until a [`Stmt::MbarWait`] has seen the phase the
    /// copy completes on complete; the executor reports any access before that.
    TmaLoad {
        dst: Reg,
        tmap: Reg,
        coords: Vec<Operand>,
        mbar: Reg,
    },
    /// Raises (`inc`) or lowers the per-thread register budget of the warp to `regs` (a
    /// multiple of 8 in 24..=256; PTX `setmaxnreg.{inc,dec}.sync.aligned.u32 regs`, PTX ISA
    /// §9.7.19.5, sm_90a): warp-specialised kernels give registers from producer warpgroups
    /// to consumer ones. Every lane of the warp executes it together. No effect on results:
    /// a no-op in the executor.
    SetMaxNReg { inc: bool, regs: u32 },
    // --- Programmatic dependent launch (sm_90). ---
    /// Waits until every grid this one depends on programmatically has completed and its
    /// memory operations are performed and visible to this grid (PTX `griddepcontrol.wait`,
    /// PTX ISA "Parallel Synchronization and Communication Instructions: griddepcontrol";
    /// sm_90, PTX 7.8). Per thread. A kernel launched with programmatic stream
    /// serialization (CUDA Programming Guide, "Programmatic Dependent Launch") may start
    /// before the kernel ahead of it in the stream has finished: every one of its threads
    /// executes this before its first global memory access other than a
    /// [`Stmt::PrefetchL2`] (the verifier's rule `kernel.griddep`). Launched without the
    /// attribute it returns at once. The executor runs kernels one after another: a no-op
    /// there.
    GridDepWait,
    /// Lets the grids that depend on this one programmatically launch once every CTA of
    /// this grid has executed this statement or exited (PTX
    /// `griddepcontrol.launch_dependents`; the first execution in a CTA is the one that
    /// counts). It orders no memory: a dependent still waits for this grid's completion
    /// with [`Stmt::GridDepWait`] before reading what it wrote. A no-op in the executor.
    GridDepLaunch,
    /// Asks L2 to fetch the `bytes` bytes of global memory at `addr` (a `U64`, 16-byte
    /// aligned; `bytes` a `U32`, a multiple of 16; PTX `cp.async.bulk.prefetch.L2.global
    /// [addr], bytes`, PTX ISA "Data Movement and Conversion Instructions:
    /// cp.async.bulk.prefetch"; sm_90, PTX 8.0). A hint: it changes no value any thread
    /// reads (L2 is where global memory is coherent), so it may run before
    /// [`Stmt::GridDepWait`]. The executor checks that the range lies within one global
    /// buffer and is otherwise a no-op.
    PrefetchL2 { addr: Reg, bytes: Operand },
}

/// The most arrivals an mbarrier phase may count, and the largest tx-count (PTX ISA
/// §9.7.13.15.1, "Contents of the mbarrier object": both are 20-bit counts).
pub const MBAR_MAX_COUNT: u32 = (1 << 20) - 1;

/// How a TMA box's 16-byte chunks are permuted in shared memory (`CU_TENSOR_MAP_SWIZZLE_*`,
/// CUDA Driver API `cuTensorMapEncodeTiled`): with `b` = 1, 2, 3 for 32, 64, 128 bytes,
/// bits `[4, 4 + b)` of the shared address are XORed with bits `[7, 7 + b)`. The box's
/// inner dimension may span at most the swizzle's bytes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum TensorMapSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TensorMapSwizzle {
    pub const ALL: [TensorMapSwizzle; 4] = [
        TensorMapSwizzle::None,
        TensorMapSwizzle::B32,
        TensorMapSwizzle::B64,
        TensorMapSwizzle::B128,
    ];

    /// The swizzle's span in bytes: 0 (none), 32, 64 or 128.
    pub fn bytes(self) -> u32 {
        match self {
            TensorMapSwizzle::None => 0,
            TensorMapSwizzle::B32 => 32,
            TensorMapSwizzle::B64 => 64,
            TensorMapSwizzle::B128 => 128,
        }
    }

    /// The `b` of the module doc: address bits XORed (0 for none).
    pub fn bits(self) -> u32 {
        match self {
            TensorMapSwizzle::None => 0,
            TensorMapSwizzle::B32 => 1,
            TensorMapSwizzle::B64 => 2,
            TensorMapSwizzle::B128 => 3,
        }
    }

    /// The alignment, bytes, of a box's shared destination: 128 (PTX ISA
    /// §9.7.9.25.5.1), and the pattern's repeat, 8 rows of the span, for a swizzled map
    /// (256, 512, 1024): the swizzle acts on address bits, so only then does the box
    /// land the same wherever the buffer is.
    pub fn dst_align(self) -> u32 {
        (8 * self.bytes()).max(128)
    }

    /// `addr` with the swizzle applied (bits `[4, 4 + b)` ^= bits `[7, 7 + b)`).
    pub fn apply(self, addr: u32) -> u32 {
        let mask = (1u32 << self.bits()) - 1;
        addr ^ (((addr >> 7) & mask) << 4)
    }
}

/// A tiled TMA tensor map as a launch describes it (the arguments of CUDA's
/// `cuTensorMapEncodeTiled`, which the runtime encodes on the host into the 128-byte
/// `CUtensorMap` the kernel's [`ParamKind::TensorMap`] parameter receives): a `rank`-D view
/// (1 to 5) of a buffer's elements of `dtype`, dimension 0 contiguous, and the box one
/// [`Stmt::TmaLoad`] copies. Elements strides are 1, no interleave, out-of-bounds
/// elements are filled with zero bits.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorMapDesc {
    /// The buffer the map views, from its first byte.
    pub buffer: BufferId,
    /// The element type; must be the buffer's.
    pub dtype: DType,
    /// Dimensions, 1..=5.
    pub rank: u32,
    /// Size of each dimension in elements, innermost first (entries past `rank` are 1, as
    /// [`TensorMapDesc::new`] makes them).
    pub dims: [u64; 5],
    /// Bytes between consecutive indices of dimension `i + 1` (`globalStrides`; the
    /// innermost dimension's stride is the element size). Multiples of 16 below 2^40.
    pub strides: [u64; 4],
    /// The box, elements per dimension, each 1..=256; `box_dims[0]` · element size is a
    /// multiple of 16 bytes, and at most the swizzle's span when swizzled.
    pub box_dims: [u32; 5],
    pub swizzle: TensorMapSwizzle,
}

impl TensorMapDesc {
    /// A map of `dims.len()` dimensions (1 to 5), with the unused entries in their one
    /// spelling (1 for dims and box dims, 0 for strides), so that equal maps compare equal.
    ///
    /// # Panics
    /// If `dims` does not have 1 to 5 entries, `box_dims` as many, and `strides` one fewer.
    pub fn new(
        buffer: BufferId,
        dtype: DType,
        dims: &[u64],
        strides: &[u64],
        box_dims: &[u32],
        swizzle: TensorMapSwizzle,
    ) -> TensorMapDesc {
        let rank = dims.len();
        assert!(
            (1..=5).contains(&rank) && box_dims.len() == rank && strides.len() + 1 == rank,
            "a tensor map of {rank} dims, {} box dims, {} strides",
            box_dims.len(),
            strides.len()
        );
        let mut t = TensorMapDesc {
            buffer,
            dtype,
            rank: rank as u32,
            dims: [1; 5],
            strides: [0; 4],
            box_dims: [1; 5],
            swizzle,
        };
        t.dims[..rank].copy_from_slice(dims);
        t.strides[..rank - 1].copy_from_slice(strides);
        t.box_dims[..rank].copy_from_slice(box_dims);
        t
    }

    /// Bytes one box occupies in shared memory: the complete-tx a [`Stmt::TmaLoad`] counts.
    pub fn box_bytes(&self) -> u64 {
        let n: u64 = self.box_dims[..self.rank.clamp(1, 5) as usize]
            .iter()
            .map(|&b| b as u64)
            .product();
        n * self.dtype.size_bytes()
    }

    /// Checks the map against `cuTensorMapEncodeTiled`'s rules and against a buffer of
    /// `buffer_bytes` bytes (every element the map can address lies inside it). The one
    /// check of a description: the program verifier (rule `program.launch`) and the
    /// executor's launch call it; `tessel-cuda` checks the device-side form again.
    ///
    /// # Errors
    /// The first rule broken, in words.
    pub fn check(&self, buffer_bytes: u64) -> Result<(), String> {
        let rank = self.rank as usize;
        if !(1..=5).contains(&rank) {
            return Err(format!("rank {} is not in 1..=5", self.rank));
        }
        if matches!(self.dtype, DType::Bool) {
            return Err("a tensor map of bool elements".to_string());
        }
        let esz = self.dtype.size_bytes();
        for i in 0..rank {
            if self.dims[i] == 0 || self.dims[i] > 1 << 32 {
                return Err(format!(
                    "dimension {i} of {} elements is not in 1..=2^32",
                    self.dims[i]
                ));
            }
            if !(1..=256).contains(&self.box_dims[i]) {
                return Err(format!(
                    "box dimension {i} of {} is not in 1..=256",
                    self.box_dims[i]
                ));
            }
        }
        for (i, &s) in self.strides[..rank - 1].iter().enumerate() {
            if s % 16 != 0 || s == 0 || s >= 1 << 40 {
                return Err(format!(
                    "stride of dimension {} is {s} bytes: a nonzero multiple of 16 below 2^40 is needed",
                    i + 1
                ));
            }
        }
        let inner = self.box_dims[0] as u64 * esz;
        if inner % 16 != 0 {
            return Err(format!(
                "the box's inner dimension is {inner} bytes, not a multiple of 16"
            ));
        }
        let span = self.swizzle.bytes() as u64;
        if span > 0 && inner > span {
            return Err(format!(
                "the box's inner dimension is {inner} bytes, more than the {span}-byte swizzle"
            ));
        }
        let mut last = (self.dims[0] - 1) * esz;
        for i in 1..rank {
            last += (self.dims[i] - 1) * self.strides[i - 1];
        }
        if last + esz > buffer_bytes {
            return Err(format!(
                "the map reaches byte {} of a {buffer_bytes}-byte buffer",
                last + esz
            ));
        }
        Ok(())
    }
}

/// The kind of a kernel parameter.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ParamKind {
    /// A global pointer to elements of `dtype`; `writes` if the kernel stores through it.
    Ptr { dtype: DType, writes: bool },
    /// A 32-bit scalar.
    U32,
    /// A 128-byte TMA tensor map (`CUtensorMap`) passed by value (PTX `.param .align 64 .b8
    /// name[128]`, CUDA's `__grid_constant__ const CUtensorMap`); [`Op::Param`] gives its
    /// generic address (PTX `cvta.param.u64`), the `tmap` of a [`Stmt::TmaLoad`]. A launch
    /// passes a [`LaunchArg::TensorMap`].
    TensorMap,
}

impl ParamKind {
    /// The type of the register an [`Op::Param`] reading this parameter gives: `U64` for a
    /// pointer (a global address) or a tensor map (its generic address), `U32` for a scalar.
    pub fn reg_type(self) -> RegType {
        match self {
            ParamKind::Ptr { .. } | ParamKind::TensorMap => RegType::U64,
            ParamKind::U32 => RegType::U32,
        }
    }
}

/// A kernel parameter.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
}

/// The most shared memory a CTA may declare statically, bytes (48 KiB).
pub const STATIC_SHARED_BYTES: u32 = 48 * 1024;

/// A statically sized shared-memory buffer.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct SharedDecl {
    pub bytes: u32,
    pub align: u32,
}

/// One GPU kernel.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Kernel {
    /// The PTX entry name: a PTX identifier ([`is_ptx_identifier`]), unique in its program.
    pub name: String,
    pub params: Vec<Param>,
    /// CTA shape in threads (x, y, z); only x is used by the schedules today.
    pub block: [u32; 3],
    /// Grid shape in CTAs.
    pub grid: [u32; 3],
    /// CTAs that should fit on one SM at once (0: no request): PTX `.minnctapersm`, which
    /// makes ptxas keep registers within `65536 / (n · threads)` per thread (PTX ISA
    /// §11.4, "Performance-Tuning Directives").
    pub min_ctas_per_sm: u32,
    pub shared: PrimaryMap<SharedBuf, SharedDecl>,
    pub regs: PrimaryMap<Reg, RegType>,
    pub body: Vec<Stmt>,
    /// The schedule in words: tile configuration and, for reductions, the exact order in
    /// which sums are formed (the reduction-order signature, design §5).
    pub schedule: String,
}

impl Kernel {
    pub fn new_reg(&mut self, ty: RegType) -> Reg {
        self.regs.push(ty)
    }

    pub fn new_shared(&mut self, bytes: u32, align: u32) -> SharedBuf {
        self.shared.push(SharedDecl { bytes, align })
    }

    /// Whether the body runs `griddepcontrol.wait` ([`Stmt::GridDepWait`]) anywhere: a
    /// kernel that may be launched with programmatic stream serialization, to begin
    /// before the kernel ahead of it completes (the verifier's rule `kernel.griddep` checks
    /// that it waits before any global access).
    pub fn waits_on_prior_grid(&self) -> bool {
        any_stmt(&self.body, &|s| matches!(s, Stmt::GridDepWait))
    }

    /// Threads per CTA.
    pub fn threads_per_cta(&self) -> u32 {
        self.block.iter().product()
    }

    /// The dynamic shared memory a launch of this kernel must request, in bytes: 0 when its
    /// buffers fit in the 48 KiB a CTA may declare statically (CUDA C++ Programming Guide,
    /// "Shared Memory"); otherwise the kernel has exactly one buffer (the verifier checks),
    /// which the PTX declares `.extern` and the launch sizes — up to the device's opt-in
    /// limit (227 KiB on the H200).
    pub fn dynamic_shared_bytes(&self) -> u32 {
        let total: u64 = self.shared.values().map(|d| d.bytes as u64).sum();
        if total > STATIC_SHARED_BYTES as u64 {
            total.min(u32::MAX as u64) as u32
        } else {
            0
        }
    }

    /// Rebuilds the body statement by statement, for passes that rewrite in place: `For` and
    /// `If` bodies are rebuilt recursively, in order, and every other statement is handed to
    /// `f` with the kernel (to make registers) and the block being built, to which `f`
    /// appends the statement's replacement. While `f` runs, `self.body` is empty.
    ///
    /// # Errors
    /// The first error `f` returns; the body is then left partly rewritten.
    pub fn rewrite<E>(
        &mut self,
        mut f: impl FnMut(&mut Kernel, Stmt, &mut Vec<Stmt>) -> Result<(), E>,
    ) -> Result<(), E> {
        let body = std::mem::take(&mut self.body);
        self.body = rewrite_block(self, body, &mut f)?;
        Ok(())
    }
}

fn rewrite_block<E, F>(k: &mut Kernel, block: Vec<Stmt>, f: &mut F) -> Result<Vec<Stmt>, E>
where
    F: FnMut(&mut Kernel, Stmt, &mut Vec<Stmt>) -> Result<(), E>,
{
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let body = rewrite_block(k, body, f)?;
                out.push(Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                });
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let then_body = rewrite_block(k, then_body, f)?;
                let else_body = rewrite_block(k, else_body, f)?;
                out.push(Stmt::If {
                    cond,
                    then_body,
                    else_body,
                });
            }
            other => f(k, other, &mut out)?,
        }
    }
    Ok(out)
}

/// Whether `s` is a PTX identifier: `[a-zA-Z]{followsym}*` or `[_$%]{followsym}+`, with
/// `followsym` as [`is_ptx_followsym`] (PTX ISA §4.4, "Identifiers"). The one check of a
/// kernel name: the verifier (rule `kernel.name`) and the PTX writer call it.
/// Whether `pred` holds for a statement of `body` or of a block nested in it (loop bodies,
/// both arms of branches); `pred` sees `For` and `If` themselves too.
pub fn any_stmt(body: &[Stmt], pred: &dyn Fn(&Stmt) -> bool) -> bool {
    body.iter().any(|s| {
        pred(s)
            || match s {
                Stmt::For { body, .. } => any_stmt(body, pred),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => any_stmt(then_body, pred) || any_stmt(else_body, pred),
                _ => false,
            }
    })
}

pub fn is_ptx_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => chars.all(is_ptx_followsym),
        Some('_' | '$' | '%') => {
            let rest = chars.as_str();
            !rest.is_empty() && rest.chars().all(is_ptx_followsym)
        }
        _ => false,
    }
}

/// Whether `c` may follow the first character of a PTX identifier: `[a-zA-Z0-9_$]` (PTX ISA
/// §4.4, `followsym`).
pub fn is_ptx_followsym(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// What a program buffer is for.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BufferRole {
    /// Step input number `n`: the caller fills it; no kernel writes it.
    Input(u32),
    /// Step input number `n` that the step updates in place (an `inout` parameter): the
    /// caller fills it, kernels read and write it, and it is returned to the caller as the
    /// step output of its name — the same buffer, never a copy.
    InOut(u32),
    /// Written by a kernel and returned to the caller.
    Output,
    /// Written by one kernel and read by later ones; not returned.
    Temp,
}

impl BufferRole {
    /// The step input number of an [`BufferRole::Input`] or [`BufferRole::InOut`] buffer.
    pub fn input_index(self) -> Option<u32> {
        match self {
            BufferRole::Input(i) | BufferRole::InOut(i) => Some(i),
            BufferRole::Output | BufferRole::Temp => None,
        }
    }
}

/// A dense, row-major device buffer.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct BufferDecl {
    pub name: String,
    pub ty: TensorType,
    pub role: BufferRole,
}

/// An argument of a launch, matching the kernel's [`Param`] of the same position.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum LaunchArg {
    Buffer(BufferId),
    U32(u32),
    /// A tensor map over a buffer, for a [`ParamKind::TensorMap`] parameter: the runtime
    /// encodes it on the host (`cuTensorMapEncodeTiled`), the executor reads it as is.
    TensorMap(TensorMapDesc),
}

/// One kernel launch.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Launch {
    pub kernel: KernelId,
    pub args: Vec<LaunchArg>,
}

/// A compiled step: kernels launched in order over a set of buffers.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Program {
    /// The step's name.
    pub name: String,
    pub buffers: PrimaryMap<BufferId, BufferDecl>,
    pub kernels: PrimaryMap<KernelId, Kernel>,
    pub launches: Vec<Launch>,
    /// Step inputs in parameter order.
    pub inputs: Vec<(String, BufferId)>,
    /// Step outputs in result order (a buffer may appear twice).
    pub outputs: Vec<(String, BufferId)>,
}

/// Which tensor-core instructions a program issues (see [`Program::tensor_cores`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorCoreUse {
    /// Any `mma.sync` or `wgmma`: its accumulation order inside one instruction is not specified by
    /// NVIDIA, so such kernels are checked by tolerance, not against the executor's bits.
    pub mma: bool,
    /// Any TF32 `mma.sync` (m16n8k8) or `wgmma` (m64nNk8): f32 operands rounded to 10 fraction bits.
    pub tf32: bool,
}

impl Program {
    /// The tensor-core instructions any kernel of the program issues.
    pub fn tensor_cores(&self) -> TensorCoreUse {
        fn walk(body: &[Stmt], found: &mut TensorCoreUse) {
            for s in body {
                match s {
                    Stmt::Mma { shape, .. } => {
                        found.mma = true;
                        found.tf32 |= *shape == MmaShape::M16N8K8Tf32;
                    }
                    Stmt::Wgmma { shape, .. } => {
                        found.mma = true;
                        found.tf32 |= shape.input == WgmmaInput::Tf32;
                    }
                    Stmt::For { body, .. } => walk(body, found),
                    Stmt::If {
                        then_body,
                        else_body,
                        ..
                    } => {
                        walk(then_body, found);
                        walk(else_body, found);
                    }
                    _ => {}
                }
            }
        }
        let mut found = TensorCoreUse::default();
        for k in self.kernels.values() {
            walk(&k.body, &mut found);
        }
        found
    }
}

/// Appends statements to a kernel body with nested blocks (`For`, `If`) opened and closed
/// in stack order.
pub struct Builder<'k> {
    pub kernel: &'k mut Kernel,
    blocks: Vec<Vec<Stmt>>,
}

impl<'k> Builder<'k> {
    /// A builder appending to the end of `kernel.body`.
    pub fn new(kernel: &'k mut Kernel) -> Self {
        let body = std::mem::take(&mut kernel.body);
        Builder {
            kernel,
            blocks: vec![body],
        }
    }

    /// Appends a statement to the innermost open block.
    pub fn push(&mut self, s: Stmt) {
        self.blocks
            .last_mut()
            .expect("builder always has an open block")
            .push(s);
    }

    /// `dst = op(args)` into a fresh register of type `ty`.
    pub fn op(&mut self, ty: RegType, op: Op, args: &[Operand]) -> Reg {
        let dst = self.kernel.new_reg(ty);
        self.assign(dst, op, args);
        dst
    }

    /// `dst = op(args)` into an existing register.
    pub fn assign(&mut self, dst: Reg, op: Op, args: &[Operand]) {
        self.push(Stmt::Op {
            dst,
            op,
            args: args.to_vec(),
        });
    }

    /// Opens a new block; close it with [`Builder::close`].
    pub fn open(&mut self) {
        self.blocks.push(Vec::new());
    }

    /// Closes the innermost block and returns its statements.
    pub fn close(&mut self) -> Vec<Stmt> {
        assert!(self.blocks.len() > 1, "close without open");
        self.blocks.pop().unwrap_or_default()
    }

    /// Writes the statements back into the kernel body.
    pub fn finish(mut self) {
        assert_eq!(self.blocks.len(), 1, "unclosed block");
        self.kernel.body = self.blocks.pop().unwrap_or_default();
    }
}
