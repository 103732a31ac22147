//! The reference's bounds of the ops that select elements or scan along an axis:
//! `argmax`/`argmin`, `topk`, `logsumexp`, `cumsum` (one lane of the axis at a time).
//!
//! Selection is not continuous: two elements within rounding of each other may swap places
//! in a correct kernel (a logit computed by a tensor-core matmul in `fast` against the
//! reference's exact one), so an index's bound is the set of indices that *some* values in
//! the operands' bounds would put there, and a value's bound is the range of the order
//! statistic. Both are hulls — every allowed index lies between the least and the greatest
//! index of the set, and indices in between are allowed too — so they never FAIL a correct
//! kernel, and where the operands are exact (points) they are the exact answer.

use super::bound::{self, from_f32_range, sum_range, Bound, U32};
use crate::oracle::{reduce, topk_order, Neumaier};
use crate::round::round_to;
use tessel_ir::graph::{BinaryOp, ReduceOp, UnaryOp};
use tessel_ir::DType;

/// A bound's place in topk's order as a closed interval of keys: numbers by value, NaN
/// above every number (`(1, 0)`); a bound that may be NaN reaches up to it.
#[derive(Copy, Clone, PartialEq, PartialOrd)]
struct Key(u8, f64);

const NAN_KEY: Key = Key(1, 0.0);

fn key_range(b: &Bound) -> (Key, Key) {
    let lo = if b.empty() { NAN_KEY } else { Key(0, b.lo) };
    let hi = if b.nan { NAN_KEY } else { Key(0, b.hi) };
    (lo, hi)
}

fn point_row(row: &[Bound]) -> bool {
    row.iter().all(|b| b.is_point() || (b.nan && b.empty()))
}

/// The i32 index bound of `argmax` (`largest`) or `argmin` of one lane: the reference is the
/// first extreme of the reference values; allowed is every index whose bound may hold the
/// extreme — some element's allowed set reaches above (below) every certain lower (upper)
/// end, a NaN-possible element always (NaN counts as the extreme of both, as torch's
/// `argmin` takes the first NaN too: `argmin(x)` is `argmax(-x)` with NaN kept NaN).
pub(super) fn arg_extreme(row: &[Bound], largest: bool) -> Bound {
    if !largest {
        let neg: Vec<Bound> = row
            .iter()
            .map(|b| Bound {
                r: -b.r,
                lo: -b.hi,
                hi: -b.lo,
                nan: b.nan,
            })
            .collect();
        return arg_extreme(&neg, true);
    }
    let refs: Vec<f64> = row.iter().map(|b| b.r).collect();
    let r = topk_order(&refs, largest)
        .first()
        .map_or(0.0, |&j| j as f64);
    if point_row(row) {
        return Bound::point(r);
    }
    let ranks = rank_ranges(row, true);
    index_hull(r, &ranks, 0)
}

/// For each element, the least and greatest position it may take in topk's order (best
/// first): before it are surely the elements whose whole range is better than its best
/// value, after it those whose range is worse than its worst. Ties between overlapping
/// ranges count as either order, so the index rule (lower first) needs no separate case.
fn rank_ranges(row: &[Bound], largest: bool) -> Vec<(usize, usize)> {
    let n = row.len();
    let keys: Vec<(Key, Key)> = row.iter().map(key_range).collect();
    let cmp = |a: &Key, b: &Key| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal);
    let mut los: Vec<Key> = keys.iter().map(|k| k.0).collect();
    let mut his: Vec<Key> = keys.iter().map(|k| k.1).collect();
    los.sort_by(cmp);
    his.sort_by(cmp);
    // Elements whose least key is above x / whose greatest key is below x.
    let above = |x: Key| n - los.partition_point(|k| *k <= x);
    let below = |x: Key| his.partition_point(|k| *k < x);
    keys.iter()
        .map(|&(lo, hi)| {
            if largest {
                (above(hi), n - 1 - below(lo))
            } else {
                // Smallest first: before are those surely below, after those surely above.
                (below(lo), n - 1 - above(hi))
            }
        })
        .collect()
}

/// The hull of the indices that may take position `t`, around the reference `r`.
fn index_hull(r: f64, ranks: &[(usize, usize)], t: usize) -> Bound {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for (j, &(a, b)) in ranks.iter().enumerate() {
        if a <= t && t <= b {
            lo = lo.min(j as f64);
            hi = hi.max(j as f64);
        }
    }
    Bound {
        r,
        lo,
        hi,
        nan: false,
    }
    .containing_r()
}

/// `topk` of one lane: `k` bounds of the values (`indices` false, exact elements, so of
/// the operand's dtype with no rounding) or of the i32 indices. The value at position t lies
/// between the t-th best of the elements' least values and the t-th best of their greatest
/// (order statistics are monotone in every argument); the index is one some element whose
/// position range holds t has.
pub(super) fn topk(row: &[Bound], k: usize, largest: bool, indices: bool) -> Vec<Bound> {
    let refs: Vec<f64> = row.iter().map(|b| b.r).collect();
    let order = topk_order(&refs, largest);
    let exact = point_row(row);
    if indices {
        if exact {
            return order[..k].iter().map(|&j| Bound::point(j as f64)).collect();
        }
        let ranks = rank_ranges(row, largest);
        return (0..k)
            .map(|t| index_hull(order[t] as f64, &ranks, t))
            .collect();
    }
    if exact {
        return order[..k].iter().map(|&j| row[j]).collect();
    }
    let cmp = |a: &Key, b: &Key| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal);
    let mut los: Vec<Key> = row.iter().map(|b| key_range(b).0).collect();
    let mut his: Vec<Key> = row.iter().map(|b| key_range(b).1).collect();
    los.sort_by(cmp);
    his.sort_by(cmp);
    if largest {
        los.reverse();
        his.reverse();
    }
    (0..k)
        .map(|t| {
            // The t-th best of the least ends and of the greatest (sorted best first).
            let (a, b) = (los[t], his[t]);
            let nan = a == NAN_KEY || b == NAN_KEY;
            let (lo, hi) = match (a, b) {
                (NAN_KEY, NAN_KEY) => (f64::INFINITY, f64::NEG_INFINITY),
                (Key(_, l), NAN_KEY) => (l, f64::INFINITY),
                (NAN_KEY, Key(_, h)) => (f64::NEG_INFINITY, h),
                (Key(_, l), Key(_, h)) => (l.min(h), l.max(h)),
            };
            Bound {
                r: refs[order[t]],
                lo,
                hi,
                nan,
            }
            .containing_r()
        })
        .collect()
}

/// `logsumexp` of one lane to `dt`, as `decompose` computes it in f32 (`m = max(x)`,
/// `m + log(Σ exp(x - m))`, `m` where `|m| = inf`): the bound follows that sequence of
/// f32 operations through the elementwise and reduction rules; the reference is the exact
/// value (torch's special cases) rounded once to `dt`.
pub(super) fn logsumexp(dt: DType, row: &[Bound]) -> Bound {
    let f = DType::F32;
    let refs = row.iter().map(|b| b.r);
    let r = round_to(dt, reduce(ReduceOp::LogSumExp, refs));
    let m = super::reduce_row(ReduceOp::Max, f, row);
    let e: Vec<Bound> = row
        .iter()
        .map(|x| {
            let d = bound::binary(BinaryOp::Sub, f, f, x, &m);
            bound::unary(UnaryOp::Exp, f, &d)
        })
        .collect();
    let s = super::reduce_row(ReduceOp::Sum, f, &e);
    let l = bound::unary(UnaryOp::Log, f, &s);
    let sum = bound::binary(BinaryOp::Add, f, f, &m, &l);
    let am = bound::unary(UnaryOp::Abs, f, &m);
    let inf = Bound::point(f64::INFINITY);
    let infinite = bound::binary(BinaryOp::Eq, f, DType::Bool, &am, &inf);
    let out = bound::select(&infinite, &m, &sum);
    Bound {
        r,
        ..bound::cast(f, dt, &out)
    }
    .containing_r()
}

/// `cumsum` of one lane of dtype `dt`: each prefix is a sum of its terms in f32 (i32 for
/// i32, wrapping) in some fixed order, so its bound is the sum's: the exact sums of the
/// ends widened by `γ_i · Σ|x|` (any order of i additions, Higham 2002 §4.2), rounded
/// once to `dt`; the reference is the exact prefix rounded once.
pub(super) fn cumsum(dt: DType, row: &[Bound]) -> Vec<Bound> {
    let (mut r, mut lo, mut hi, mut abs) = (
        Neumaier::default(),
        Neumaier::default(),
        Neumaier::default(),
        Neumaier::default(),
    );
    let (mut nonneg, mut nonpos, mut nan, mut any_empty) = (true, true, false, false);
    let mut all_points = true;
    let (mut ilo, mut ihi) = (0.0f64, 0.0f64);
    let mut out = Vec::with_capacity(row.len());
    for (i, b) in row.iter().enumerate() {
        r.add(b.r);
        nan |= b.nan;
        any_empty |= b.empty();
        all_points &= b.is_point();
        if dt == DType::I32 {
            ilo += b.lo;
            ihi += b.hi;
            let rr = r.value() as i64 as i32 as f64;
            out.push(if all_points {
                Bound::point(rr)
            } else if ilo >= i32::MIN as f64 && ihi <= i32::MAX as f64 {
                Bound {
                    r: rr,
                    lo: ilo,
                    hi: ihi,
                    nan: false,
                }
                .containing_r()
            } else {
                Bound {
                    r: rr,
                    lo: i32::MIN as f64,
                    hi: i32::MAX as f64,
                    nan: false,
                }
            });
            continue;
        }
        if any_empty {
            out.push(Bound::point(f64::NAN));
            continue;
        }
        lo.add(b.lo);
        hi.add(b.hi);
        abs.add(b.lo.abs().max(b.hi.abs()));
        nonneg &= b.lo >= 0.0;
        nonpos &= b.hi <= 0.0;
        let (mut l, mut h, overflow) =
            sum_range(lo.value(), hi.value(), abs.value(), i as u64 + 1, U32);
        if nonneg {
            l = l.max(0.0);
        }
        if nonpos {
            h = h.min(0.0);
        }
        let nan = nan || overflow || l.is_nan() || h.is_nan();
        out.push(from_f32_range(dt, r.value(), l, h, nan));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(r: f64, lo: f64, hi: f64) -> Bound {
        Bound {
            r,
            lo,
            hi,
            nan: false,
        }
    }

    /// Two values within rounding of each other: either index is allowed, whichever the
    /// reference picks; a value surely below both is not.
    #[test]
    fn near_ties_allow_either_index() {
        let row = [
            range(1.0, 0.99, 1.01),
            range(0.0, -0.1, 0.1),
            range(1.0, 0.995, 1.005),
        ];
        let b = arg_extreme(&row, true);
        assert_eq!(b.r, 0.0);
        assert!(b.allows(0.0) && b.allows(2.0));
        let exact = [Bound::point(1.0), Bound::point(3.0), Bound::point(3.0)];
        assert!(arg_extreme(&exact, true).is_point());
        assert_eq!(arg_extreme(&exact, true).r, 1.0);
        // argmin: index 1 surely; a possible NaN elsewhere is allowed too (NaN is the
        // extreme of both).
        let mut row = row;
        row[2].nan = true;
        let b = arg_extreme(&row, false);
        assert_eq!(b.r, 1.0);
        assert!(b.allows(1.0) && b.allows(2.0) && !b.allows(0.0));
    }

    /// The t-th best value lies between the t-th best least and greatest ends.
    #[test]
    fn topk_values_are_order_statistics() {
        let row = [
            range(1.0, 0.9, 1.1),
            range(2.0, 1.0, 3.0),
            range(0.0, -1.0, 0.5),
        ];
        let v = topk(&row, 3, true, false);
        assert_eq!((v[0].lo, v[0].hi), (1.0, 3.0));
        assert_eq!((v[1].lo, v[1].hi), (0.9, 1.1));
        assert_eq!((v[2].lo, v[2].hi), (-1.0, 0.5));
        let i = topk(&row, 3, true, true);
        assert!(i[0].allows(0.0) && i[0].allows(1.0) && !i[0].allows(2.0));
        assert!(i[2].is_point() && i[2].r == 2.0);
    }
}
