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
//!
//! The module, by concern: this file drives (buffers, one kernel per group, dispatch on the
//! schedule); `index` (index arithmetic), `values` (the shape-op walk), `memory` (loads and
//! stores), `numerics` (dtype arithmetic) serve every schedule. One file per schedule:
//! `rows` (elementwise, row reduction), `gemv`, `simt`, `mma`, `gemv_mma`, `attention` (its
//! main loop; `attention_parts`: tile copies, key bounds, flash-decoding's merge kernel;
//! `attention_tma`: the warpgroup tile's TMA producer warpgroup),
//! `update` (an in-place update, over its rows only), `scan` (a cumsum); the pieces the
//! matmul schedules share: `matmul` (operands, CTA order, split-K), `epilogue`, `ring`
//! (shared-memory ring: `ring/layout.rs` the stage layout and swizzle, `ring/cp_async.rs`
//! the `cp.async` loader, `ring/source.rs` what a tile is read from), `fragments`
//! (tensor-core operand fragments); `wgmma` (the warpgroup main loop over the `cp.async`
//! ring), `wgmma_tma` (the warp-specialised tile: a TMA producer warpgroup, wgmma
//! consumer warpgroups) and `wgmma_pingpong` (its persistent form: CTAs walking the tiles,
//! the two consumer warpgroups taking them in turn).
//! A new schedule is a new file beside them and one arm in `lower_group`.

mod attention;
mod attention_bwd;
mod attention_parts;
mod attention_tma;
mod epilogue;
mod fragments;
mod gemv;
mod gemv_mma;
mod hoist;
mod index;
mod matmul;
mod memory;
mod mma;
mod numerics;
mod ring;
mod rows;
mod scan;
mod simt;
mod update;
mod values;
mod wgmma;
mod wgmma_pingpong;
mod wgmma_tma;

use crate::analysis::row_shape;
use std::collections::HashMap;
use tessel_ir::graph::{Fusion, Graph, GroupKind, GroupOps, Op as GOp, Schedules, TileConfig};
use tessel_ir::kernel::{
    BufferDecl, BufferRole, Builder, Kernel, Launch, LaunchArg, Op, Operand, Param, ParamKind,
    Program, RegType, Stmt,
};
use tessel_ir::{BufferId, DType, Group, Reg, Shape, Value};

/// Why a group could not be lowered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LowerError {
    #[error("{what} is not supported yet (value {value})")]
    Unsupported { what: String, value: Value },
    #[error(
        "tensor {value} has {numel} elements, and a kernel would store it or index it whole \
         with 32-bit offsets (at most 2^32 - 1 elements); only a fused attention's scores may \
         be larger (the `exact` profile fuses no attention)"
    )]
    TooLarge { value: Value, numel: u64 },
    #[error("group {0} has no schedule")]
    NoSchedule(Group),
}

/// Runs the pass. Every machine-dependent choice is in the schedules (`schedule` read the
/// [`crate::Target`]); lowering only emits them.
pub fn run(g: &Graph, fusion: &Fusion, schedules: &Schedules) -> Result<Program, LowerError> {
    run_with_buffers(g, fusion, schedules).map(|l| l.program)
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
) -> Result<Lowered, LowerError> {
    let mut group_of_kernel = Vec::new();
    let mut p = Program {
        name: g.name.clone(),
        ..Default::default()
    };
    let mut buf_of: HashMap<Value, BufferId> = HashMap::new();
    for (i, (name, v)) in g.inputs.iter().enumerate() {
        // An `inout` input's buffer is also the step output of its name, written in place.
        let role = if g.is_inout_input(*v) {
            BufferRole::InOut(i as u32)
        } else {
            BufferRole::Input(i as u32)
        };
        let b = p.buffers.push(BufferDecl {
            name: name.clone(),
            ty: g.ty(*v).clone(),
            role,
        });
        buf_of.insert(*v, b);
        p.inputs.push((name.clone(), b));
    }
    // A step output, by the value whose buffer holds it: its own, or its alias's base (rule
    // 11 of `fuse`), then named and typed as the output.
    let outputs: HashMap<Value, (&str, Value)> = g
        .outputs
        .iter()
        .map(|(n, v)| (fusion.alias[*v].expand().unwrap_or(*v), (n.as_str(), *v)))
        .collect();
    for (grp, data) in fusion.groups.iter() {
        for &o in &data.outputs {
            let numel = g.ty(o).shape.numel();
            if numel >= u32::MAX as u64 {
                return Err(LowerError::TooLarge { value: o, numel });
            }
            // An update lives in the buffer of the `inout` input it updates: no new buffer,
            // no copy.
            if let GOp::Update { .. } = g.ops[o] {
                let root = g.storage_root(o);
                let b = *buf_of.get(&root).ok_or_else(|| LowerError::Unsupported {
                    what: "an update of a value that is not an inout input".into(),
                    value: o,
                })?;
                buf_of.insert(o, b);
                continue;
            }
            let (name, role, ty) = match outputs.get(&o) {
                Some(&(n, out)) => (n.to_string(), BufferRole::Output, g.ty(out).clone()),
                None => (
                    format!("t{}", o.as_u32()),
                    BufferRole::Temp,
                    g.ty(o).clone(),
                ),
            };
            let b = p.buffers.push(BufferDecl { name, ty, role });
            buf_of.insert(o, b);
        }
        // An alias lives in its base's buffer (an input's, or an earlier group's output).
        for (v, base) in fusion.alias.iter() {
            if let Some(&b) = base.expand().and_then(|base| buf_of.get(&base)) {
                buf_of.entry(v).or_insert(b);
            }
        }
        let sched = schedules[grp].as_ref().ok_or(LowerError::NoSchedule(grp))?;
        let name = format!("{}_{}", sanitize(&g.name), grp.as_u32());
        let split = sched.tile.split_k();
        let parts = if let (
            &GroupOps::Attention {
                scores, attention, ..
            },
            &TileConfig::Attention { split, .. },
        ) = (&data.ops, &sched.tile)
        {
            if split == 0 {
                vec![(Part::Whole, name)]
            } else {
                // Flash-decoding: each key range's unnormalised O, maximum and sum go to an
                // f32 scratch buffer [ranges, batch entries, rows, E + 2]; a second kernel
                // merges the ranges in order.
                let a = attention;
                let sh = crate::analysis::attention_shape(g, scores, a);
                let ranges = sh.n.div_ceil(split as u64);
                let outer = sh.batch.iter().product::<u64>() / sh.pack.max(1);
                let numel = ranges * outer * sh.m * sh.pack * (sh.e + 2);
                if numel >= u32::MAX as u64 {
                    return Err(LowerError::TooLarge { value: a, numel });
                }
                let scratch = p.buffers.push(BufferDecl {
                    name: format!("t{}_ranges", a.as_u32()),
                    ty: tessel_ir::TensorType {
                        dtype: DType::F32,
                        shape: Shape(vec![numel]),
                    },
                    role: BufferRole::Temp,
                });
                let split = ranges as u32;
                vec![
                    (Part::Partials { scratch, split }, format!("{name}_ranges")),
                    (
                        Part::SumPartials { scratch, split },
                        format!("{name}_merge"),
                    ),
                ]
            }
        } else if let (&GroupOps::Matmul { matmul: mm, .. }, true) = (&data.ops, split > 1) {
            // Split-K: the partial products go to an f32 scratch buffer [split, ..mm shape],
            // then a second kernel sums them in range order and runs the epilogue.
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
            let (kernel, args) = lower_group(g, fusion, (grp, &sched.tile), name, &buf_of, part)?;
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
    /// In an update kernel computing its rows' reductions (`fuse` rule 6): the column of
    /// the thread's first element in its row, and the lanes per row; a reduction reached at
    /// any index is computed there, over that row ([`Gen::chunk_reduction`]).
    chunk: Option<(Ix, u32)>,
    /// In a row epilogue (`fuse` rule 8): the CTA's tile of the matmul's accumulators in
    /// shared memory (f32, or rounded to its 16-bit dtype: [`Gen::staged_esz`]), which
    /// stands in for the matmul at any index inside the tile.
    staged: Option<StagedTile>,
    /// The program's `exp` as `MathFn::ExpF32` (within 1 ulp, about 25 operations) rather
    /// than `MathFn::Exp` (0.51 ulp, about 55): set by the fused attention backward, whose
    /// per-score cone evaluates softmax's `exp` in every sweep (docs/numerics.md,
    /// "The fused attention backward").
    exp_single: bool,
    /// The buffer of every materialised value: what a tensor map a kernel passes views.
    buffers: &'a HashMap<Value, BufferId>,
    /// The launch arguments of the parameters the schedule's code adds after the buffers'
    /// (a TMA kernel's tensor maps, [`LaunchArg::TensorMap`]), in parameter order.
    extra_args: Vec<LaunchArg>,
}

/// The staged epilogue's tile of matmul `mm`: element (`m0 + i`, `n0 + j`) of the
/// matmul's last two dims at byte `i · stride + esz · j` from `base`, an f32 or (`esz` 2)
/// the value rounded to the matmul's 16-bit dtype ([`Gen::staged_esz`]).
#[derive(Copy, Clone)]
struct StagedTile {
    mm: Value,
    base: Reg,
    /// Bytes between rows, and of one element ([`Gen::staged_esz`]).
    stride: u32,
    esz: u32,
    m0: Ix,
    n0: Ix,
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
) -> Result<(Kernel, Vec<LaunchArg>), LowerError> {
    let data = &fusion.groups[grp];
    let out = data.outputs[0];
    let mut kernel = Kernel {
        name,
        ..Default::default()
    };
    // Parameters: every materialised value the kernel reads, then its outputs; the scratch
    // buffer of a split-K part comes last.
    let attention = data.kind() == GroupKind::Attention;
    let (mut reads, writes): (Vec<Value>, Vec<Value>) = match part {
        Part::SumPartials { .. } if attention => (vec![], data.outputs.clone()),
        Part::Whole | Part::Partials { .. } if attention => {
            let writes = match part {
                Part::Whole => data.outputs.clone(),
                _ => vec![],
            };
            (leaves(g, fusion, &data.outputs, None), writes)
        }
        Part::Whole => (leaves(g, fusion, &data.outputs, None), data.outputs.clone()),
        Part::Partials { .. } => (leaves(g, fusion, &data.ops.listed(), None), vec![]),
        Part::SumPartials { .. } => (
            leaves(g, fusion, &data.outputs, data.ops.matmul()),
            data.outputs.clone(),
        ),
    };
    // The attention kernels (forward and backward) read their matmuls' operands from the
    // tensors under their views, even where a view is materialised too (a step output,
    // a slice that is also one: tests/programs/regressions/fuzz_5204_panic.tsl). (q
    // computed in the prologue has no buffer: its cone's leaves are among `reads` already.)
    if !matches!(part, Part::SumPartials { .. }) {
        for x in in_place_operands(g, &data.ops) {
            let b = crate::view::view_base(g, x);
            if !reads.contains(&b) && !data.outputs.contains(&b) && fusion.is_materialized(g, b) {
                reads.push(b);
            }
        }
    }
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
        staged: None,
        exp_single: false,
        chunk: None,
        flat_of: HashMap::new(),
        scratch: None,
        buffers: buf_of,
        extra_args: Vec::new(),
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
    if let (
        Part::SumPartials { split, .. },
        TileConfig::Attention { .. },
        &GroupOps::Attention {
            scores, attention, ..
        },
    ) = (part, tile, &data.ops)
    {
        let (threads, ctas) = gen.attention_merge(out, (scores, attention), split)?;
        gen.b.finish();
        kernel.block = [threads, 1, 1];
        kernel.grid = [ctas, 1, 1];
        kernel.schedule = format!(
            "merge of {tile}'s {split} key ranges: each output element takes the ranges' maxima, sums and O in range order; {}",
            crate::schedule::reduction_order(tile, 0)
        );
        return Ok((kernel, args));
    }
    if let (Part::SumPartials { split, .. }, Some(mm)) = (part, data.ops.matmul()) {
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
    let (block, grid, schedule) = match (&data.ops, tile) {
        (GroupOps::Elementwise, &TileConfig::Elementwise { threads, vector }) => {
            let ctas = gen.elementwise(&data.outputs, threads, vector)?;
            (
                threads,
                [ctas, 1, 1],
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            &GroupOps::Matmul { matmul, .. },
            &TileConfig::Gemv {
                warps,
                vector,
                columns,
                unroll,
            },
        ) => {
            let grid = gen.gemv(out, matmul, (warps, vector, columns, unroll))?;
            (
                32 * warps,
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            &GroupOps::Matmul { matmul, .. },
            &TileConfig::Simt {
                bm,
                bn,
                bk,
                tm,
                tn,
                split_k,
            },
        ) => {
            let grid = gen.simt(out, matmul, (bm, bn, bk, tm, tn, split_k))?;
            (
                (bm / tm) * (bn / tn),
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            GroupOps::Matmul {
                matmul,
                row_epilogue,
            },
            &TileConfig::Mma { .. },
        ) => {
            let grid = gen.mma(out, (*matmul, row_epilogue), tile)?;
            let mut order = format!("{tile}; {}", crate::schedule::reduction_order(tile, 0));
            if let Some(d) = crate::analysis::row_epilogue_rows(g, data) {
                order += &format!("; {}", crate::schedule::row_epilogue_order(d));
            }
            (tile.threads_per_cta(), grid, order)
        }
        (
            GroupOps::Attention {
                scores,
                attention,
                q_prologue,
            },
            &TileConfig::Attention { .. },
        ) => {
            let reds = (*scores, *attention);
            let stats = &data.outputs[1..];
            let grid = gen.attention((out, stats), reds, q_prologue, tile)?;
            let mut order = format!("{tile}; {}", crate::schedule::reduction_order(tile, 0));
            if crate::analysis::q_in_prologue(g, fusion, reds.0) {
                let d = crate::analysis::attention_shape(g, reds.0, reds.1).d;
                order += &format!("; {}", crate::schedule::prologue_order(d));
            }
            (tile.threads_per_cta(), grid, order)
        }
        (GroupOps::Update { row_reductions }, &TileConfig::Update { threads, vector }) => {
            let reduces = !row_reductions.is_empty();
            let ctas = gen.update(out, reduces, threads, vector)?;
            let order = match row_reductions.first() {
                None => format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
                Some(&r) => format!(
                    "{tile}; {}",
                    crate::schedule::update_rows_order(row_shape(g, r).last())
                ),
            };
            (threads, [ctas, 1, 1], order)
        }
        (&GroupOps::Matmul { matmul, .. }, &TileConfig::GemvMma { warps, unroll, .. }) => {
            let grid = gen.gemv_mma(out, matmul, warps, unroll)?;
            (
                32 * warps,
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            GroupOps::RowReduction { reductions },
            &TileConfig::RowReduction {
                threads_per_row,
                rows_per_cta,
                vector,
            },
        ) => {
            let rows = row_shape(g, out);
            let ctas = gen.row_reduction(out, reductions, threads_per_row, rows_per_cta, vector)?;
            (
                threads_per_row * rows_per_cta,
                [ctas, 1, 1],
                format!(
                    "{tile}; {}",
                    crate::schedule::reduction_order(tile, rows.last())
                ),
            )
        }
        (
            GroupOps::AttentionDq { .. } | GroupOps::AttentionDkv { .. },
            &TileConfig::AttentionBwd { .. },
        ) => {
            let grid = gen.attention_bwd(&data.ops, tile)?;
            (
                tile.threads_per_cta(),
                grid,
                format!("{tile}; {}", crate::schedule::reduction_order(tile, 0)),
            )
        }
        (
            &GroupOps::Scan { cumsum: c },
            &TileConfig::Scan {
                threads,
                chunk,
                rows,
            },
        ) => {
            let ctas = if rows == 1 {
                gen.scan(out, c, threads, chunk)?
            } else {
                gen.scan_rows(out, c, rows)?
            };
            (
                threads,
                [ctas, 1, 1],
                format!(
                    "{tile}; {}",
                    crate::schedule::scan_order(chunk as u64, g.ty(c).shape.last())
                ),
            )
        }
        _ => {
            return Err(LowerError::Unsupported {
                what: format!("tile {tile} for a {:?} group", data.kind()),
                value: out,
            })
        }
    };
    args.append(&mut gen.extra_args);
    gen.b.finish();
    kernel.block = [block, 1, 1];
    kernel.grid = grid;
    kernel.schedule = schedule;
    // The occupancy the schedule asked for (`.minnctapersm`).
    kernel.min_ctas_per_sm = match *tile {
        // The warp-specialised tile moves registers between its warpgroups (`setmaxnreg`),
        // which ptxas honours only where it knows the count at entry: one CTA an SM, so
        // 65536 / 384 rounded down to 8 (168).
        TileConfig::Mma { engine, .. } if engine.is_tma() => 1,
        TileConfig::Attention { wgmma: true, .. } => 1,
        TileConfig::Mma {
            min_ctas_per_sm, ..
        }
        | TileConfig::GemvMma {
            min_ctas_per_sm, ..
        } => min_ctas_per_sm,
        _ => 0,
    };
    Ok((kernel, args))
}

/// The operands an attention kernel reads in place under their views (`view::strided`):
/// the forward's q, k and v; the backward's score matmuls' and products' operands. None
/// for other kernels.
fn in_place_operands(g: &Graph, ops: &GroupOps) -> Vec<Value> {
    match ops {
        GroupOps::Attention {
            scores, attention, ..
        } => match (&g.ops[*scores], &g.ops[*attention]) {
            (GOp::MatMul { lhs, rhs }, GOp::Attention { v, .. }) => vec![*lhs, *rhs, *v],
            _ => vec![],
        },
        GroupOps::AttentionDq {
            scores, products, ..
        }
        | GroupOps::AttentionDkv { scores, products } => scores
            .iter()
            .chain(products)
            .flat_map(|&mm| g.ops[mm].args().to_vec())
            .collect(),
        _ => vec![],
    }
}

/// Materialised values read by the kernel writing `outputs`, in value order; the walk does
/// not go past `stop` (a split-K matmul, whose value the kernel reads from scratch). A
/// matmul reads a transposed operand in place, from the tensor under its permute, and a
/// widened 16-bit operand from the tensor under its cast ([`Graph::matmul_reads`]), even
/// when the permute or the cast is materialised too (a step output): for a permute both
/// are listed then, for a cast only the 16-bit tensor. An update reads its rows and
/// positions, never the tensor it writes into.
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
        if let Some(reads) = g.matmul_reads(v) {
            let widened = reads[0].widened;
            stack.extend(reads.map(|r| r.stored));
            // Widened operands are read only from their 16-bit tensors.
            if widened {
                continue;
            }
        }
        if let GOp::Update { .. } = g.ops[v] {
            stack.extend(g.ops[v].update_sources());
            continue;
        }
        stack.extend(g.ops[v].args());
    }
    found.into_iter().collect()
}

impl Gen<'_> {
    fn imm_u(x: u64) -> Operand {
        Operand::U32(x as u32)
    }

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

    fn is_leaf(&self, v: Value) -> bool {
        !self.own.contains(&v) && self.fusion.is_materialized(self.g, v)
    }
}
