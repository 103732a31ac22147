//! The graph IR reader.

use super::lexer::{Cursor, Pos, Tok};
use super::{
    binary_name, group_kind_name, reduce_name, unary_name, ReadError, BINARY_OPS, DTYPES,
    GROUP_KINDS, REDUCE_OPS, UNARY_OPS,
};
use crate::entities::{Group, Value};
use crate::graph::{
    Fusion, Graph, GroupData, GroupOps, MmaEngine, MmaEpilogue, Op, RowStat, Schedule, Schedules,
    TileConfig, UpdateAt,
};
use crate::kernel::MmaShape;
use crate::types::{DType, Shape, TensorType};
use cranelift_entity::packed_option::PackedOption;
use std::collections::HashMap;

/// Reads the text [`super::write_graph`] prints. Absent sections give empty tables: a graph
/// without groups reads back with an empty [`Fusion`] and empty [`Schedules`].
///
/// Values and groups are numbered in definition order; references may come before the
/// definition. [`Graph::inputs`] is the explicit `input "x" = v0` list when there is one,
/// otherwise the named `input` ops sorted by index. [`Fusion::writer`] is derived from the
/// groups' outputs, then overridden by the `writer` lines; [`Fusion::alias`] is the `alias` lines.
pub fn read_graph(text: &str) -> Result<(Graph, Fusion, Schedules), ReadError> {
    let mut c = Cursor::new(text)?;
    c.keyword("graph")?;
    let name = c.name("the graph's name")?;
    c.punct('{')?;
    let mut r = GraphReader::default();
    loop {
        if c.eat_punct('}') {
            break;
        }
        r.item(&mut c)?;
    }
    if *c.peek() != Tok::Eof {
        return Err(c.expected("the end of the text after the graph"));
    }
    r.finish(name)
}

/// A value or group reference as written: the number in its name and where.
type Ref = (u32, Pos);

/// A group as written: kind (and where), output and reduction references, schedule.
type RawGroup = (
    (crate::graph::GroupKind, Pos),
    Vec<Ref>,
    Vec<Ref>,
    Option<Schedule>,
);

#[derive(Default)]
struct GraphReader {
    /// Ops with placeholder operands, the operand references in [`Op::args`] order, the type.
    ops: Vec<(Op, Vec<Ref>, TensorType)>,
    value_names: HashMap<u32, Value>,
    /// Named input ops: (index, name, value).
    implied_inputs: Vec<(u32, String, Value)>,
    explicit_inputs: Vec<(String, Ref)>,
    outputs: Vec<(String, Ref)>,
    groups: Vec<RawGroup>,
    group_names: HashMap<u32, Group>,
    writers: Vec<(Ref, Option<Ref>)>,
    aliases: Vec<(Ref, Ref)>,
}

impl GraphReader {
    fn item(&mut self, c: &mut Cursor) -> Result<(), ReadError> {
        let (w, pos) = c.word("a value, group, `output`, `input`, `writer`, `alias` or `}`")?;
        if let Some(n) = super::lexer::entity_number(&w, "v") {
            let v = Value::from_u32(self.ops.len() as u32);
            if self.value_names.insert(n, v).is_some() {
                return Err(pos.error(format!("value v{n} is defined twice")));
            }
            c.punct('=')?;
            let (op, refs, name) = op(c)?;
            c.punct(':')?;
            let ty = tensor_type(c)?;
            if let (Op::Input { index, .. }, Some(name)) = (&op, name) {
                self.implied_inputs.push((*index, name, v));
            }
            self.ops.push((op, refs, ty));
        } else if let Some(n) = super::lexer::entity_number(&w, "g") {
            let g = Group::from_u32(self.groups.len() as u32);
            if self.group_names.insert(n, g).is_some() {
                return Err(pos.error(format!("group g{n} is defined twice")));
            }
            c.punct('=')?;
            let (k, kpos) = c.word("a group kind")?;
            let kind = GROUP_KINDS
                .into_iter()
                .find(|x| group_kind_name(*x) == k)
                .ok_or_else(|| {
                    kpos.error(format!(
                        "unknown group kind `{k}` (expected `elementwise`, `row_reduction`, `matmul`, `attention`, `update`, `scan` or `attention_bwd`)"
                    ))
                })?;
            c.keyword("outputs")?;
            let outs = c.bracket_list(|c| c.entity("v", "a value"))?;
            c.keyword("reductions")?;
            let reds = c.bracket_list(|c| c.entity("v", "a value"))?;
            let sched = if c.is_word("tile") {
                Some(schedule(c)?)
            } else {
                None
            };
            self.groups.push(((kind, kpos), outs, reds, sched));
        } else {
            match w.as_str() {
                "output" | "input" => {
                    let n = c.string("the name as a string")?;
                    c.punct('=')?;
                    let v = c.entity("v", "a value")?;
                    if w == "output" {
                        self.outputs.push((n, v));
                    } else {
                        self.explicit_inputs.push((n, v));
                    }
                }
                "writer" => {
                    let v = c.entity("v", "a value")?;
                    c.punct('=')?;
                    let g = if c.eat_word("none") {
                        None
                    } else {
                        Some(c.entity("g", "a group or `none`")?)
                    };
                    self.writers.push((v, g));
                }
                "alias" => {
                    let v = c.entity("v", "a value")?;
                    c.punct('=')?;
                    let base = c.entity("v", "a value")?;
                    self.aliases.push((v, base));
                }
                "schedule" => {
                    return Err(pos.error(
                        "a schedule needs its group: write it on the group's line (`g0 = ... tile ...`)",
                    ))
                }
                _ => {
                    return Err(pos.error(format!(
                        "expected a value, group, `output`, `input`, `writer`, `alias` or `}}`, found `{w}`"
                    )))
                }
            }
        }
        Ok(())
    }

    fn value(&self, (n, pos): Ref) -> Result<Value, ReadError> {
        self.value_names
            .get(&n)
            .copied()
            .ok_or_else(|| pos.error(format!("value v{n} is not defined")))
    }

    fn group(&self, (n, pos): Ref) -> Result<Group, ReadError> {
        self.group_names
            .get(&n)
            .copied()
            .ok_or_else(|| pos.error(format!("group g{n} is not defined")))
    }

    fn values(&self, refs: &[Ref]) -> Result<Vec<Value>, ReadError> {
        refs.iter().map(|r| self.value(*r)).collect()
    }

    fn finish(self, name: String) -> Result<(Graph, Fusion, Schedules), ReadError> {
        let mut g = Graph::new(name);
        for (op, refs, ty) in &self.ops {
            let mut op = op.clone();
            set_args(&mut op, &self.values(refs)?);
            g.push(op, ty.clone());
        }
        for (n, r) in &self.outputs {
            g.outputs.push((n.clone(), self.value(*r)?));
        }
        if self.explicit_inputs.is_empty() {
            let mut ins = self.implied_inputs.clone();
            ins.sort_by_key(|(i, _, _)| *i);
            g.inputs = ins.into_iter().map(|(_, n, v)| (n, v)).collect();
        } else {
            for (n, r) in &self.explicit_inputs {
                g.inputs.push((n.clone(), self.value(*r)?));
            }
        }
        let mut fusion = Fusion::default();
        let mut schedules = Schedules::new();
        for ((kind, kpos), outs, reds, sched) in &self.groups {
            let ops =
                GroupOps::from_listed(*kind, self.values(reds)?, &g).map_err(|e| kpos.error(e))?;
            let grp = fusion.new_group(GroupData {
                ops,
                outputs: self.values(outs)?,
            });
            schedules[grp] = sched.clone();
        }
        for (v, grp) in &self.writers {
            let v = self.value(*v)?;
            fusion.writer[v] = match grp {
                Some(r) => PackedOption::from(self.group(*r)?),
                None => PackedOption::default(),
            };
        }
        for (v, base) in &self.aliases {
            let v = self.value(*v)?;
            fusion.alias[v] = self.value(*base)?.into();
        }
        Ok((g, fusion, schedules))
    }
}

/// Replaces the operands of `op`, in [`Op::args`] order.
fn set_args(op: &mut Op, new: &[Value]) {
    for (slot, v) in op.args_mut().into_iter().zip(new) {
        *slot = *v;
    }
}

/// `bf16[4096, 5120]`, `f32[]`.
pub(crate) fn tensor_type(c: &mut Cursor) -> Result<TensorType, ReadError> {
    let (w, pos) = c.word("a dtype")?;
    let dtype = dtype_named(&w, pos)?;
    let dims = c.bracket_list(|c| c.u64("a dimension"))?;
    Ok(TensorType {
        dtype,
        shape: Shape(dims),
    })
}

pub(crate) fn dtype_named(w: &str, pos: Pos) -> Result<DType, ReadError> {
    DTYPES.into_iter().find(|d| d.name() == w).ok_or_else(|| {
        pos.error(format!(
            "unknown dtype `{w}` (expected bf16, f16, f32, i32 or bool)"
        ))
    })
}

/// `tile <TileConfig> why "..."`: a tile kind and its fields, each a number or, for a
/// tensor-core tile's `shape`, `epilogue` and `wgmma` (`1` or `tma`), a name.
fn schedule(c: &mut Cursor) -> Result<Schedule, ReadError> {
    c.keyword("tile")?;
    let (k, kpos) = c.word("a tile kind")?;
    c.punct('{')?;
    let mut fields: Vec<(String, String, Pos)> = Vec::new();
    if !c.eat_punct('}') {
        loop {
            let (f, fpos) = c.word("a field name")?;
            if fields.iter().any(|(x, ..)| *x == f) {
                return Err(fpos.error(format!("field `{f}` is given twice")));
            }
            c.punct(':')?;
            let (x, xpos) = c.word("a field value")?;
            fields.push((f, x, xpos));
            if c.eat_punct('}') {
                break;
            }
            c.punct(',')?;
        }
    }
    let expect: &[&str] = match k.as_str() {
        "elementwise" => &["threads", "vector"],
        "row_reduction" => &["threads_per_row", "rows_per_cta", "vector"],
        "gemv" => &["warps", "vector", "columns", "unroll"],
        "simt" => &["bm", "bn", "bk", "tm", "tn", "split_k"],
        "mma" => &[
            "bm",
            "bn",
            "bk",
            "warps_m",
            "warps_n",
            "stages",
            "split_k",
            "shape",
            "epilogue",
            "min_ctas_per_sm",
            "wgmma",
            "ctas",
            "tail",
        ],
        "gemv_mma" => &["warps", "unroll", "min_ctas_per_sm"],
        "attention" => &["warps", "block_n", "stages", "pack", "split", "wgmma"],
        "update" => &["threads", "vector"],
        "scan" => &["threads", "chunk", "rows"],
        "attention_bwd" => &["warps", "block_n"],
        _ => {
            return Err(kpos.error(format!(
            "unknown tile kind `{k}` (expected `elementwise`, `row_reduction`, `gemv`, `simt`, `mma`, `gemv_mma`, `attention`, `update`, `scan` or `attention_bwd`)"
        )))
        }
    };
    if let Some((f, ..)) = fields.iter().find(|(f, ..)| !expect.contains(&f.as_str())) {
        return Err(kpos.error(format!("`{k}` tile has no field `{f}`")));
    }
    let field = |name: &str| -> Result<(&str, Pos), ReadError> {
        fields
            .iter()
            .find(|(f, ..)| f == name)
            .map(|(_, x, p)| (x.as_str(), *p))
            .ok_or_else(|| kpos.error(format!("`{k}` tile needs the field `{name}`")))
    };
    let num = |name: &str| -> Result<u32, ReadError> {
        let (x, pos) = field(name)?;
        x.parse()
            .map_err(|_| pos.error(format!("`{name}` is a number, found `{x}`")))
    };
    let tile = match k.as_str() {
        "elementwise" => TileConfig::Elementwise {
            threads: num("threads")?,
            vector: num("vector")?,
        },
        "row_reduction" => TileConfig::RowReduction {
            threads_per_row: num("threads_per_row")?,
            rows_per_cta: num("rows_per_cta")?,
            vector: num("vector")?,
        },
        "gemv" => TileConfig::Gemv {
            warps: num("warps")?,
            vector: num("vector")?,
            columns: num("columns")?,
            unroll: num("unroll")?,
        },
        "simt" => TileConfig::Simt {
            bm: num("bm")?,
            bn: num("bn")?,
            bk: num("bk")?,
            tm: num("tm")?,
            tn: num("tn")?,
            split_k: num("split_k")?,
        },
        "mma" => {
            if let Some((_, _, pos)) = fields.iter().find(|(f, ..)| f == "ctas") {
                if !fields
                    .iter()
                    .any(|(f, x, _)| f == "wgmma" && x == "pingpong")
                {
                    return Err(pos.error("`ctas` is a field of `wgmma: pingpong` tiles only"));
                }
            }
            if let Some((_, _, pos)) = fields.iter().find(|(f, ..)| f == "tail") {
                if !fields.iter().any(|(f, x, _)| f == "wgmma" && x == "tma") {
                    return Err(pos.error("`tail` is a field of `wgmma: tma` tiles only"));
                }
            }
            let (sh, spos) = field("shape")?;
            let shape = MmaShape::ALL
                .into_iter()
                .find(|x| x.name() == sh)
                .ok_or_else(|| {
                    spos.error(format!(
                        "unknown mma shape `{sh}` (expected m16n8k16.bf16, m16n8k16.f16 or m16n8k8.tf32)"
                    ))
                })?;
            let (ep, epos) = field("epilogue")?;
            let epilogue = MmaEpilogue::ALL
                .into_iter()
                .find(|x| x.name() == ep)
                .ok_or_else(|| {
                    epos.error(format!(
                        "unknown epilogue `{ep}` (expected staged, pairs or single)"
                    ))
                })?;
            TileConfig::Mma {
                bm: num("bm")?,
                bn: num("bn")?,
                bk: num("bk")?,
                warps_m: num("warps_m")?,
                warps_n: num("warps_n")?,
                stages: num("stages")?,
                split_k: num("split_k")?,
                shape,
                epilogue,
                min_ctas_per_sm: num("min_ctas_per_sm")?,
                // Written only when not `mma.sync`: `wgmma: 1`, `wgmma: tma` (`wgmma: tma,
                // tail: N` with a split tail) or `wgmma: pingpong, ctas: N`.
                engine: match fields.iter().find(|(f, ..)| f == "wgmma") {
                    None => MmaEngine::Sync,
                    Some((_, x, pos)) => match x.as_str() {
                        "0" => MmaEngine::Sync,
                        "1" => MmaEngine::Wgmma,
                        "tma" => MmaEngine::WgmmaTma {
                            tail: match fields.iter().any(|(f, ..)| f == "tail") {
                                true => num("tail")?,
                                false => 0,
                            },
                        },
                        "pingpong" => MmaEngine::WgmmaPingpong { ctas: num("ctas")? },
                        x => {
                            return Err(
                                pos.error(format!("`wgmma` is 0, 1, tma or pingpong, found `{x}`"))
                            );
                        }
                    },
                },
            }
        }
        "update" => TileConfig::Update {
            threads: num("threads")?,
            vector: num("vector")?,
        },
        "scan" => TileConfig::Scan {
            threads: num("threads")?,
            chunk: num("chunk")?,
            rows: num("rows")?,
        },
        "gemv_mma" => TileConfig::GemvMma {
            warps: num("warps")?,
            unroll: num("unroll")?,
            min_ctas_per_sm: num("min_ctas_per_sm")?,
        },
        "attention_bwd" => TileConfig::AttentionBwd {
            warps: num("warps")?,
            block_n: num("block_n")?,
        },
        _ => TileConfig::Attention {
            warps: num("warps")?,
            block_n: num("block_n")?,
            stages: num("stages")?,
            pack: num("pack")?,
            split: num("split")?,
            // Written only when set.
            wgmma: match fields.iter().find(|(f, ..)| f == "wgmma") {
                None => false,
                Some((_, x, pos)) => match x.as_str() {
                    "0" => false,
                    "1" => true,
                    x => return Err(pos.error(format!("`wgmma` is 0 or 1, found `{x}`"))),
                },
            },
        },
    };
    c.keyword("why")?;
    let why = c.string("the reason as a string")?;
    Ok(Schedule { tile, why })
}

/// An f64 as [`super::fmt_f64`] prints it; decimal literals are also accepted with a sign.
fn f64_literal(c: &mut Cursor) -> Result<f64, ReadError> {
    let pos = c.pos();
    let neg = c.eat_punct('-');
    let (w, _) = c.word("a number")?;
    let x = if w == "nan" {
        f64::NAN
    } else if w == "inf" {
        f64::INFINITY
    } else if let Some(h) = w.strip_prefix("0x") {
        if neg {
            return Err(pos.error("raw bits `0x...` take no sign"));
        }
        if h.len() != 16 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(pos.error(format!("expected 16 hex digits of f64 bits, found `{w}`")));
        }
        return u64::from_str_radix(h, 16)
            .map(f64::from_bits)
            .map_err(|_| pos.error("bad hex bits"));
    } else if w
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        w.parse::<f64>()
            .map_err(|_| pos.error(format!("expected a number, found `{w}`")))?
    } else {
        return Err(pos.error(format!("expected a number, found `{w}`")));
    };
    Ok(if neg { -x } else { x })
}

/// The op after `vN =`: returns it with placeholder operands, the operand references and,
/// for an `input`, its name.
fn op(c: &mut Cursor) -> Result<(Op, Vec<Ref>, Option<String>), ReadError> {
    let (m, mpos) = c.word("an op")?;
    let mut refs = Vec::new();
    let arg = |c: &mut Cursor, refs: &mut Vec<Ref>| -> Result<Value, ReadError> {
        refs.push(c.entity("v", "a value")?);
        Ok(Value::from_u32(0))
    };
    let op = match m.as_str() {
        "input" => {
            let index = c.u32("an input index")?;
            let name = match c.peek() {
                Tok::Str(_) => Some(c.string("a name")?),
                _ => None,
            };
            let inout = c.eat_word("inout");
            return Ok((Op::Input { index, inout }, refs, name));
        }
        "const" => Op::Const {
            value: f64_literal(c)?,
        },
        "iota" => {
            c.keyword("axis")?;
            Op::Iota {
                axis: c.u32("an axis")?,
            }
        }
        "select" => {
            let cond = arg(c, &mut refs)?;
            c.punct(',')?;
            let on_true = arg(c, &mut refs)?;
            c.punct(',')?;
            let on_false = arg(c, &mut refs)?;
            Op::Select {
                cond,
                on_true,
                on_false,
            }
        }
        "cast" => Op::Cast {
            arg: arg(c, &mut refs)?,
        },
        "broadcast" => Op::Broadcast {
            arg: arg(c, &mut refs)?,
        },
        "reshape" => Op::Reshape {
            arg: arg(c, &mut refs)?,
        },
        "permute" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("perm")?;
            let perm = c.bracket_list(|c| c.u32("an axis"))?;
            Op::Permute { arg: a, perm }
        }
        "slice" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("axis")?;
            let axis = c.u32("an axis")?;
            c.punct(',')?;
            c.keyword("start")?;
            let start = c.u64("a start index")?;
            Op::Slice {
                arg: a,
                axis,
                start,
            }
        }
        "concat" => {
            let args = c.bracket_list(|c| arg(c, &mut refs))?;
            c.punct(',')?;
            c.keyword("axis")?;
            Op::Concat {
                args,
                axis: c.u32("an axis")?,
            }
        }
        "matmul" => {
            let lhs = arg(c, &mut refs)?;
            c.punct(',')?;
            let rhs = arg(c, &mut refs)?;
            Op::MatMul { lhs, rhs }
        }
        "attention" => {
            let logits = arg(c, &mut refs)?;
            c.punct(',')?;
            let v = arg(c, &mut refs)?;
            let bound = if c.eat_punct(',') {
                c.keyword("bound")?;
                Some(arg(c, &mut refs)?)
            } else {
                None
            };
            Op::Attention { logits, v, bound }
        }
        "attention_stat.max" | "attention_stat.sum" => {
            let stat = if m == "attention_stat.max" {
                RowStat::Max
            } else {
                RowStat::Sum
            };
            let logits = arg(c, &mut refs)?;
            let bound = if c.eat_punct(',') {
                c.keyword("bound")?;
                Some(arg(c, &mut refs)?)
            } else {
                None
            };
            Op::AttentionStat {
                logits,
                bound,
                stat,
            }
        }
        "update" => {
            let dst = arg(c, &mut refs)?;
            c.punct(',')?;
            let rows = arg(c, &mut refs)?;
            // `update dst, rows` writes the whole tensor; `, at pos, axis k` writes rows.
            let at = if c.eat_punct(',') {
                c.keyword("at")?;
                let pos = arg(c, &mut refs)?;
                c.punct(',')?;
                c.keyword("axis")?;
                Some(UpdateAt {
                    pos,
                    axis: c.u32("an axis")?,
                })
            } else {
                None
            };
            Op::Update { dst, rows, at }
        }
        "gather" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            let index = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("axis")?;
            Op::Gather {
                arg: a,
                index,
                axis: c.u32("an axis")?,
            }
        }
        "grad" => {
            let wrt = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("of")?;
            let outputs = c.bracket_list(|c| arg(c, &mut refs))?;
            c.punct(',')?;
            c.keyword("seeds")?;
            let seeds = c.bracket_list(|c| arg(c, &mut refs))?;
            Op::Grad {
                wrt,
                outputs,
                seeds,
            }
        }
        "softmax" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("axis")?;
            Op::Softmax {
                arg: a,
                axis: c.u32("an axis")?,
            }
        }
        "topk.values" | "topk.indices" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("axis")?;
            let axis = c.u32("an axis")?;
            let largest = if c.eat_punct(',') {
                c.keyword("smallest")?;
                false
            } else {
                true
            };
            Op::TopK {
                arg: a,
                axis,
                largest,
                indices: m == "topk.indices",
            }
        }
        "cumsum" => {
            let a = arg(c, &mut refs)?;
            c.punct(',')?;
            c.keyword("axis")?;
            Op::Cumsum {
                arg: a,
                axis: c.u32("an axis")?,
            }
        }
        m => {
            if let Some(r) = m.strip_prefix("reduce.") {
                let Some(op) = REDUCE_OPS.into_iter().find(|x| reduce_name(*x) == r) else {
                    return Err(mpos.error(format!("unknown reduction `{m}`")));
                };
                let a = arg(c, &mut refs)?;
                c.punct(',')?;
                c.keyword("axis")?;
                Op::Reduce {
                    op,
                    arg: a,
                    axis: c.u32("an axis")?,
                }
            } else if let Some(op) = UNARY_OPS.into_iter().find(|x| unary_name(*x) == m) {
                Op::Unary {
                    op,
                    arg: arg(c, &mut refs)?,
                }
            } else if let Some(op) = BINARY_OPS.into_iter().find(|x| binary_name(*x) == m) {
                let lhs = arg(c, &mut refs)?;
                c.punct(',')?;
                let rhs = arg(c, &mut refs)?;
                Op::Binary { op, lhs, rhs }
            } else {
                return Err(mpos.error(format!("unknown op `{m}`")));
            }
        }
    };
    Ok((op, refs, None))
}
