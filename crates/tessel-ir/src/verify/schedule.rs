//! Fusion and schedule checks: the groups partition what is materialised, and each
//! group's tile fits its kind and its matmul (the `fusion.*` and `schedule.*` rules of the
//! module documentation).

use super::graph::exists;
use super::Errors;
use crate::entities::{Group, Value};
use crate::graph::{
    Fusion, Graph, GroupKind, GroupOps, MatmulLayout, MmaEngine, MmaEpilogue, Op, Schedules,
    TileConfig,
};
use crate::kernel::MmaShape;
use crate::types::DType;
use cranelift_entity::EntityRef;

pub(super) fn fusion_checks(g: &Graph, f: &Fusion, e: &mut Errors) {
    for (grp, data) in f.groups.iter() {
        let loc = format!("group {grp}");
        if data.outputs.is_empty() {
            e.push("fusion.outputs", loc.clone(), "the group has no outputs");
        }
        let mut shape = None;
        for &v in &data.outputs {
            if !exists(g, v) {
                e.push(
                    "fusion.outputs",
                    loc.clone(),
                    format!("output {v} is not a value"),
                );
                continue;
            }
            if f.writer[v].expand() != Some(grp) {
                let who = match f.writer[v].expand() {
                    Some(o) => format!("{o}"),
                    None => "no group".to_string(),
                };
                e.push(
                    "fusion.writer",
                    loc.clone(),
                    format!("output {v} has {who} as its writer"),
                );
            }
            let s = &g.ty(v).shape;
            // An attention group's logsumexp output has its rows' shape (checked below); no
            // other kernel computes one.
            // An attention backward writes products and row reductions of several shapes
            // (checked below).
            if matches!(
                data.kind(),
                GroupKind::AttentionDq | GroupKind::AttentionDkv
            ) {
                continue;
            }
            if matches!(g.ops[v], Op::AttentionStat { .. }) {
                if data.kind() != GroupKind::Attention {
                    e.push(
                        "fusion.outputs",
                        loc.clone(),
                        format!("output {v} is an attention_stat, which only its attention's group writes"),
                    );
                }
                continue;
            }
            match shape {
                None => shape = Some((v, s)),
                Some((first, s0)) if s0 != s => e.push(
                    "fusion.outputs",
                    loc.clone(),
                    format!("outputs differ in shape: {first} is {s0}, {v} is {s}"),
                ),
                _ => {}
            }
        }
        match &data.ops {
            GroupOps::Matmul {
                matmul,
                row_epilogue,
            } => {
                let one_matmul = exists(g, *matmul)
                    && row_epilogue.iter().all(|&r| exists(g, r))
                    && matches!(g.ops[*matmul], Op::MatMul { .. })
                    && row_epilogue
                        .iter()
                        .all(|&r| matches!(g.ops[r], Op::Reduce { .. }));
                if !one_matmul {
                    e.push(
                        "fusion.reductions",
                        loc.clone(),
                        "a matmul group must list exactly one matmul, then only the reductions of its row epilogue",
                    );
                } else if let Some((o, s)) = shape {
                    let mm = *matmul;
                    let m = &g.ty(mm).shape;
                    // The matmul's rows [.., N] in order, or a row epilogue's [.., N / d, d].
                    let layout = g.matmul_layout(mm, o);
                    let heads = matches!(layout, Some(MatmulLayout::Heads { .. }));
                    if layout.is_none() || (heads && data.outputs.len() != 1) {
                        e.push(
                            "fusion.outputs",
                            loc.clone(),
                            format!("output {o} is {s}, the matmul gives {m} (its rows are written as [.., N], or by a row epilogue as [.., N / d, d])"),
                        );
                    }
                    if layout == Some(MatmulLayout::Rows) && !row_epilogue.is_empty() {
                        e.push(
                            "fusion.reductions",
                            loc.clone(),
                            "a matmul group lists reductions but writes no row epilogue",
                        );
                    }
                }
            }
            GroupOps::Attention {
                scores,
                attention,
                q_prologue,
            } => {
                let (scores, attention) = (*scores, *attention);
                let ok = exists(g, scores)
                    && exists(g, attention)
                    && q_prologue.iter().all(|&r| exists(g, r))
                    && matches!(g.ops[scores], Op::MatMul { .. })
                    && matches!(g.ops[attention], Op::Attention { .. })
                    && q_prologue
                        .iter()
                        .all(|&r| matches!(g.ops[r], Op::Reduce { .. }));
                if !ok {
                    e.push(
                        "fusion.reductions",
                        loc.clone(),
                        "an attention group must list its logits' matmul, then the attention, then only the reductions of q's prologue",
                    );
                } else if let Some((o, s)) = shape {
                    let a = g.ty(attention);
                    if &a.shape != s {
                        e.push(
                            "fusion.outputs",
                            loc.clone(),
                            format!("output {o} is {s}, the attention gives {}", a.shape),
                        );
                    }
                    // Its second output, if any: the logsumexp of the same logits.
                    let Op::Attention { logits, bound, .. } = g.ops[attention] else {
                        unreachable!("checked above")
                    };
                    let lses: Vec<Value> = data
                        .outputs
                        .iter()
                        .copied()
                        .filter(|&x| exists(g, x) && matches!(g.ops[x], Op::AttentionStat { .. }))
                        .collect();
                    let own = |x: &Value| matches!(g.ops[*x], Op::AttentionStat { logits: l, bound: b, .. } if l == logits && b == bound);
                    let distinct =
                        |x: &Value| lses.iter().filter(|y| g.ops[**y] == g.ops[*x]).count() == 1;
                    if data.outputs.len() != 1 + lses.len()
                        || !lses.iter().all(own)
                        || !lses.iter().all(distinct)
                    {
                        e.push(
                            "fusion.outputs",
                            loc.clone(),
                            "an attention group writes the attention and, at most once each, the row statistics of its logits and bound",
                        );
                    }
                }
            }
            GroupOps::Update { row_reductions } => {
                let one_update = data.outputs.len() == 1
                    && exists(g, data.outputs[0])
                    && matches!(g.ops[data.outputs[0]], Op::Update { .. });
                // Listed reductions are `reduce`s computed from the update's rows.
                let rows = match data.outputs.first().map(|&u| &g.ops[u]) {
                    Some(Op::Update { rows, .. }) if one_update => Some(*rows),
                    _ => None,
                };
                let reductions_ok = row_reductions.iter().all(|&r| {
                    exists(g, r)
                        && matches!(g.ops[r], Op::Reduce { .. })
                        && rows.is_some_and(|x| !f.is_materialized(g, x) && computes(g, f, x, r))
                });
                if !one_update || !reductions_ok {
                    e.push(
                        "fusion.update",
                        loc.clone(),
                        "an update group writes exactly one update and lists only the reductions of its rows",
                    );
                } else if let Op::Update {
                    dst,
                    rows,
                    at: None,
                } = g.ops[data.outputs[0]]
                {
                    // A whole update's kernel writes each element of `dst` where it reads
                    // it: no reduction, and no other reading of `dst`, inside.
                    let stray = g.misaligned_reads(rows, dst, |v| f.is_materialized(g, v));
                    if !row_reductions.is_empty() || !stray.is_empty() {
                        e.push(
                            "fusion.update",
                            loc.clone(),
                            format!(
                                "the whole update {} reads {dst} other than at the element it writes (through {stray:?}) or lists reductions",
                                data.outputs[0]
                            ),
                        );
                    }
                }
            }
            GroupOps::AttentionDq {
                scores, products, ..
            }
            | GroupOps::AttentionDkv { scores, products } => {
                attention_bwd_checks(g, &data.ops, (scores, products), &data.outputs, &loc, e);
            }
            &GroupOps::Scan { cumsum: c } => {
                let scan = exists(g, c)
                    && match g.ops[c] {
                        Op::Cumsum { arg, axis } => {
                            let last =
                                exists(g, arg) && axis as usize + 1 == g.ty(arg).shape.rank();
                            let out_ok = data.outputs.len() == 1
                                && (data.outputs[0] == c
                                    || (exists(g, data.outputs[0])
                                        && g.ops[data.outputs[0]] == Op::Cast { arg: c }));
                            last && out_ok
                        }
                        _ => false,
                    };
                if !scan {
                    e.push(
                        "fusion.scan",
                        loc.clone(),
                        "a scan group lists one cumsum over the last axis and writes it or its cast alone",
                    );
                }
            }
            GroupOps::Elementwise => {}
            GroupOps::RowReduction { reductions } => {
                if reductions.is_empty() {
                    e.push(
                        "fusion.reductions",
                        loc.clone(),
                        "a row-reduction group has no reductions",
                    );
                }
                // The rows the kernel iterates over: the outputs' last axis, or — when the
                // group materialises a reduction itself (outputs of shape [.., 1]) — the
                // reduced tensor's last axis.
                let row = match data.outputs.first() {
                    Some(&o) if exists(g, o) => match &g.ops[o] {
                        Op::Reduce { arg, .. } if exists(g, *arg) => Some(g.ty(*arg).shape.last()),
                        _ => shape.map(|(_, s)| s.last()),
                    },
                    _ => shape.map(|(_, s)| s.last()),
                };
                for &r in reductions {
                    if !exists(g, r) {
                        e.push(
                            "fusion.reductions",
                            loc.clone(),
                            format!("{r} is not a value"),
                        );
                        continue;
                    }
                    let Op::Reduce { arg, axis, .. } = &g.ops[r] else {
                        e.push(
                            "fusion.reductions",
                            loc.clone(),
                            format!("{r} is not a reduce"),
                        );
                        continue;
                    };
                    if !exists(g, *arg) {
                        continue;
                    }
                    let a = g.ty(*arg);
                    if *axis as usize + 1 != a.shape.rank() {
                        e.push(
                            "fusion.reductions",
                            loc.clone(),
                            format!("{r} reduces axis {axis} of {a}, not the last axis"),
                        );
                    } else if let Some(row) = row {
                        if a.shape.last() != row {
                            e.push(
                                "fusion.reductions",
                                loc.clone(),
                                format!(
                                    "{r} reduces rows of length {}, the outputs' rows have {row}",
                                    a.shape.last()
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
    for (v, w) in f.writer.iter() {
        if let Some(grp) = w.expand() {
            let listed = f.groups.get(grp).is_some_and(|d| d.outputs.contains(&v));
            if !listed {
                e.push(
                    "fusion.writer",
                    v.to_string(),
                    format!("the writer is {grp}, which does not list {v} among its outputs"),
                );
            }
        }
    }
    for (v, base) in f.alias.iter() {
        let Some(base) = base.expand() else { continue };
        // The value under a chain of reshapes (and permutes of unit dims): the alias and
        // its base hold the same elements in the same row-major order when theirs is the
        // same value.
        let under = |x: Value| {
            let mut u = x;
            while let Some(arg) = g.same_bytes_arg(u).filter(|&a| exists(g, a)) {
                u = arg;
            }
            u
        };
        let problem = if !exists(g, v) || !exists(g, base) {
            Some("names a value that does not exist".to_string())
        } else if under(v) != under(base) || v == base {
            Some(format!(
                "{v} and {base} are not chains of reshapes over one value"
            ))
        } else if f.alias[base].is_some() || !f.is_materialized(g, base) {
            Some(format!(
                "its base {base} is not materialised in a buffer of its own"
            ))
        } else if f.writer[v].is_some() {
            Some("a group writes it".to_string())
        } else if matches!(g.ops[v], Op::Input { .. }) {
            Some("it is a step input, which has a buffer of its own".to_string())
        } else if g.is_output(v) && (g.is_output(base) || matches!(g.ops[base], Op::Input { .. })) {
            Some(format!(
                "it is a step output over {base}, a step input or output, which has a buffer of its own"
            ))
        } else if g.is_output(v)
            && f.alias
                .iter()
                .any(|(x, b)| x != v && b.expand() == Some(base) && g.is_output(x))
        {
            Some(format!("another step output is in {base}'s buffer"))
        } else {
            None
        };
        if let Some(p) = problem {
            e.push("fusion.alias", v.to_string(), p);
        }
    }
    update_order(g, f, e);
    alias_order(g, f, e);
    for (n, v) in &g.outputs {
        if exists(g, *v) && !f.is_materialized(g, *v) {
            e.push(
                "fusion.materialized",
                format!("output \"{n}\""),
                format!("{v} is neither a step input nor a group's output"),
            );
        }
    }
}

/// A tensor-core tile's decisions agree with its matmul `mm` (written to group output
/// `out`): the instruction shape is that of the dtype the operands are read in, the K
/// slice whole k steps, and
/// the epilogue's vector stores fit the output's rows.
fn mma_checks(g: &Graph, tile: &TileConfig, mm: Value, out: Value, grp: Group, e: &mut Errors) {
    let TileConfig::Mma {
        bm,
        bn,
        bk,
        warps_m,
        warps_n,
        stages,
        split_k,
        shape,
        epilogue,
        engine,
        ..
    } = *tile
    else {
        return;
    };
    if !exists(g, mm) || !exists(g, out) {
        return;
    }
    let loc = format!("group {grp}");
    if engine.is_wgmma() {
        // The warpgroup layout and the one slice layout (bk 64: a 128-byte span) the wgmma
        // kernels read.
        let problems = [
            (shape == MmaShape::M16N8K8Tf32, "tf32 operands".to_string()),
            (warps_n != 1, format!("warps_n {warps_n}, not 1")),
            (
                bm != 16 * warps_m || bm % 64 != 0,
                format!("bm {bm} over {warps_m} warps: 16 rows a warp, whole warpgroups of 64"),
            ),
            (
                bn % 8 != 0 || !(8..=256).contains(&bn),
                format!("bn {bn}: a wgmma n is a multiple of 8 up to 256"),
            ),
            (
                bk != 64,
                format!("bk {bk}: one 128-byte swizzle span of 16-bit K is 64"),
            ),
            (
                stages < 3,
                format!("{stages} stages: one wgmma group in flight needs 3"),
            ),
            (split_k != 1, format!("split_k {split_k}")),
        ];
        for (bad, what) in problems {
            if bad {
                e.push(
                    "schedule.mma",
                    loc.clone(),
                    format!("a wgmma tile with {what}"),
                );
            }
        }
    }
    if engine.is_tma() {
        if let Some(what) = tma_operands_problem(g, mm) {
            e.push(
                "schedule.mma",
                loc.clone(),
                format!("a {} tile with {what}", engine_text(engine)),
            );
        }
    }
    // The output tiles of the matmul's last two dims (the warp-specialised engines' rules).
    let tiles = || {
        let ms = &g.ty(mm).shape.0;
        ms[ms.len() - 2].div_ceil(bm as u64) * ms[ms.len() - 1].div_ceil(bn as u64)
    };
    if let MmaEngine::WgmmaTma { tail } = engine {
        // A split tail: the last `tail` tiles as two halves of bn / 2 columns.
        let tiles = tiles();
        if tail as u64 > tiles || (tail > 0 && bn % 128 != 0) {
            e.push(
                "schedule.mma",
                loc.clone(),
                format!("a wgmma: tma tile with a split tail of {tail} of its {tiles} tiles of {bm} × {bn} (at most the tiles, of a bn that is a multiple of 128)"),
            );
        }
    }
    if let MmaEngine::WgmmaPingpong { ctas } = engine {
        // Each consumer warpgroup computes the whole 128 × 128 tile; every CTA has a tile.
        let tiles = tiles();
        let problems = [
            (
                (bm, bn, warps_m) != (128, 128, 8),
                format!("a {bm} × {bn} tile of {warps_m} warps, not 128 × 128 of 8"),
            ),
            (
                ctas == 0 || ctas as u64 > tiles,
                format!("{ctas} CTAs for {tiles} tiles"),
            ),
        ];
        for (bad, what) in problems {
            if bad {
                e.push(
                    "schedule.mma",
                    loc.clone(),
                    format!("a wgmma: pingpong tile with {what}"),
                );
            }
        }
    }
    // The operands as the kernel reads them: 16-bit under widening casts (`f32(x) @ f32(w)^T`).
    let read = g.matmul_read_dtype(mm).unwrap_or(g.ty(mm).dtype);
    let want = match read {
        DType::Bf16 => Some(MmaShape::M16N8K16Bf16),
        DType::F16 => Some(MmaShape::M16N8K16F16),
        DType::F32 => Some(MmaShape::M16N8K8Tf32),
        _ => None,
    };
    if want != Some(shape) {
        e.push(
            "schedule.mma",
            loc.clone(),
            format!("{} on {read} operands", shape.name()),
        );
    }
    if bk as usize % shape.k() != 0 {
        e.push(
            "schedule.mma",
            loc.clone(),
            format!("bk {bk} is not whole k steps of {}", shape.k()),
        );
    }
    let n = g.ty(mm).shape.last();
    let same = g.ty(out).shape == g.ty(mm).shape;
    let fits = match epilogue {
        MmaEpilogue::Staged => n % 4 == 0,
        MmaEpilogue::Pairs => same && n % 2 == 0,
        MmaEpilogue::Single => true,
    };
    if !fits {
        e.push(
            "schedule.mma",
            loc,
            format!(
                "a {} epilogue for N = {n}{}",
                epilogue.name(),
                if same {
                    ""
                } else {
                    " and an output of another shape"
                }
            ),
        );
    }
}

/// The text of a warpgroup engine, for messages.
fn engine_text(engine: MmaEngine) -> &'static str {
    match engine {
        MmaEngine::WgmmaPingpong { .. } => "wgmma: pingpong",
        _ => "wgmma: tma",
    }
}

/// Why the operands of matmul `mm` cannot be read by TMA tensor maps, if they cannot: a
/// `wgmma: tma` tile needs no batch dims, the lhs read as stored (along K), the rhs either
/// through a swap of its last two dims (`x @ w^T`, K-major) or as stored (`x @ w` with `w`
/// `[K, N]`, read MN-major by wgmma's transposed B), both 16-bit, with rows of whole
/// 16-byte chunks (a tensor map's row stride is a multiple of 16 bytes:
/// `cuTensorMapEncodeTiled`'s `globalStrides`) — K elements for the lhs and a K-major rhs,
/// N for an MN-major one.
fn tma_operands_problem(g: &Graph, mm: Value) -> Option<String> {
    let Op::MatMul { lhs, .. } = g.ops[mm] else {
        return Some("no matmul".into());
    };
    let ls = &g.ty(lhs).shape.0;
    if ls[..ls.len() - 2].iter().product::<u64>() != 1 {
        return Some("batch dims".into());
    }
    let reads = g.matmul_reads(mm)?;
    // The swap of the last two dims, the others in place (`w^T`).
    let swap = |p: &Option<Vec<u32>>| {
        p.as_ref().is_some_and(|p| {
            let n = p.len();
            n >= 2
                && (p[n - 1], p[n - 2]) == (n as u32 - 2, n as u32 - 1)
                && p[..n - 2].iter().enumerate().all(|(i, &x)| x == i as u32)
        })
    };
    if reads[0].perm.is_some() || !(reads[1].perm.is_none() || swap(&reads[1].perm)) {
        return Some("operands read other than x @ w^T or x @ w".into());
    }
    for r in &reads {
        // Each stored tensor's rows are its last dim: K for the lhs and a `[N, K]` rhs, N
        // for a `[K, N]` one.
        let row = *g.ty(r.stored).shape.0.last()?;
        let esz = g.ty(r.stored).dtype.size_bytes();
        if esz != 2 || (row * esz) % 16 != 0 {
            return Some(format!(
                "rows of {row} {} elements, not whole 16-byte chunks of a 16-bit type",
                g.ty(r.stored).dtype
            ));
        }
    }
    None
}

/// True if the kernel computing `x` computes `r`: `r` is `x` or reached from it through
/// values that are not materialised.
fn computes(g: &Graph, f: &Fusion, x: Value, r: Value) -> bool {
    let mut stack = vec![x];
    let mut seen = std::collections::HashSet::new();
    while let Some(y) = stack.pop() {
        if y == r && !f.is_materialized(g, y) {
            return true;
        }
        if seen.insert(y) && (y == x || !f.is_materialized(g, y)) {
            stack.extend(g.ops[y].args().into_iter().filter(|&a| exists(g, a)));
        }
    }
    false
}

/// `schedule.row_epilogue`: a matmul group writing whole rows of `d` (`[.., N / d, d]`)
/// has a staged tensor-core tile whose column tiles hold whole rows (`bn` a multiple of
/// `d`), no split-K, `d / 8` a power of two from 2 to 32 lanes, and chunks of 8 columns a
/// multiple of the CTA's threads.
fn row_epilogue_checks(g: &Graph, tile: &TileConfig, out: Value, grp: Group, e: &mut Errors) {
    let d = g.ty(out).shape.last();
    let ok = match *tile {
        TileConfig::Mma {
            bm,
            bn,
            warps_m,
            warps_n,
            split_k,
            epilogue,
            ..
        } => {
            let lanes = d / 8;
            epilogue == MmaEpilogue::Staged
                && split_k == 1
                && d % 8 == 0
                && lanes.is_power_of_two()
                && (2..=32).contains(&lanes)
                && bn as u64 % d == 0
                && (bm * bn / 8) % (32 * warps_m * warps_n) == 0
        }
        _ => false,
    };
    if !ok {
        e.push(
            "schedule.row_epilogue",
            format!("group {grp}"),
            format!("a row epilogue over rows of {d} needs a staged tensor-core tile holding whole rows, without split-K; the tile is {tile:?}"),
        );
    }
}

pub(super) fn schedule_checks(g: &Graph, fusion: Option<&Fusion>, s: &Schedules, e: &mut Errors) {
    if let Some(f) = fusion {
        for (grp, data) in f.groups.iter() {
            match s.get(grp) {
                Some(Some(sched)) => {
                    let kind = match sched.tile {
                        TileConfig::Elementwise { .. } => GroupKind::Elementwise,
                        TileConfig::RowReduction { .. } => GroupKind::RowReduction,
                        TileConfig::Gemv { .. }
                        | TileConfig::Simt { .. }
                        | TileConfig::Mma { .. }
                        | TileConfig::GemvMma { .. } => GroupKind::Matmul,
                        TileConfig::Attention { .. } => GroupKind::Attention,
                        TileConfig::Update { .. } => GroupKind::Update,
                        TileConfig::Scan { .. } => GroupKind::Scan,
                        TileConfig::AttentionBwd { .. }
                            if data.kind() == GroupKind::AttentionDkv =>
                        {
                            GroupKind::AttentionDkv
                        }
                        TileConfig::AttentionBwd { .. } => GroupKind::AttentionDq,
                    };
                    if kind != data.kind() {
                        e.push(
                            "schedule.kind",
                            format!("group {grp}"),
                            format!("a {:?} group has a {:?} tile", data.kind(), kind),
                        );
                    } else if let (TileConfig::Update { vector, .. }, Some(&u)) =
                        (&sched.tile, data.outputs.first())
                    {
                        update_vector_checks(g, *vector, u, grp, e);
                        if !data.ops.row_reductions().is_empty() && *vector != 8 {
                            e.push(
                                "schedule.update",
                                format!("group {grp}"),
                                format!("an update computing its rows' reductions needs vector 8, not {vector}"),
                            );
                        }
                    } else if let Some(mm) = data.ops.matmul() {
                        let out = data.outputs[0];
                        let rows = kind == GroupKind::Matmul
                            && exists(g, mm)
                            && exists(g, out)
                            && matches!(g.matmul_layout(mm, out), Some(MatmulLayout::Heads { .. }));
                        if rows {
                            row_epilogue_checks(g, &sched.tile, out, grp, e);
                        }
                        if let TileConfig::Mma {
                            engine: MmaEngine::WgmmaTma { tail },
                            ..
                        } = sched.tile
                        {
                            // The halves' bn/2 columns may not hold whole rows (lowering).
                            if tail > 0 && !data.ops.row_reductions().is_empty() {
                                e.push(
                                    "schedule.mma",
                                    format!("group {grp}"),
                                    "a wgmma: tma tile with a split tail and a row epilogue's reductions",
                                );
                            }
                        }
                        mma_checks(g, &sched.tile, mm, out, grp, e);
                    }
                }
                _ => e.push("schedule.missing", format!("group {grp}"), "no schedule"),
            }
        }
        for (grp, sched) in s.iter() {
            if sched.is_some() && grp.index() >= f.groups.len() {
                e.push(
                    "schedule.orphan",
                    format!("group {grp}"),
                    "a schedule for a group that does not exist",
                );
            }
        }
    }
    for (grp, sched) in s.iter() {
        let Some(sched) = sched else { continue };
        let loc = format!("group {grp}");
        let (threads, vector) = match sched.tile {
            TileConfig::Elementwise { threads, vector }
            | TileConfig::Update { threads, vector } => (threads as u64, vector),
            TileConfig::RowReduction {
                threads_per_row,
                rows_per_cta,
                vector,
            } => {
                let tpr_ok = (threads_per_row.is_power_of_two() && threads_per_row <= 32)
                    || (threads_per_row > 0 && threads_per_row % 32 == 0);
                if !tpr_ok {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!(
                            "threads_per_row {threads_per_row} is neither a power of two ≤ 32 nor a multiple of 32"
                        ),
                    );
                }
                if rows_per_cta == 0 {
                    e.push("schedule.tile", loc.clone(), "rows_per_cta is 0");
                }
                (threads_per_row as u64 * rows_per_cta as u64, vector)
            }
            TileConfig::Gemv {
                warps,
                vector,
                columns,
                unroll,
            } => {
                if columns == 0 || columns > 8 {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("gemv columns {columns} outside 1..=8"),
                    );
                }
                if unroll == 0 || unroll > 8 {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("gemv unroll {unroll} outside 1..=8"),
                    );
                }
                (32 * warps as u64, vector)
            }
            TileConfig::Simt {
                bm,
                bn,
                bk,
                tm,
                tn,
                split_k,
            } => {
                if split_k == 0 {
                    e.push("schedule.tile", loc.clone(), "split_k is 0");
                }
                let ok =
                    [bm, bn, bk, tm, tn].iter().all(|&x| x > 0) && bm % tm == 0 && bn % tn == 0;
                if !ok {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!(
                            "simt tile {bm}x{bn}x{bk} is not divided by the thread tile {tm}x{tn}"
                        ),
                    );
                }
                if ok && bk > 0 && (bm * bk * 4 + bk * bn * 4) > 48 * 1024 {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        "simt tile needs more than 48 KiB of shared memory",
                    );
                }
                (((bm / tm.max(1)) * (bn / tn.max(1))) as u64, 1)
            }
            TileConfig::Mma {
                bm,
                bn,
                bk,
                warps_m,
                warps_n,
                stages,
                split_k,
                ..
            } => {
                // Warp tiles of whole 16 × 16 fragments (pairs of 8-column B fragments, one
                // ldmatrix.x4 each), power-of-two tile sides (the shared-memory swizzle XORs
                // 16-byte chunk indices), K slices of whole k16 steps.
                let wm = bm / warps_m.max(1);
                let wn = bn / warps_n.max(1);
                let ok = warps_m > 0
                    && warps_n > 0
                    && bm % warps_m == 0
                    && bn % warps_n == 0
                    && wm % 16 == 0
                    && wn % 16 == 0
                    && wm > 0
                    && wn > 0
                    && [bm, bn, bk].iter().all(|x| x.is_power_of_two())
                    && bk >= 16;
                if !ok {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!(
                            "mma tile {bm}x{bn}x{bk} over {warps_m}x{warps_n} warps: sides must be powers of two, bk ≥ 16, and each warp's tile a multiple of 16 × 16"
                        ),
                    );
                }
                if !(2..=8).contains(&stages) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("mma stages {stages} outside 2..=8"),
                    );
                }
                if split_k == 0 {
                    e.push("schedule.tile", loc.clone(), "split_k is 0");
                }
                (32 * warps_m as u64 * warps_n as u64, 1)
            }
            TileConfig::Attention {
                warps,
                block_n,
                stages,
                pack,
                split,
                wgmma,
            } => {
                // The warpgroup form: whole warpgroups, keys per block a whole number of
                // 16-key P·V steps and at most one wgmma's n (256), the keys not split.
                if wgmma && (warps % 4 != 0 || split != 0) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!(
                            "a wgmma attention tile needs whole warpgroups (warps {warps}) and no split (split {split})"
                        ),
                    );
                }
                if split % block_n.max(1) != 0 {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("attention split {split} is not a multiple of block_n {block_n}"),
                    );
                }
                // Warps of 16 query rows; key blocks of whole pairs of 8-key fragments
                // (one ldmatrix.x4 each) and a power of two (the K/V swizzle).
                if !(1..=8).contains(&warps) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("attention warps {warps} outside 1..=8"),
                    );
                }
                if !(block_n.is_power_of_two() && (16..=128).contains(&block_n)) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("attention block_n {block_n} is not a power of two in 16..=128"),
                    );
                }
                if !(2..=4).contains(&stages) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("attention stages {stages} outside 2..=4"),
                    );
                }
                if pack == 0 {
                    e.push("schedule.tile", loc.clone(), "attention pack is 0");
                }
                (32 * warps as u64 + if wgmma { 128 } else { 0 }, 1)
            }
            TileConfig::AttentionBwd { warps, block_n } => {
                if !(1..=8).contains(&warps) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("attention_bwd warps {warps} outside 1..=8"),
                    );
                }
                if !(block_n.is_power_of_two() && (16..=128).contains(&block_n)) {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!(
                            "attention_bwd block_n {block_n} is not a power of two in 16..=128"
                        ),
                    );
                }
                (32 * warps as u64, 1)
            }
            TileConfig::Scan {
                threads,
                chunk,
                rows,
            } => {
                let group = fusion.and_then(|f| f.groups.get(grp));
                let row = group
                    .and_then(|d| match d.ops {
                        GroupOps::Scan { cumsum } => Some(cumsum),
                        _ => None,
                    })
                    .filter(|&c| exists(g, c))
                    .map(|c| g.ty(c).shape.last());
                if let Some(n) = row {
                    if chunk as u64 != crate::graph::cumsum_chunk(n) {
                        e.push(
                            "schedule.scan",
                            loc.clone(),
                            format!(
                                "chunk {chunk} for a row of {n}: the order fixes {}",
                                crate::graph::cumsum_chunk(n)
                            ),
                        );
                    }
                }
                if threads % 32 != 0 {
                    e.push(
                        "schedule.scan",
                        loc.clone(),
                        format!("{threads} threads is not whole warps"),
                    );
                }
                // A thread per row takes the row's one chunk whole.
                if rows != 1 && (rows != threads || row.is_some_and(|n| (chunk as u64) < n)) {
                    e.push(
                        "schedule.scan",
                        loc.clone(),
                        format!(
                            "{rows} rows of {threads} threads: a thread per row needs rows = threads and a row of one chunk"
                        ),
                    );
                }
                (threads as u64, 1)
            }
            TileConfig::GemvMma { warps, unroll, .. } => {
                if unroll == 0 || unroll > 8 {
                    e.push(
                        "schedule.tile",
                        loc.clone(),
                        format!("gemv_mma unroll {unroll} outside 1..=8"),
                    );
                }
                (32 * warps as u64, 1)
            }
        };
        if !(1..=1024).contains(&threads) {
            e.push(
                "schedule.tile",
                loc.clone(),
                format!("{threads} threads per CTA, outside 1..=1024"),
            );
        }
        if ![1, 2, 4, 8].contains(&vector) {
            e.push(
                "schedule.tile",
                loc.clone(),
                format!("vector {vector} is not 1, 2, 4 or 8"),
            );
        }
    }
}

/// Rule `fusion.update`: every update is written by an update group, which runs after every
/// group that reads the value it overwrites in place and before every group that reads it.
/// What a group reads: the materialised values its outputs' cones reach (an update's cone
/// is its rows and positions: its kernel never reads `dst`).
/// The materialised values group `grp`'s kernel reads: those its outputs' cones reach
/// before any other materialised value (an update's through its sources).
fn group_reads(g: &Graph, f: &Fusion, grp: Group) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    let outs = &f.groups[grp].outputs;
    let mut stack: Vec<Value> = outs.iter().copied().filter(|&v| exists(g, v)).collect();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if !outs.contains(&v) && f.is_materialized(g, v) {
            found.push(v);
            continue;
        }
        let args = match &g.ops[v] {
            op @ Op::Update { .. } => op.update_sources(),
            op => op.args(),
        };
        stack.extend(args.into_iter().filter(|&a| exists(g, a) && a < v));
    }
    found
}

/// `fusion.alias`, in order: a group that reads an alias runs after the group writing the
/// alias's base (kernels run in group order; a step input is no alias).
fn alias_order(g: &Graph, f: &Fusion, e: &mut Errors) {
    for grp in f.groups.keys() {
        for r in group_reads(g, f, grp) {
            let Some(b) = f.alias[r].expand().filter(|&b| exists(g, b)) else {
                continue;
            };
            if let Some(w) = f.writer[b].expand().filter(|&w| w >= grp) {
                e.push(
                    "fusion.alias",
                    format!("group {grp}"),
                    format!("reads {r}, an alias of {b}, which {w} writes, not an earlier group"),
                );
            }
        }
    }
}

fn update_order(g: &Graph, f: &Fusion, e: &mut Errors) {
    let all: Vec<(Group, Vec<Value>)> = f
        .groups
        .keys()
        .map(|grp| (grp, group_reads(g, f, grp)))
        .collect();
    for (u, op) in g.ops.iter() {
        let Op::Update { dst, .. } = op else { continue };
        let Some(ug) = f.writer[u].expand() else {
            e.push(
                "fusion.update",
                u.to_string(),
                "an update is written by no group",
            );
            continue;
        };
        if f.groups.get(ug).map(|d| d.kind()) != Some(GroupKind::Update) {
            e.push(
                "fusion.update",
                u.to_string(),
                format!("written by {ug}, which is not an update group"),
            );
        }
        for (grp, r) in &all {
            if *grp > ug && r.contains(dst) {
                e.push(
                    "fusion.update",
                    format!("group {grp}"),
                    format!("reads {dst} after {ug} overwrote it in place (update {u})"),
                );
            }
            if *grp < ug && r.contains(&u) {
                e.push(
                    "fusion.update",
                    format!("group {grp}"),
                    format!("reads update {u} before {ug} writes it"),
                );
            }
        }
    }
}

/// An update tile's vector covers consecutive elements of a row that are consecutive in
/// `dst` too: it divides the last dim, and is 1 when the update's axis is the last.
fn update_vector_checks(g: &Graph, vector: u32, u: Value, grp: Group, e: &mut Errors) {
    let Some(Op::Update { rows, at, .. }) = g.ops.get(u) else {
        return;
    };
    if !exists(g, *rows) {
        return;
    }
    let shape = &g.ty(*rows).shape;
    let axis = at.map(|at| at.axis as usize);
    let last_axis = axis.is_some_and(|a| a + 1 == shape.rank());
    if vector == 0 || shape.last() % vector as u64 != 0 || (last_axis && vector != 1) {
        let along = match axis {
            Some(a) => format!("written along axis {a}"),
            None => "written whole".into(),
        };
        e.push(
            "schedule.update",
            format!("group {grp}"),
            format!(
                "vector {vector} for rows {shape} {along}: it must divide the last dim, and be 1 when the axis is the last"
            ),
        );
    }
}

/// `fusion.reductions` and `fusion.outputs` for an attention backward group: its scores
/// are matmuls of one shape `[.., M, N]`, its products matmuls, a dq group's reductions
/// `reduce`s over the last axis of `[.., M, N]` values; it writes its products and (dq)
/// its reductions, each once, nothing else.
fn attention_bwd_checks(
    g: &Graph,
    ops: &GroupOps,
    (scores, products): (&[Value], &[Value]),
    outputs: &[Value],
    loc: &str,
    e: &mut Errors,
) {
    let reductions = ops.row_reductions();
    let all: Vec<Value> = ops.listed();
    if !all.iter().all(|&v| exists(g, v)) {
        e.push(
            "fusion.reductions",
            loc.to_string(),
            "an attention backward group lists a value that does not exist",
        );
        return;
    }
    let mm = |v: &Value| matches!(g.ops[*v], Op::MatMul { .. });
    let score_shape = scores.first().map(|&s| g.ty(s).shape.clone());
    let same = scores
        .iter()
        .all(|&s| Some(&g.ty(s).shape) == score_shape.as_ref());
    let rows_of = |v: Value| {
        let sh = &g.ty(v).shape.0;
        score_shape.as_ref().is_some_and(|s| {
            let r = s.rank();
            sh.len() == r && sh[..r - 1] == s.0[..r - 1] && sh[r - 1] == 1
        })
    };
    let reductions_ok = reductions.iter().all(|&r| {
        matches!(g.ops[r], Op::Reduce { arg, axis, .. }
            if axis as usize + 1 == g.ty(arg).shape.rank()
                && Some(&g.ty(arg).shape) == score_shape.as_ref())
            && rows_of(r)
    });
    if scores.is_empty()
        || !scores.iter().all(mm)
        || !same
        || !products.iter().all(mm)
        || !reductions_ok
    {
        e.push(
            "fusion.reductions",
            loc.to_string(),
            "an attention backward group lists matmuls of one score shape, then matmuls, then (dq) reductions over the last axis of score-shaped values",
        );
    }
    let mut want: Vec<Value> = products.iter().chain(reductions).copied().collect();
    want.sort();
    let mut have = outputs.to_vec();
    have.sort();
    if want != have {
        e.push(
            "fusion.outputs",
            loc.to_string(),
            format!("an attention backward group writes exactly its products and reductions {want:?}, not {have:?}"),
        );
    }
}
