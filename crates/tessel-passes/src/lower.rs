//! `lower`: turns every fusion group into a kernel of the kernel IR, and the step into a
//! [`Program`] (buffers, kernels, launches).
//!
//! Before: a graph with its [`Fusion`] and a [`Schedule`](tessel_ir::graph::Schedule) per
//! group. After: a program whose kernels still contain [`Op::Math`] placeholders
//! (`expand-math` replaces them). A split-K matmul group becomes two kernels over an f32
//! scratch buffer; every other group one kernel.
//!
//! Every value is computed at an *index* — one index per dim of its shape, each a constant
//! or a register — by walking from a group's output back to materialised values, which are
//! loaded from memory. Shape ops only rewrite indices: a broadcast pins broadcast dims to 0,
//! a slice adds its start, a permute reorders, a reshape goes through the flat index (or,
//! when it only inserts or removes dims of size 1, maps dims directly), a concat branches on
//! the index along its axis. A thread handles `vector` consecutive elements along the last
//! axis; where an op keeps those lanes contiguous and aligned the walk stays vectorised (one
//! 16-byte load, one packed store), elsewhere it falls back to one index per lane.
//!
//! Values computed by a kernel are kept in registers: f32 for bf16/f16/f32 (a 16-bit value
//! is exact in f32; after every bf16/f16 op the f32 result is rounded to the dtype, so the
//! register always holds a representable value), u32 for i32, pred for bool.
//!
//! Row reductions follow the [`crate::schedule::reduction_order`] signature exactly.

mod matmul;
mod mma;

use crate::fuse::row_shape;
use crate::target::Target;
use std::collections::HashMap;
use tessel_ir::graph::{
    BinaryOp, Fusion, Graph, GroupKind, Op as GOp, ReduceOp, Schedules, TileConfig, UnaryOp,
};
use tessel_ir::kernel::{
    BufferDecl, BufferRole, Builder, FCmp, ICmp, Kernel, Launch, LaunchArg, MathFn, Op, Operand,
    Param, ParamKind, Program, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{BufferId, DType, Group, Reg, Shape, Value};

/// Why a group could not be lowered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LowerError {
    #[error("{what} is not supported yet (value {value})")]
    Unsupported { what: String, value: Value },
    #[error("tensor {value} has {numel} elements; kernels index with 32 bits (at most 2^32 - 1)")]
    TooLarge { value: Value, numel: u64 },
    #[error("group {0} has no schedule")]
    NoSchedule(Group),
}

/// Runs the pass.
pub fn run(
    g: &Graph,
    fusion: &Fusion,
    schedules: &Schedules,
    target: &Target,
) -> Result<Program, LowerError> {
    run_with_buffers(g, fusion, schedules, target).map(|l| l.program)
}

/// The result of [`run_with_buffers`].
pub struct Lowered {
    pub program: Program,
    /// The buffer of every materialised value (step inputs and group outputs).
    pub buffer_of: HashMap<Value, BufferId>,
    /// The group each kernel computes, by kernel index (a split-K group has two kernels).
    pub group_of_kernel: Vec<Group>,
}

/// [`run`], also returning the buffer of every materialised value and the group of every
/// kernel, for tools that address a kernel's operands (e.g. the cuBLAS baseline).
pub fn run_with_buffers(
    g: &Graph,
    fusion: &Fusion,
    schedules: &Schedules,
    target: &Target,
) -> Result<Lowered, LowerError> {
    let mut group_of_kernel = Vec::new();
    let mut p = Program {
        name: g.name.clone(),
        ..Default::default()
    };
    let mut buf_of: HashMap<Value, BufferId> = HashMap::new();
    for (i, (name, v)) in g.inputs.iter().enumerate() {
        let b = p.buffers.push(BufferDecl {
            name: name.clone(),
            ty: g.ty(*v).clone(),
            role: BufferRole::Input(i as u32),
        });
        buf_of.insert(*v, b);
        p.inputs.push((name.clone(), b));
    }
    let outputs: HashMap<Value, &str> = g.outputs.iter().map(|(n, v)| (*v, n.as_str())).collect();
    for (grp, data) in fusion.groups.iter() {
        for &o in &data.outputs {
            let numel = g.ty(o).shape.numel();
            if numel >= u32::MAX as u64 {
                return Err(LowerError::TooLarge { value: o, numel });
            }
            let (name, role) = match outputs.get(&o) {
                Some(n) => (n.to_string(), BufferRole::Output),
                None => (format!("t{}", o.as_u32()), BufferRole::Temp),
            };
            let b = p.buffers.push(BufferDecl {
                name,
                ty: g.ty(o).clone(),
                role,
            });
            buf_of.insert(o, b);
        }
        let sched = schedules[grp].as_ref().ok_or(LowerError::NoSchedule(grp))?;
        let name = format!("{}_{}", sanitize(&g.name), grp.as_u32());
        let split = sched.tile.split_k();
        let parts = if data.kind == GroupKind::Matmul && split > 1 {
            // Split-K: the partial products go to an f32 scratch buffer [split, ..mm shape],
            // then a second kernel sums them in range order and runs the epilogue.
            let mm = data.reductions[0];
            let mut shape = vec![split as u64];
            shape.extend(&g.ty(mm).shape.0);
            let numel: u64 = shape.iter().product();
            if numel >= u32::MAX as u64 {
                return Err(LowerError::TooLarge { value: mm, numel });
            }
            let scratch = p.buffers.push(BufferDecl {
                name: format!("t{}_split_k", mm.as_u32()),
                ty: tessel_ir::TensorType {
                    dtype: DType::F32,
                    shape: Shape(shape),
                },
                role: BufferRole::Temp,
            });
            vec![
                (Part::Partials { scratch, split }, format!("{name}_split")),
                (Part::SumPartials { scratch, split }, format!("{name}_sum")),
            ]
        } else {
            vec![(Part::Whole, name)]
        };
        for (part, name) in parts {
            let (kernel, args) =
                lower_group(g, fusion, (grp, &sched.tile), name, &buf_of, part, target)?;
            let k = p.kernels.push(kernel);
            p.launches.push(Launch { kernel: k, args });
            group_of_kernel.push(grp);
        }
    }
    p.outputs = g
        .outputs
        .iter()
        .map(|(n, v)| (n.clone(), buf_of[v]))
        .collect();
    Ok(Lowered {
        program: p,
        buffer_of: buf_of,
        group_of_kernel,
    })
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// One component of an index: a constant or a `U32` register.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Ix {
    C(u64),
    R(Reg),
}

/// The register class holding values of a dtype.
fn class(dt: DType) -> RegType {
    match dt {
        DType::Bf16 | DType::F16 | DType::F32 => RegType::F32,
        DType::I32 => RegType::U32,
        DType::Bool => RegType::Pred,
    }
}

type Key = (Value, Vec<Ix>, u32);

struct Gen<'a> {
    g: &'a Graph,
    fusion: &'a Fusion,
    /// The values this kernel writes; they are computed here even though materialised.
    own: Vec<Value>,
    b: Builder<'a>,
    /// Base pointer (`U64`) of every materialised value read or written.
    ptr: HashMap<Value, Reg>,
    /// Values already computed, innermost scope last.
    memo: Vec<HashMap<Key, Vec<Operand>>>,
    /// Per-row results of the group's reductions.
    row_value: HashMap<Value, Operand>,
    /// Per-lane values standing in for a value (a matmul's accumulators in its epilogue).
    lane_value: HashMap<Value, Vec<Operand>>,
    /// Flat indices that were unflattened, so flattening the same index in the same shape
    /// gives the original register back instead of recomputing it.
    flat_of: HashMap<(Vec<Ix>, Vec<u64>), Ix>,
    /// The split-K scratch buffer of a split-K kernel.
    scratch: Option<Scratch>,
}

/// The f32 scratch buffer `[split, ..matmul shape]` of a split-K matmul.
struct Scratch {
    ptr: Reg,
    split: u32,
    /// In the partials kernel: the K range this CTA computes (set by the schedule's code).
    range: Option<Ix>,
    /// True in the partials kernel (which stores the matmul's value instead of the epilogue).
    writes: bool,
}

/// Which kernel of a group to generate: the whole group, or one of the two kernels of a
/// split-K matmul (see [`TileConfig::Simt`]).
#[derive(Copy, Clone, Debug)]
enum Part {
    Whole,
    /// The matmul's K ranges, each CTA's f32 result stored to `scratch[range, ..]`.
    Partials {
        scratch: BufferId,
        split: u32,
    },
    /// `scratch` summed over the ranges in order, then the epilogue.
    SumPartials {
        scratch: BufferId,
        split: u32,
    },
}

fn lower_group(
    g: &Graph,
    fusion: &Fusion,
    (grp, tile): (Group, &TileConfig),
    name: String,
    buf_of: &HashMap<Value, BufferId>,
    part: Part,
    target: &Target,
) -> Result<(Kernel, Vec<LaunchArg>), LowerError> {
    let data = &fusion.groups[grp];
    let out = data.outputs[0];
    let mut kernel = Kernel {
        name,
        ..Default::default()
    };
    // Parameters: every materialised value the kernel reads, then its outputs; the scratch
    // buffer of a split-K part comes last.
    let (reads, writes): (Vec<Value>, Vec<Value>) = match part {
        Part::Whole => (leaves(g, fusion, &data.outputs, None), data.outputs.clone()),
        Part::Partials { .. } => (leaves(g, fusion, &data.reductions, None), vec![]),
        Part::SumPartials { .. } => (
            leaves(g, fusion, &data.outputs, Some(data.reductions[0])),
            data.outputs.clone(),
        ),
    };
    let mut args = Vec::new();
    let mut params: Vec<Value> = Vec::new();
    for &v in reads.iter().chain(writes.iter()) {
        let w = writes.contains(&v);
        kernel.params.push(Param {
            name: format!("{}{}", if w { "out" } else { "in" }, params.len()),
            kind: ParamKind::Ptr {
                dtype: g.ty(v).dtype,
                writes: w,
            },
        });
        args.push(LaunchArg::Buffer(buf_of[&v]));
        params.push(v);
    }
    let scratch = match part {
        Part::Whole => None,
        Part::Partials { scratch, split } | Part::SumPartials { scratch, split } => {
            kernel.params.push(Param {
                name: format!("scratch{}", params.len()),
                kind: ParamKind::Ptr {
                    dtype: DType::F32,
                    writes: matches!(part, Part::Partials { .. }),
                },
            });
            args.push(LaunchArg::Buffer(scratch));
            Some(split)
        }
    };
    let mut gen = Gen {
        g,
        fusion,
        own: data.outputs.clone(),
        b: Builder::new(&mut kernel),
        ptr: HashMap::new(),
        memo: vec![HashMap::new()],
        row_value: HashMap::new(),
        lane_value: HashMap::new(),
        flat_of: HashMap::new(),
        scratch: None,
    };
    for (i, &v) in params.iter().enumerate() {
        let r = gen.b.op(RegType::U64, Op::Param(i as u32), &[]);
        gen.ptr.insert(v, r);
    }
    if let Some(split) = scratch {
        let r = gen.b.op(RegType::U64, Op::Param(params.len() as u32), &[]);
        gen.scratch = Some(Scratch {
            ptr: r,
            split,
            range: None,
            writes: matches!(part, Part::Partials { .. }),
        });
    }
    if let Part::SumPartials { split, .. } = part {
        let mm = data.reductions[0];
        let threads = 256;
        let ctas = gen.sum_partials(out, mm, split, threads)?;
        gen.b.finish();
        kernel.block = [threads, 1, 1];
        kernel.grid = [ctas, 1, 1];
        kernel.schedule = format!(
            "split-K sum of {tile}: each output element adds its {split} range results in range order into an f32 accumulator starting at 0, then the epilogue"
        );
        return Ok((kernel, args));
    }
    let (block, grid, schedule) = match (data.kind, tile) {
        (GroupKind::Elementwise, &TileConfig::Elementwise { threads, vector }) => {
            let ctas = gen.elementwise(&data.outputs, threads, vector)?;
            (
                threads,
                [ctas, 1, 1],
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            GroupKind::Matmul,
            &TileConfig::Gemv {
                warps,
                vector,
                columns,
            },
        ) => {
            let grid = gen.gemv(out, data.reductions[0], (warps, vector, columns))?;
            (
                32 * warps,
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            GroupKind::Matmul,
            &TileConfig::Simt {
                bm,
                bn,
                bk,
                tm,
                tn,
                split_k,
            },
        ) => {
            let grid = gen.simt(out, data.reductions[0], (bm, bn, bk, tm, tn, split_k))?;
            (
                (bm / tm) * (bn / tn),
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (GroupKind::Matmul, &TileConfig::Mma { .. }) => {
            let grid = gen.mma(out, data.reductions[0], tile)?;
            (
                tile.threads_per_cta(),
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (GroupKind::Matmul, &TileConfig::GemvMma { warps, unroll }) => {
            let grid = gen.gemv_mma(out, data.reductions[0], warps, unroll)?;
            (
                32 * warps,
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            GroupKind::RowReduction,
            &TileConfig::RowReduction {
                threads_per_row,
                rows_per_cta,
                vector,
            },
        ) => {
            let rows = row_shape(g, out);
            let ctas =
                gen.row_reduction(out, &data.reductions, threads_per_row, rows_per_cta, vector)?;
            (
                threads_per_row * rows_per_cta,
                [ctas, 1, 1],
                format!(
                    "{tile}; {}",
                    crate::schedule::reduction_order(tile, rows.last())
                ),
            )
        }
        _ => {
            return Err(LowerError::Unsupported {
                what: format!("tile {tile} for a {:?} group", data.kind),
                value: out,
            })
        }
    };
    gen.b.finish();
    kernel.block = [block, 1, 1];
    kernel.grid = grid;
    kernel.schedule = schedule;
    let sixteen_bit = |v: Value| matches!(g.ty(v).dtype, DType::Bf16 | DType::F16);
    if matches!(tile, TileConfig::Mma { .. }) && sixteen_bit(data.reductions[0]) {
        // Two CTAs per SM, so one's mma overlaps the other's barrier and copies: registers
        // capped at 65536 / (2 · threads) when the shared memory allows two (227 KiB). Not
        // for TF32 tiles, whose transposed operands load fragments element by element and
        // spill under the cap.
        let smem: u32 = kernel.shared.values().map(|d| d.bytes).sum();
        if 2 * smem <= target.max_shared_per_cta {
            kernel.min_ctas_per_sm = 2;
        }
    }
    if matches!(tile, TileConfig::GemvMma { .. }) {
        // Every CTA of the grid resident at once (the schedule sized the grid and `unroll`
        // for it): ptxas otherwise aims at full occupancy (32 registers for 64 threads) and
        // interleaves the loads with the mma, leaving one or two loads in flight per warp.
        kernel.min_ctas_per_sm = kernel.grid[0].div_ceil(target.sm_count).max(1);
    }
    Ok((kernel, args))
}

/// Materialised values read by the kernel writing `outputs`, in value order; the walk does
/// not go past `stop` (a split-K matmul, whose value the kernel reads from scratch). A
/// matmul reads a transposed operand in place, from the tensor under its permute, even
/// when the permute is materialised too (a step output): both are listed then.
fn leaves(g: &Graph, fusion: &Fusion, outputs: &[Value], stop: Option<Value>) -> Vec<Value> {
    let mut seen = std::collections::BTreeSet::new();
    let mut found = std::collections::BTreeSet::new();
    let mut stack: Vec<Value> = outputs.to_vec();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || Some(v) == stop {
            continue;
        }
        if !outputs.contains(&v) && fusion.is_materialized(g, v) {
            found.insert(v);
            continue;
        }
        if let GOp::MatMul { lhs, rhs } = g.ops[v] {
            for x in [lhs, rhs] {
                if let GOp::Permute { arg, .. } = g.ops[x] {
                    stack.push(arg);
                }
            }
        }
        stack.extend(g.ops[v].args());
    }
    found.into_iter().collect()
}

impl Gen<'_> {
    fn imm_u(x: u64) -> Operand {
        Operand::U32(x as u32)
    }

    // ---- integer index arithmetic, folding constants ----

    fn ix_op(&self, i: Ix) -> Operand {
        match i {
            Ix::C(c) => Self::imm_u(c),
            Ix::R(r) => Operand::Reg(r),
        }
    }

    fn iadd(&mut self, a: Ix, b: Ix) -> Ix {
        match (a, b) {
            (Ix::C(x), Ix::C(y)) => Ix::C(x + y),
            (x, Ix::C(0)) | (Ix::C(0), x) => x,
            _ => {
                let (x, y) = (self.ix_op(a), self.ix_op(b));
                Ix::R(self.b.op(RegType::U32, Op::IAdd, &[x, y]))
            }
        }
    }

    fn isub_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x - c),
            _ if c == 0 => a,
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::ISub, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    fn imul_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x * c),
            _ if c == 1 => a,
            _ if c == 0 => Ix::C(0),
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::IMulLo, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    fn idiv_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x / c),
            _ if c == 1 => a,
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::UDiv, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    fn irem_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x % c),
            _ if c == 1 => Ix::C(0),
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::URem, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    /// Row-major flat index of `idx` in `shape`.
    fn flatten(&mut self, idx: &[Ix], shape: &Shape) -> Ix {
        if let Some(&f) = self.flat_of.get(&(idx.to_vec(), shape.0.clone())) {
            return f;
        }
        let strides = shape.strides();
        let mut acc = Ix::C(0);
        for (i, &x) in idx.iter().enumerate() {
            let t = self.imul_c(x, strides[i]);
            acc = self.iadd(acc, t);
        }
        acc
    }

    /// Inverse of [`Gen::flatten`].
    fn unflatten(&mut self, flat: Ix, shape: &Shape) -> Vec<Ix> {
        let mut idx = vec![Ix::C(0); shape.rank()];
        let mut rest = flat;
        for d in (0..shape.rank()).rev() {
            let n = shape.0[d];
            if d == 0 {
                idx[d] = rest;
            } else {
                idx[d] = self.irem_c(rest, n);
                rest = self.idiv_c(rest, n);
            }
        }
        self.flat_of.insert((idx.clone(), shape.0.clone()), flat);
        idx
    }

    // ---- scopes ----

    fn open(&mut self) {
        self.b.open();
        self.memo.push(HashMap::new());
    }

    fn close(&mut self) -> Vec<Stmt> {
        self.memo.pop();
        self.b.close()
    }

    /// Closes the innermost scope as the body of `if cond { .. }`.
    fn close_if(&mut self, cond: Reg) {
        let then_body = self.close();
        self.b.push(Stmt::If {
            cond,
            then_body,
            else_body: vec![],
        });
    }

    /// Closes the innermost scope as the body of `for var = start; var < end; var += step`.
    fn close_for(&mut self, var: Reg, start: Operand, end: Operand, step: Operand) {
        let body = self.close();
        self.b.push(Stmt::For {
            var,
            start,
            end,
            step,
            body,
        });
    }

    fn lookup(&self, k: &Key) -> Option<Vec<Operand>> {
        self.memo.iter().rev().find_map(|m| m.get(k).cloned())
    }

    // ---- kernel skeletons ----

    /// Flat thread index `ctaid.x * threads + tid.x`.
    fn global_thread(&mut self, threads: u32) -> Reg {
        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let base = self.b.op(
            RegType::U32,
            Op::IMulLo,
            &[cta.into(), Operand::U32(threads)],
        );
        self.b
            .op(RegType::U32, Op::IAdd, &[base.into(), tid.into()])
    }

    /// Elementwise: thread `t` computes elements `t·v .. t·v + v` of the flattened output.
    /// Returns the grid size in CTAs.
    fn elementwise(&mut self, outs: &[Value], threads: u32, v: u32) -> Result<u32, LowerError> {
        let shape = self.g.ty(outs[0]).shape.clone();
        let numel = shape.numel();
        let gid = self.global_thread(threads);
        let first = self
            .b
            .op(RegType::U32, Op::IMulLo, &[gid.into(), Operand::U32(v)]);
        let inb = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[first.into(), Self::imm_u(numel)],
        );
        self.open();
        let idx = self.unflatten(Ix::R(first), &shape);
        for &out in outs {
            let vals = self.value(out, &idx, v)?;
            self.store(out, &idx, &vals)?;
        }
        self.close_if(inb);
        Ok(numel.div_ceil(v as u64 * threads as u64).max(1) as u32)
    }

    /// Row reduction per the signature in `schedule::reduction_order`. Returns the grid size.
    fn row_reduction(
        &mut self,
        out: Value,
        reductions: &[Value],
        tpr: u32,
        rows_per_cta: u32,
        v: u32,
    ) -> Result<u32, LowerError> {
        let rows_shape = row_shape(self.g, out);
        let rank = rows_shape.rank();
        let d = rows_shape.last();
        let nrows = rows_shape.numel() / d.max(1);
        let lead_shape = Shape(rows_shape.0[..rank - 1].to_vec());

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let row_in_cta = self.idiv_c(Ix::R(tid), tpr as u64);
        let lane = self.irem_c(Ix::R(tid), tpr as u64);
        let cta_row0 = self.imul_c(Ix::R(cta), rows_per_cta as u64);
        let row = self.iadd(cta_row0, row_in_cta);
        let row_op = self.ix_op(row);
        let valid = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[row_op, Self::imm_u(nrows)],
        );
        let lead = self.unflatten(row, &lead_shape);
        let first_chunk = self.imul_c(lane, v as u64);
        let first_op = self.ix_op(first_chunk);
        let stride = Operand::U32(tpr * v);

        for &r in reductions {
            let GOp::Reduce { op: rop, arg, .. } = self.g.ops[r] else {
                unreachable!("fuse lists only reductions");
            };
            let dt = self.g.ty(arg).dtype;
            let cls = class(dt);
            let identity = match (rop, cls) {
                (ReduceOp::Sum, RegType::F32) => Operand::f32(-0.0),
                (ReduceOp::Max, RegType::F32) => Operand::f32(f32::NEG_INFINITY),
                (ReduceOp::Min, RegType::F32) => Operand::f32(f32::INFINITY),
                (ReduceOp::Sum, RegType::U32) => Operand::U32(0),
                (ReduceOp::Max, RegType::U32) => Operand::U32(i32::MIN as u32),
                (ReduceOp::Min, RegType::U32) => Operand::U32(i32::MAX as u32),
                _ => {
                    return Err(LowerError::Unsupported {
                        what: format!("reduction {rop:?} of {dt}"),
                        value: r,
                    })
                }
            };
            let acc = self.b.kernel.new_reg(cls);
            self.b.assign(acc, Op::Mov, &[identity]);
            // Each thread folds its chunks in order.
            self.open();
            let c = self.b.kernel.new_reg(RegType::U32);
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::R(c));
            let vals = self.value(arg, &idx, v)?;
            for x in vals {
                self.combine(rop, cls, acc, x);
            }
            self.close_for(c, first_op, Self::imm_u(d), stride);
            self.close_if(valid);
            // Butterfly within the warp (or the sub-warp of the row).
            let mut m = tpr.min(32) / 2;
            while m >= 1 {
                let t = self.b.op(cls, Op::ShflBfly, &[acc.into(), Operand::U32(m)]);
                self.combine(rop, cls, acc, t.into());
                m /= 2;
            }
            if tpr > 32 {
                let wpr = tpr / 32;
                let smem = self.b.kernel.new_shared(4 * wpr * rows_per_cta, 4);
                let base = self.b.op(RegType::U32, Op::SharedAddr(smem), &[]);
                // Slot of this row's warp partials: (row_in_cta * wpr) * 4 bytes.
                let slot0 = self.imul_c(row_in_cta, 4 * wpr as u64);
                let slot0 = self.ix_op(slot0);
                let row_base = self.b.op(RegType::U32, Op::IAdd, &[base.into(), slot0]);
                let warp = self.idiv_c(lane, 32);
                let woff = self.imul_c(warp, 4);
                let woff = self.ix_op(woff);
                let my_slot = self.b.op(RegType::U32, Op::IAdd, &[row_base.into(), woff]);
                let lane32 = self.irem_c(lane, 32);
                let lane32 = self.ix_op(lane32);
                let leader = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::Eq),
                    &[lane32, Operand::U32(0)],
                );
                self.b.open();
                self.b.push(Stmt::Store {
                    space: Space::Shared,
                    width: Width::B32,
                    addr: my_slot,
                    offset: 0,
                    values: vec![acc.into()],
                });
                let then_body = self.b.close();
                self.b.push(Stmt::If {
                    cond: leader,
                    then_body,
                    else_body: vec![],
                });
                self.b.push(Stmt::Barrier);
                self.b.push(Stmt::Load {
                    dsts: vec![acc],
                    space: Space::Shared,
                    width: Width::B32,
                    addr: row_base,
                    offset: 0,
                });
                for w in 1..wpr {
                    let t = self.b.kernel.new_reg(cls);
                    self.b.push(Stmt::Load {
                        dsts: vec![t],
                        space: Space::Shared,
                        width: Width::B32,
                        addr: row_base,
                        offset: (4 * w) as i32,
                    });
                    self.combine(rop, cls, acc, t.into());
                }
            }
            let mut res: Operand = acc.into();
            let rdt = self.g.ty(r).dtype;
            if rdt != dt {
                res = self.convert(res, dt, rdt);
            }
            self.row_value.insert(r, res);
        }

        // Epilogue over the row (or one value per row for a materialised reduction).
        self.open();
        if self.g.ty(out).shape.last() == 1 && d != 1 {
            let lane_op = self.ix_op(lane);
            let leader = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[lane_op, Operand::U32(0)],
            );
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::C(0));
            let vals = self.value(out, &idx, 1)?;
            self.store(out, &idx, &vals)?;
            self.close_if(leader);
        } else {
            // Per-row values ([.., 1]) are computed once, before the loop.
            let mut idx0 = lead.clone();
            idx0.push(Ix::C(0));
            for pv in self.row_values_in_cone(out) {
                self.value(pv, &idx0, 1)?;
            }
            let c = self.b.kernel.new_reg(RegType::U32);
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::R(c));
            let vals = self.value(out, &idx, v)?;
            self.store(out, &idx, &vals)?;
            self.close_for(c, first_op, Self::imm_u(d), stride);
        }
        self.close_if(valid);
        Ok(nrows.div_ceil(rows_per_cta as u64).max(1) as u32)
    }

    /// `acc = acc ⊕ x` for a reduction: f32 add/max/min (NaN-propagating), i32 wrapping add
    /// or signed max/min.
    fn combine(&mut self, rop: ReduceOp, cls: RegType, acc: Reg, x: Operand) {
        match (rop, cls) {
            (ReduceOp::Sum, RegType::F32) => self.b.assign(acc, Op::FAdd, &[acc.into(), x]),
            (ReduceOp::Max, RegType::F32) => self.b.assign(acc, Op::FMax, &[acc.into(), x]),
            (ReduceOp::Min, RegType::F32) => self.b.assign(acc, Op::FMin, &[acc.into(), x]),
            (ReduceOp::Sum, _) => self.b.assign(acc, Op::IAdd, &[acc.into(), x]),
            (op, _) => {
                let lt = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[acc.into(), x]);
                // max keeps x when acc < x; min keeps acc when acc < x.
                let (a, b) = if op == ReduceOp::Max {
                    (x, acc.into())
                } else {
                    (acc.into(), x)
                };
                self.b.assign(acc, Op::Select, &[lt.into(), a, b]);
            }
        }
    }

    /// Values of shape [.., 1] computed inside this kernel from its reductions, in order.
    fn row_values_in_cone(&self, out: Value) -> Vec<Value> {
        let rows = row_shape(self.g, out);
        let mut per_row = rows.0.clone();
        if let Some(l) = per_row.last_mut() {
            *l = 1;
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![out];
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || (v != out && self.is_leaf(v)) {
                continue;
            }
            stack.extend(self.g.ops[v].args());
        }
        seen.into_iter()
            .filter(|&v| {
                self.g.ty(v).shape.0 == per_row
                    && !self.is_leaf(v)
                    && !matches!(self.g.ops[v], GOp::Const { .. })
            })
            .collect()
    }

    fn is_leaf(&self, v: Value) -> bool {
        !self.own.contains(&v) && self.fusion.is_materialized(self.g, v)
    }

    // ---- values ----

    /// `lanes` values of `v` at `idx`, `idx`, ..., with the last index advanced by 0..lanes.
    fn value(&mut self, v: Value, idx: &[Ix], lanes: u32) -> Result<Vec<Operand>, LowerError> {
        let key = (v, idx.to_vec(), lanes);
        if let Some(x) = self.lookup(&key) {
            return Ok(x);
        }
        let r = self.value_uncached(v, idx, lanes)?;
        if let Some(m) = self.memo.last_mut() {
            m.insert(key, r.clone());
        }
        Ok(r)
    }

    /// One index per lane (the fallback where lanes cannot stay together).
    fn per_lane(&mut self, v: Value, idx: &[Ix], lanes: u32) -> Result<Vec<Operand>, LowerError> {
        let mut out = Vec::with_capacity(lanes as usize);
        for j in 0..lanes {
            let mut li = idx.to_vec();
            if let Some(l) = li.last_mut() {
                *l = self.iadd(*l, Ix::C(j as u64));
            }
            out.extend(self.value(v, &li, 1)?);
        }
        Ok(out)
    }

    fn value_uncached(
        &mut self,
        v: Value,
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        if let Some(xs) = self.lane_value.get(&v) {
            if xs.len() == lanes as usize {
                return Ok(xs.clone());
            }
            return Err(LowerError::Unsupported {
                what: format!("{lanes} lanes of a value held for {}", xs.len()),
                value: v,
            });
        }
        if let Some(&x) = self.row_value.get(&v) {
            return Ok(vec![x; lanes as usize]);
        }
        if self.is_leaf(v) {
            return self.load(v, idx, lanes);
        }
        let g = self.g;
        let ty = g.ty(v).clone();
        let dt = ty.dtype;
        let rank = ty.shape.rank();
        match &g.ops[v] {
            GOp::Input { .. } => self.load(v, idx, lanes),
            GOp::Const { value } => {
                let x = self.constant(*value, dt);
                Ok(vec![x; lanes as usize])
            }
            GOp::Iota { axis } => {
                let a = *axis as usize;
                let mut out = Vec::new();
                for j in 0..lanes {
                    let i = if a + 1 == rank {
                        self.iadd(idx[a], Ix::C(j as u64))
                    } else {
                        idx[a]
                    };
                    let io = self.ix_op(i);
                    out.push(self.convert(io, DType::I32, dt));
                }
                Ok(out)
            }
            GOp::Unary { op, arg } => {
                let a = self.value(*arg, idx, lanes)?;
                a.into_iter().map(|x| self.unary(*op, dt, x, v)).collect()
            }
            GOp::Binary { op, lhs, rhs } => {
                let odt = g.ty(*lhs).dtype;
                let a = self.value(*lhs, idx, lanes)?;
                let b = self.value(*rhs, idx, lanes)?;
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| self.binary(*op, odt, x, y, v))
                    .collect()
            }
            GOp::Select {
                cond,
                on_true,
                on_false,
            } => {
                let c = self.value(*cond, idx, lanes)?;
                let t = self.value(*on_true, idx, lanes)?;
                let f = self.value(*on_false, idx, lanes)?;
                let cls = class(dt);
                Ok((0..lanes as usize)
                    .map(|j| self.b.op(cls, Op::Select, &[c[j], t[j], f[j]]).into())
                    .collect())
            }
            GOp::Cast { arg } => {
                let from = g.ty(*arg).dtype;
                let a = self.value(*arg, idx, lanes)?;
                Ok(a.into_iter().map(|x| self.convert(x, from, dt)).collect())
            }
            GOp::Broadcast { arg } => {
                let sa = g.ty(*arg).shape.clone();
                let ai: Vec<Ix> = idx
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| if sa.0[i] == 1 { Ix::C(0) } else { x })
                    .collect();
                if lanes > 1 && sa.last() == 1 && ty.shape.last() != 1 {
                    let x = self.value(*arg, &ai, 1)?;
                    Ok(vec![x[0]; lanes as usize])
                } else {
                    self.value(*arg, &ai, lanes)
                }
            }
            GOp::Reshape { arg } => {
                let sa = g.ty(*arg).shape.clone();
                let squeeze =
                    |s: &Shape| s.0.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
                if squeeze(&sa) == squeeze(&ty.shape) {
                    // Only size-1 dims differ: map the other dims in order.
                    let src: Vec<Ix> = idx
                        .iter()
                        .zip(&ty.shape.0)
                        .filter(|(_, &d)| d != 1)
                        .map(|(&i, _)| i)
                        .collect();
                    let mut it = src.into_iter();
                    let ai: Vec<Ix> =
                        sa.0.iter()
                            .map(|&d| {
                                if d == 1 {
                                    Ix::C(0)
                                } else {
                                    it.next().unwrap_or(Ix::C(0))
                                }
                            })
                            .collect();
                    let keeps_lanes = ty.shape.last() != 1 && sa.last() == ty.shape.last();
                    if lanes == 1 || keeps_lanes {
                        return self.value(*arg, &ai, lanes);
                    }
                    return self.per_lane(v, idx, lanes);
                }
                if lanes > 1
                    && (ty.shape.last() % lanes as u64 != 0 || sa.last() % lanes as u64 != 0)
                {
                    return self.per_lane(v, idx, lanes);
                }
                let flat = self.flatten(idx, &ty.shape);
                let ai = self.unflatten(flat, &sa);
                self.value(*arg, &ai, lanes)
            }
            GOp::Permute { arg, perm } => {
                if lanes > 1 && perm.last().map(|&p| p as usize + 1) != Some(rank) {
                    return self.per_lane(v, idx, lanes);
                }
                let mut ai = vec![Ix::C(0); rank];
                for (i, &p) in perm.iter().enumerate() {
                    ai[p as usize] = idx[i];
                }
                self.value(*arg, &ai, lanes)
            }
            GOp::Slice { arg, axis, start } => {
                let a = *axis as usize;
                if lanes > 1 && a + 1 == rank && start % lanes as u64 != 0 {
                    return self.per_lane(v, idx, lanes);
                }
                let mut ai = idx.to_vec();
                ai[a] = self.iadd(idx[a], Ix::C(*start));
                self.value(*arg, &ai, lanes)
            }
            GOp::Concat { args, axis } => {
                let a = *axis as usize;
                let sizes: Vec<u64> = args.iter().map(|x| g.ty(*x).shape.0[a]).collect();
                if lanes > 1 && a + 1 == rank && sizes.iter().any(|s| s % lanes as u64 != 0) {
                    return self.per_lane(v, idx, lanes);
                }
                let args = args.clone();
                self.concat(&args, &sizes, a, idx, lanes, class(dt))
            }
            GOp::Reduce { .. } | GOp::Softmax { .. } | GOp::MatMul { .. } => {
                Err(LowerError::Unsupported {
                    what:
                        "a reduction outside a row-reduction kernel (fuse should have grouped it)"
                            .into(),
                    value: v,
                })
            }
        }
    }

    /// Concat: branch on the index along `axis` (statically when it is a constant).
    fn concat(
        &mut self,
        args: &[Value],
        sizes: &[u64],
        a: usize,
        idx: &[Ix],
        lanes: u32,
        cls: RegType,
    ) -> Result<Vec<Operand>, LowerError> {
        if let Ix::C(i) = idx[a] {
            let mut off = 0;
            for (k, &s) in sizes.iter().enumerate() {
                if i < off + s {
                    let mut ai = idx.to_vec();
                    ai[a] = Ix::C(i - off);
                    return self.value(args[k], &ai, lanes);
                }
                off += s;
            }
        }
        let res: Vec<Reg> = (0..lanes).map(|_| self.b.kernel.new_reg(cls)).collect();
        self.concat_from(args, sizes, 0, 0, a, idx, lanes, &res)?;
        Ok(res.into_iter().map(Operand::Reg).collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn concat_from(
        &mut self,
        args: &[Value],
        sizes: &[u64],
        k: usize,
        off: u64,
        a: usize,
        idx: &[Ix],
        lanes: u32,
        res: &[Reg],
    ) -> Result<(), LowerError> {
        let emit_part = |this: &mut Self| -> Result<(), LowerError> {
            let mut ai = idx.to_vec();
            ai[a] = this.isub_c(idx[a], off);
            let vals = this.value(args[k], &ai, lanes)?;
            for (r, x) in res.iter().zip(vals) {
                this.b.assign(*r, Op::Mov, &[x]);
            }
            Ok(())
        };
        if k + 1 == args.len() {
            return emit_part(self);
        }
        let ia = self.ix_op(idx[a]);
        let c = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[ia, Self::imm_u(off + sizes[k])],
        );
        self.open();
        emit_part(self)?;
        let then_body = self.close();
        self.open();
        self.concat_from(args, sizes, k + 1, off + sizes[k], a, idx, lanes, res)?;
        let else_body = self.close();
        self.b.push(Stmt::If {
            cond: c,
            then_body,
            else_body,
        });
        Ok(())
    }

    // ---- memory ----

    /// Byte address of element `idx` of materialised value `v`.
    fn address(&mut self, v: Value, idx: &[Ix]) -> Reg {
        let ty = self.g.ty(v).clone();
        let flat = self.flatten(idx, &ty.shape);
        let fo = self.ix_op(flat);
        let bytes = self.b.op(
            RegType::U64,
            Op::MulWideU32,
            &[fo, Operand::U32(ty.dtype.size_bytes() as u32)],
        );
        let base = self.ptr[&v];
        self.b
            .op(RegType::U64, Op::AddU64, &[base.into(), bytes.into()])
    }

    /// Accesses of at most 16 bytes covering `lanes` elements of `dt`: (width, elements).
    fn accesses(dt: DType, lanes: u32) -> Vec<(Width, u32)> {
        let esz = dt.size_bytes() as u32;
        if dt == DType::Bool || lanes == 1 {
            return vec![
                (
                    match esz {
                        1 => Width::B8,
                        2 => Width::B16,
                        _ => Width::B32,
                    },
                    1,
                );
                lanes as usize
            ];
        }
        let total = esz * lanes;
        let mut out = Vec::new();
        let mut left = total;
        while left > 0 {
            let (w, b) = match left {
                l if l >= 16 => (Width::V4, 16),
                l if l >= 8 => (Width::V2, 8),
                l if l >= 4 => (Width::B32, 4),
                _ => (Width::B16, 2),
            };
            out.push((w, b / esz));
            left -= b;
        }
        out
    }

    fn load(&mut self, v: Value, idx: &[Ix], lanes: u32) -> Result<Vec<Operand>, LowerError> {
        let dt = self.g.ty(v).dtype;
        // A vector access is aligned only if the tensor's rows are a multiple of the vector
        // (the chunk's first element is then at a multiple of `lanes`, which every index
        // rewrite keeps); otherwise (e.g. `x[:, 0:4]` of an `[T, 9]` tensor) one load per lane.
        if lanes > 1 && self.g.ty(v).shape.last() % lanes as u64 != 0 {
            return self.per_lane(v, idx, lanes);
        }
        let addr = self.address(v, idx);
        let mut out = Vec::new();
        let mut byte = 0i32;
        for (w, _) in Self::accesses(dt, lanes) {
            let cls = if dt == DType::F32 && matches!(w, Width::B32 | Width::V2 | Width::V4) {
                RegType::F32
            } else {
                RegType::U32
            };
            let dsts: Vec<Reg> = (0..w.regs()).map(|_| self.b.kernel.new_reg(cls)).collect();
            self.b.push(Stmt::Load {
                dsts: dsts.clone(),
                space: Space::Global,
                width: w,
                addr,
                offset: byte,
            });
            byte += w.bytes() as i32;
            for d in dsts {
                out.extend(self.unpack(d, dt, w));
            }
        }
        Ok(out)
    }

    /// The elements held in one loaded 32-bit (or narrower) register.
    fn unpack(&mut self, r: Reg, dt: DType, w: Width) -> Vec<Operand> {
        match dt {
            DType::F32 => vec![r.into()],
            DType::I32 => vec![r.into()],
            DType::Bool => {
                vec![self
                    .b
                    .op(
                        RegType::Pred,
                        Op::ICmp(ICmp::Ne),
                        &[r.into(), Operand::U32(0)],
                    )
                    .into()]
            }
            DType::Bf16 => {
                let lo = self
                    .b
                    .op(RegType::U32, Op::Shl, &[r.into(), Operand::U32(16)]);
                let lo = self.b.op(RegType::F32, Op::BitsToF32, &[lo.into()]);
                if w == Width::B16 {
                    return vec![lo.into()];
                }
                let hi = self.b.op(
                    RegType::U32,
                    Op::And,
                    &[r.into(), Operand::U32(0xffff_0000)],
                );
                let hi = self.b.op(RegType::F32, Op::BitsToF32, &[hi.into()]);
                vec![lo.into(), hi.into()]
            }
            DType::F16 => {
                let lo = self.b.op(RegType::F32, Op::F16ToF32, &[r.into()]);
                if w == Width::B16 {
                    return vec![lo.into()];
                }
                let h = self
                    .b
                    .op(RegType::U32, Op::ShrU, &[r.into(), Operand::U32(16)]);
                let hi = self.b.op(RegType::F32, Op::F16ToF32, &[h.into()]);
                vec![lo.into(), hi.into()]
            }
        }
    }

    fn store(&mut self, v: Value, idx: &[Ix], vals: &[Operand]) -> Result<(), LowerError> {
        let dt = self.g.ty(v).dtype;
        let lanes = vals.len() as u32;
        let addr = self.address(v, idx);
        let mut byte = 0i32;
        let mut k = 0usize;
        for (w, n) in Self::accesses(dt, lanes) {
            let n = if dt == DType::Bool || lanes == 1 {
                1
            } else {
                n
            } as usize;
            let elems = &vals[k..k + n];
            k += n;
            let words: Vec<Operand> = match dt {
                DType::F32 | DType::I32 => elems.to_vec(),
                DType::Bool => vec![self
                    .b
                    .op(
                        RegType::U32,
                        Op::Select,
                        &[elems[0], Operand::U32(1), Operand::U32(0)],
                    )
                    .into()],
                DType::Bf16 | DType::F16 => {
                    let pack = if dt == DType::Bf16 {
                        Op::PackBf16x2
                    } else {
                        Op::PackF16x2
                    };
                    if n == 1 {
                        vec![self
                            .b
                            .op(RegType::U32, pack, &[Operand::f32(0.0), elems[0]])
                            .into()]
                    } else {
                        elems
                            .chunks(2)
                            .map(|p| self.b.op(RegType::U32, pack, &[p[1], p[0]]).into())
                            .collect()
                    }
                }
            };
            self.b.push(Stmt::Store {
                space: Space::Global,
                width: w,
                addr,
                offset: byte,
                values: words,
            });
            byte += w.bytes() as i32;
        }
        Ok(())
    }

    // ---- scalar arithmetic ----

    fn constant(&mut self, value: f64, dt: DType) -> Operand {
        match dt {
            DType::Bf16 | DType::F16 | DType::F32 => Operand::f32(value as f32),
            DType::I32 => Operand::U32(value as i64 as i32 as u32),
            DType::Bool => self
                .b
                .op(
                    RegType::Pred,
                    Op::ICmp(if value != 0.0 { ICmp::Eq } else { ICmp::Ne }),
                    &[Operand::U32(0), Operand::U32(0)],
                )
                .into(),
        }
    }

    /// Rounds an f32 register to `dt` (no-op for f32): RNE through the packed conversion.
    fn round(&mut self, x: Operand, dt: DType) -> Operand {
        match dt {
            DType::Bf16 => {
                let p = self
                    .b
                    .op(RegType::U32, Op::PackBf16x2, &[Operand::f32(0.0), x]);
                let s = self
                    .b
                    .op(RegType::U32, Op::Shl, &[p.into(), Operand::U32(16)]);
                self.b.op(RegType::F32, Op::BitsToF32, &[s.into()]).into()
            }
            DType::F16 => {
                let p = self
                    .b
                    .op(RegType::U32, Op::PackF16x2, &[Operand::f32(0.0), x]);
                self.b.op(RegType::F32, Op::F16ToF32, &[p.into()]).into()
            }
            _ => x,
        }
    }

    /// Converts a register value from `from` to `to` (graph `Cast` semantics).
    fn convert(&mut self, x: Operand, from: DType, to: DType) -> Operand {
        use DType::*;
        if from == to {
            return x;
        }
        match (from, to) {
            (Bf16 | F16 | F32, Bf16 | F16 | F32) => self.round(x, to),
            (I32, _) if to.is_float() => {
                let f = self.b.op(RegType::F32, Op::CvtF32S32, &[x]);
                self.round(f.into(), to)
            }
            (Bf16 | F16 | F32, I32) => self.b.op(RegType::U32, Op::CvtRziS32F32, &[x]).into(),
            (Bool, I32) => self
                .b
                .op(
                    RegType::U32,
                    Op::Select,
                    &[x, Operand::U32(1), Operand::U32(0)],
                )
                .into(),
            (Bool, _) => self
                .b
                .op(
                    RegType::F32,
                    Op::Select,
                    &[x, Operand::f32(1.0), Operand::f32(0.0)],
                )
                .into(),
            (I32, Bool) => self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::Ne), &[x, Operand::U32(0)])
                .into(),
            (_, Bool) => self
                .b
                .op(RegType::Pred, Op::FCmp(FCmp::Ne), &[x, Operand::f32(0.0)])
                .into(),
            _ => x,
        }
    }

    fn unary(
        &mut self,
        op: UnaryOp,
        dt: DType,
        x: Operand,
        v: Value,
    ) -> Result<Operand, LowerError> {
        let f = |m| Op::Math(m);
        let r = match (op, class(dt)) {
            (UnaryOp::Neg, RegType::F32) => self.b.op(RegType::F32, Op::FNeg, &[x]),
            (UnaryOp::Neg, RegType::U32) => {
                self.b.op(RegType::U32, Op::ISub, &[Operand::U32(0), x])
            }
            (UnaryOp::Abs, RegType::F32) => self.b.op(RegType::F32, Op::FAbs, &[x]),
            (UnaryOp::Abs, RegType::U32) => {
                let n = self.b.op(RegType::U32, Op::ISub, &[Operand::U32(0), x]);
                let neg = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[x, Operand::U32(0)]);
                self.b
                    .op(RegType::U32, Op::Select, &[neg.into(), n.into(), x])
            }
            (UnaryOp::Not, RegType::Pred) => self.b.op(RegType::Pred, Op::PNot, &[x]),
            (UnaryOp::Sqrt, RegType::F32) => self.b.op(RegType::F32, Op::FSqrt, &[x]),
            (UnaryOp::Exp, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Exp), &[x]),
            (UnaryOp::Log, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Log), &[x]),
            (UnaryOp::Rsqrt, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Rsqrt), &[x]),
            (UnaryOp::Sin, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Sin), &[x]),
            (UnaryOp::Cos, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Cos), &[x]),
            (UnaryOp::Tanh, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Tanh), &[x]),
            (UnaryOp::Sigmoid, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Sigmoid), &[x]),
            (UnaryOp::Silu, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Silu), &[x]),
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("{op:?} on {dt}"),
                    value: v,
                })
            }
        };
        Ok(self.round(r.into(), dt))
    }

    /// `op(a, b)` for operands of dtype `dt`; the result is rounded to `dt` (comparisons give
    /// a predicate).
    fn binary(
        &mut self,
        op: BinaryOp,
        dt: DType,
        a: Operand,
        b: Operand,
        v: Value,
    ) -> Result<Operand, LowerError> {
        use BinaryOp::*;
        let cls = class(dt);
        let cmp_f = |o| Op::FCmp(o);
        let r: Reg = match (op, cls) {
            (Add, RegType::F32) => self.b.op(cls, Op::FAdd, &[a, b]),
            (Sub, RegType::F32) => self.b.op(cls, Op::FSub, &[a, b]),
            (Mul, RegType::F32) => self.b.op(cls, Op::FMul, &[a, b]),
            (Div, RegType::F32) => self.b.op(cls, Op::FDiv, &[a, b]),
            (Min, RegType::F32) => self.b.op(cls, Op::FMin, &[a, b]),
            (Max, RegType::F32) => self.b.op(cls, Op::FMax, &[a, b]),
            (Pow, RegType::F32) => self.b.op(cls, Op::Math(MathFn::Pow), &[a, b]),
            (Add, RegType::U32) => self.b.op(cls, Op::IAdd, &[a, b]),
            (Sub, RegType::U32) => self.b.op(cls, Op::ISub, &[a, b]),
            (Mul, RegType::U32) => self.b.op(cls, Op::IMulLo, &[a, b]),
            (Div | Rem, RegType::U32) => {
                // Truncating signed division from the unsigned one: |a| / |b|, negated when
                // the signs differ; the remainder takes the dividend's sign (C, PyTorch
                // `torch.fmod`). Division by zero faults in the executor and is undefined on
                // the GPU, as in CUDA C.
                let abs = |this: &mut Self, x: Operand| -> Operand {
                    let n = this.b.op(cls, Op::ISub, &[Operand::U32(0), x]);
                    let neg = this
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[x, Operand::U32(0)]);
                    this.b
                        .op(cls, Op::Select, &[neg.into(), n.into(), x])
                        .into()
                };
                let (ua, ub) = (abs(self, a), abs(self, b));
                // x / 0 is defined as 0 and x % 0 as x (so a = q·b + r still holds), the same
                // on the GPU, the executor and the oracle: the divisor 0 is replaced by 1 and
                // the quotient by 0.
                let zero = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[b, Operand::U32(0)]);
                let ub = self
                    .b
                    .op(cls, Op::Select, &[zero.into(), Operand::U32(1), ub])
                    .into();
                let uq = self.b.op(cls, Op::UDiv, &[ua, ub]);
                let uq = self
                    .b
                    .op(cls, Op::Select, &[zero.into(), Operand::U32(0), uq.into()]);
                let sx = self.b.op(cls, Op::Xor, &[a, b]);
                let neg = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtS),
                    &[sx.into(), Operand::U32(0)],
                );
                let nq = self.b.op(cls, Op::ISub, &[Operand::U32(0), uq.into()]);
                let q = self
                    .b
                    .op(cls, Op::Select, &[neg.into(), nq.into(), uq.into()]);
                if op == Div {
                    q
                } else {
                    let qb = self.b.op(cls, Op::IMulLo, &[q.into(), b]);
                    self.b.op(cls, Op::ISub, &[a, qb.into()])
                }
            }
            (Min | Max, RegType::U32) => {
                let lt = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtS), &[a, b]);
                let (x, y) = if op == Min { (a, b) } else { (b, a) };
                self.b.op(cls, Op::Select, &[lt.into(), x, y])
            }
            (Eq | Ne | Lt | Le | Gt | Ge, RegType::F32) => {
                let c = match op {
                    Eq => FCmp::Eq,
                    Ne => FCmp::Ne,
                    Lt => FCmp::Lt,
                    Le => FCmp::Le,
                    Gt => FCmp::Gt,
                    _ => FCmp::Ge,
                };
                return Ok(self.b.op(RegType::Pred, cmp_f(c), &[a, b]).into());
            }
            (Eq | Ne | Lt | Le | Gt | Ge, RegType::U32) => {
                let c = match op {
                    Eq => ICmp::Eq,
                    Ne => ICmp::Ne,
                    Lt => ICmp::LtS,
                    Le => ICmp::LeS,
                    Gt => ICmp::GtS,
                    _ => ICmp::GeS,
                };
                return Ok(self.b.op(RegType::Pred, Op::ICmp(c), &[a, b]).into());
            }
            (And, RegType::Pred) => self.b.op(cls, Op::PAnd, &[a, b]),
            (Or, RegType::Pred) => self.b.op(cls, Op::POr, &[a, b]),
            (Eq | Ne, RegType::Pred) => {
                // a == b  ⇔  !(a xor b); xor = (a | b) & !(a & b).
                let o = self.b.op(cls, Op::POr, &[a, b]);
                let n = self.b.op(cls, Op::PAnd, &[a, b]);
                let nn = self.b.op(cls, Op::PNot, &[n.into()]);
                let x = self.b.op(cls, Op::PAnd, &[o.into(), nn.into()]);
                if op == Ne {
                    x
                } else {
                    self.b.op(cls, Op::PNot, &[x.into()])
                }
            }
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("{op:?} on {dt}"),
                    value: v,
                })
            }
        };
        Ok(self.round(r.into(), dt))
    }
}
