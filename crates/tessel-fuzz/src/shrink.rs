//! Shrinking: the smallest program that still fails the same way (Csmith's and
//! YARPGen's practice of reducing a failing test before anyone reads it; the greedy
//! one-change-at-a-time loop of delta debugging, Zeller & Hildebrandt, "Simplifying and
//! Isolating Failure-Inducing Input", IEEE TSE 2002).
//!
//! Each candidate is one change — keep one output, turn a `let` into a parameter of its
//! type (cutting off what computed it), replace a `let` by one of its operands of the same
//! type, bind a dim to a smaller value — followed by removing what no output uses. A
//! candidate is kept if it is lighter ([`Program::weight`]) and the oracle `still_fails`
//! says it fails as before; the loop stops when no candidate is kept.

use crate::program::Program;

/// Shrinks `p` while `still_fails` holds, trying at most `budget` candidates.
pub fn shrink(p: &Program, budget: usize, still_fails: impl Fn(&Program) -> bool) -> Program {
    // Even removing what no output reads is a candidate: inputs are seeded by position, so
    // dropping an unused parameter changes the others' values, and with them the failure.
    let mut best = p.clone();
    let mut tried = 0;
    'outer: loop {
        for c in candidates(&best) {
            let c = prune(c);
            if c.weight() >= best.weight() || c == best {
                continue;
            }
            tried += 1;
            if tried > budget {
                break 'outer;
            }
            if still_fails(&c) {
                best = c;
                continue 'outer;
            }
        }
        break;
    }
    best
}

/// Every one-change simplification of `p`, the largest cuts first.
fn candidates(p: &Program) -> Vec<Program> {
    let mut out = vec![p.clone()];
    if p.outputs.len() > 1 {
        for o in &p.outputs {
            let mut c = p.clone();
            c.outputs = vec![o.clone()];
            out.push(c);
        }
    }
    // A let becomes a parameter of its type: everything that computed it goes.
    for i in (0..p.lets.len()).rev() {
        let mut c = p.clone();
        let l = c.lets.remove(i);
        for (n, t) in l.names.iter().zip(&l.tys) {
            if t.shape.iter().all(|d| d.is_plain()) {
                c.params.push((n.clone(), t.clone()));
            } else {
                // A signature names dims as symbols or literals: use the values.
                let shape = t
                    .shape
                    .iter()
                    .map(|d| crate::program::Dim::Lit(d.value(&c.dims)))
                    .collect();
                c.params
                    .push((n.clone(), crate::program::Ty::new(t.dtype, shape)));
            }
        }
        out.push(c);
    }
    // A let replaced by one of its operands of its type.
    for i in 0..p.lets.len() {
        let l = &p.lets[i];
        if l.names.len() != 1 {
            continue;
        }
        for o in &l.operands {
            if p.ty_of(o) == Some(&l.tys[0]) {
                let mut c = p.clone();
                let from = c.lets.remove(i).names.remove(0);
                rename(&mut c, &from, o);
                out.push(c);
            }
        }
    }
    // Smaller dims.
    for k in 0..p.dims.len() {
        let v = p.dims[k];
        let mut vals = vec![1, 2, 3, v / 2, v - 1];
        vals.retain(|&x| x >= 1 && x < v);
        vals.dedup();
        for x in vals {
            let mut c = p.clone();
            c.dims[k] = x;
            out.push(c);
        }
    }
    out
}

/// Every use of `from` (operands and outputs) renamed to `to`.
fn rename(p: &mut Program, from: &str, to: &str) {
    for l in &mut p.lets {
        for o in &mut l.operands {
            if o == from {
                *o = to.to_string();
            }
        }
    }
    for o in &mut p.outputs {
        if o == from {
            *o = to.to_string();
        }
    }
    p.outputs.dedup();
}

/// Removes lets and parameters no output needs.
pub fn prune(mut p: Program) -> Program {
    let mut live: Vec<String> = p.outputs.clone();
    let mut keep = vec![false; p.lets.len()];
    for i in (0..p.lets.len()).rev() {
        let l = &p.lets[i];
        if l.names.iter().any(|n| live.contains(n)) {
            keep[i] = true;
            live.extend(l.operands.iter().cloned());
        }
    }
    let mut it = keep.into_iter();
    p.lets.retain(|_| it.next().unwrap_or(false));
    p.params.retain(|(n, _)| live.contains(n));
    let params: Vec<String> = p.params.iter().map(|(n, _)| n.clone()).collect();
    p.inout.retain(|n| params.contains(n));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Dim, Let, Ty};
    use tessel_ir::DType;

    fn f32s(dims: &[usize]) -> Ty {
        Ty::new(DType::F32, dims.iter().map(|&k| Dim::Sym(k)).collect())
    }

    #[test]
    fn shrinks_to_the_failing_part() {
        // t1 "fails" whenever it exists with D0 >= 2; t0 and a1 are noise.
        let p = Program {
            dims: vec![8, 5],
            params: vec![("a0".into(), f32s(&[0])), ("a1".into(), f32s(&[1]))],
            inout: vec![],
            lets: vec![
                Let {
                    names: vec!["t0".into()],
                    tys: vec![f32s(&[1])],
                    template: "exp({0})".into(),
                    operands: vec!["a1".into()],
                },
                Let {
                    names: vec!["t1".into()],
                    tys: vec![f32s(&[0])],
                    template: "-{0}".into(),
                    operands: vec!["a0".into()],
                },
            ],
            outputs: vec!["t1".into(), "t0".into()],
            grad: None,
        };
        let s = shrink(&p, 1000, |c| {
            c.lets.iter().any(|l| l.names[0] == "t1") && c.dims[0] >= 2
        });
        assert_eq!(s.outputs, vec!["t1".to_string()]);
        assert_eq!(s.lets.len(), 1);
        assert_eq!(s.params.len(), 1);
        assert_eq!(s.dims[0], 2);
    }
}
