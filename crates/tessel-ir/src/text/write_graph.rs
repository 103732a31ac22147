//! The graph IR printer.

use super::{binary_name, fmt_f64, group_kind_name, name, quote, reduce_name, unary_name};
use crate::entities::{Group, Value};
use crate::graph::{Fusion, Graph, Op, RowStat, Schedule, Schedules, UpdateAt};
use cranelift_entity::{packed_option::PackedOption, EntityRef, SecondaryMap};
use std::fmt::Write;

/// Prints `g` and, when given, its fusion groups and schedules, in the textual form that
/// [`super::read_graph`] reads back. Deterministic: the same IR always gives the same text.
///
/// ```text
/// graph hidden_norm {
///   v0 = input 0 "x" : bf16[4096, 5120]
///   v1 = cast v0 : f32[4096, 5120]
///   v2 = reduce.sum v1, axis 1 : f32[4096, 1]
///   output "out" = v2
///   g0 = row_reduction outputs [v2] reductions [v2] tile row_reduction { threads_per_row: 256, rows_per_cta: 1, vector: 8 } why "..."
/// }
/// ```
///
/// Parts of the IR that the compact form cannot imply are spelled out, so that even an IR
/// the verifier rejects prints faithfully: `input "x" = v0` lines when [`Graph::inputs`] is
/// not the list the `input` ops imply, and `writer v3 = g1` / `writer v3 = none` lines where
/// [`Fusion::writer`] differs from what the groups' outputs imply. A schedule for a group
/// that does not exist prints as `schedule g5 = ...` (it does not read back).
pub fn write_graph(g: &Graph, fusion: Option<&Fusion>, schedules: Option<&Schedules>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "graph {} {{", name(&g.name));
    for (v, op) in g.ops.iter() {
        let _ = writeln!(out, "  {v} = {} : {}", op_text(g, v, op), g.types[v]);
    }
    for (n, v) in &g.outputs {
        let _ = writeln!(out, "  output {} = {v}", quote(n));
    }
    if implied_inputs(g) != g.inputs {
        for (n, v) in &g.inputs {
            let _ = writeln!(out, "  input {} = {v}", quote(n));
        }
    }
    if let Some(f) = fusion {
        for (grp, data) in f.groups.iter() {
            let _ = write!(
                out,
                "  {grp} = {} outputs [{}] reductions [{}]",
                group_kind_name(data.kind()),
                list(&data.outputs),
                list(&data.ops.listed())
            );
            if let Some(Some(s)) = schedules.and_then(|s| s.get(grp)) {
                let _ = write!(out, " {}", schedule_text(s));
            }
            out.push('\n');
        }
        let implied = implied_writer(f);
        let len = implied.keys().count().max(f.writer.keys().count());
        for i in 0..len {
            let v = Value::new(i);
            if implied[v] != f.writer[v] {
                match f.writer[v].expand() {
                    Some(grp) => {
                        let _ = writeln!(out, "  writer {v} = {grp}");
                    }
                    None => {
                        let _ = writeln!(out, "  writer {v} = none");
                    }
                }
            }
        }
        for (v, base) in f.alias.iter() {
            if let Some(base) = base.expand() {
                let _ = writeln!(out, "  alias {v} = {base}");
            }
        }
    }
    if let Some(s) = schedules {
        let ngroups = fusion.map_or(0, |f| f.groups.len());
        for (grp, sched) in s.iter() {
            if let Some(sched) = sched {
                if grp.index() >= ngroups {
                    let _ = writeln!(out, "  schedule {grp} = {}", schedule_text(sched));
                }
            }
        }
    }
    out.push_str("}\n");
    out
}

fn list(vs: &[Value]) -> String {
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn schedule_text(s: &Schedule) -> String {
    format!("tile {} why {}", s.tile, quote(&s.why))
}

/// The input list the `input` ops imply: each named input op, stably sorted by index.
pub(crate) fn implied_inputs(g: &Graph) -> Vec<(String, Value)> {
    let mut ins: Vec<(u32, String, Value)> = Vec::new();
    for (v, op) in g.ops.iter() {
        if let Op::Input { index, .. } = op {
            if let Some((n, _)) = g.inputs.iter().find(|(_, x)| *x == v) {
                ins.push((*index, n.clone(), v));
            }
        }
    }
    ins.sort_by_key(|(i, _, _)| *i);
    ins.into_iter().map(|(_, n, v)| (n, v)).collect()
}

/// The writer table that [`Fusion::new_group`] builds from the groups alone.
pub(crate) fn implied_writer(f: &Fusion) -> SecondaryMap<Value, PackedOption<Group>> {
    let mut w = SecondaryMap::new();
    for (grp, data) in f.groups.iter() {
        for &v in &data.outputs {
            w[v] = grp.into();
        }
    }
    w
}

fn op_text(g: &Graph, v: Value, op: &Op) -> String {
    match op {
        Op::Input { index, inout } => {
            let name = match g.inputs.iter().find(|(_, x)| *x == v) {
                Some((n, _)) => format!(" {}", quote(n)),
                None => String::new(),
            };
            let inout = if *inout { " inout" } else { "" };
            format!("input {index}{name}{inout}")
        }
        Op::Const { value } => format!("const {}", fmt_f64(*value)),
        Op::Iota { axis } => format!("iota axis {axis}"),
        Op::Unary { op, arg } => format!("{} {arg}", unary_name(*op)),
        Op::Binary { op, lhs, rhs } => format!("{} {lhs}, {rhs}", binary_name(*op)),
        Op::Select {
            cond,
            on_true,
            on_false,
        } => format!("select {cond}, {on_true}, {on_false}"),
        Op::Cast { arg } => format!("cast {arg}"),
        Op::Broadcast { arg } => format!("broadcast {arg}"),
        Op::Reshape { arg } => format!("reshape {arg}"),
        Op::Permute { arg, perm } => {
            let p: Vec<String> = perm.iter().map(|x| x.to_string()).collect();
            format!("permute {arg}, perm [{}]", p.join(", "))
        }
        Op::Reduce { op, arg, axis } => format!("reduce.{} {arg}, axis {axis}", reduce_name(*op)),
        Op::Slice { arg, axis, start } => format!("slice {arg}, axis {axis}, start {start}"),
        Op::Concat { args, axis } => format!("concat [{}], axis {axis}", list(args)),
        Op::Softmax { arg, axis } => format!("softmax {arg}, axis {axis}"),
        Op::TopK {
            arg,
            axis,
            largest,
            indices,
        } => {
            let part = if *indices { "indices" } else { "values" };
            let order = if *largest { "" } else { ", smallest" };
            format!("topk.{part} {arg}, axis {axis}{order}")
        }
        Op::Cumsum { arg, axis } => format!("cumsum {arg}, axis {axis}"),
        Op::MatMul { lhs, rhs } => format!("matmul {lhs}, {rhs}"),
        Op::Attention {
            logits,
            v,
            bound: None,
        } => format!("attention {logits}, {v}"),
        Op::Attention {
            logits,
            v,
            bound: Some(b),
        } => format!("attention {logits}, {v}, bound {b}"),
        Op::AttentionStat {
            logits,
            bound,
            stat,
        } => {
            let which = match stat {
                RowStat::Max => "max",
                RowStat::Sum => "sum",
            };
            match bound {
                None => format!("attention_stat.{which} {logits}"),
                Some(b) => format!("attention_stat.{which} {logits}, bound {b}"),
            }
        }
        Op::Update {
            dst,
            rows,
            at: None,
        } => format!("update {dst}, {rows}"),
        Op::Update {
            dst,
            rows,
            at: Some(UpdateAt { pos, axis }),
        } => format!("update {dst}, {rows}, at {pos}, axis {axis}"),
        Op::Gather { arg, index, axis } => format!("gather {arg}, {index}, axis {axis}"),
        Op::Grad {
            wrt,
            outputs,
            seeds,
        } => format!(
            "grad {wrt}, of [{}], seeds [{}]",
            list(outputs),
            list(seeds)
        ),
    }
}
