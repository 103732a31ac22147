#!/usr/bin/env python3
"""Derives every polynomial coefficient and split constant of tessel-math.

Run: `python3 crates/tessel-math/scripts/remez.py` (needs mpmath; 60-digit arithmetic).

Polynomials: a plain Remez exchange for the weighted minimax problem
    min_c max_{t in [a,b]} |w(t) * (g(t) - sum_i c_i t^i)|
(E. Remez 1934; as presented in J.-M. Muller, "Elementary Functions: Algorithms and
Implementation", 3rd ed., Birkhauser 2016, section 3.6). The reference is initialised at
Chebyshev extrema and the error extrema are located on a dense grid each iteration. After the fit
every coefficient is rounded to f32 (round to nearest even, which is what Python's struct 'f' does)
and the error of the *rounded* polynomial is reported, which is the number that matters.

Constants: pi is computed by mpmath at 300 bits; the multi-part splits are done here so each part is
the f32 rounding of the remainder left by the previous parts.
"""
import struct
import mpmath as mp

mp.mp.dps = 60


def f32(v):
    return struct.unpack('<f', struct.pack('<f', float(v)))[0]


def hexf(v):
    return '0x%08x' % struct.unpack('<I', struct.pack('<f', v))[0]


def remez(g, w, a, b, n, iters=30, grid=6001, lo=0):
    """Minimax polynomial sum_{j=lo..n} c_j t^j for g on [a,b] with weight w (returns c_lo..c_n)."""
    a, b = mp.mpf(a), mp.mpf(b)
    m = n - lo + 2
    ref = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * i / (m - 1)) for i in range(m)]
    pts = [a + (b - a) * i / grid for i in range(grid + 1)]
    gv = [g(t) for t in pts]
    wv = [w(t) for t in pts]
    c = None
    for _ in range(iters):
        A = mp.matrix(m, m)
        rhs = mp.matrix(m, 1)
        for i, t in enumerate(ref):
            for j in range(lo, n + 1):
                A[i, j - lo] = t ** j
            A[i, n - lo + 1] = (-1) ** i / w(t)
            rhs[i] = g(t)
        sol = mp.lu_solve(A, rhs)
        c = [sol[j] for j in range(n - lo + 1)]
        err = [wv[i] * (gv[i] - sum(c[j] * pts[i] ** (j + lo) for j in range(len(c))))
               for i in range(len(pts))]
        # local extrema with alternating signs
        ext = []
        for i in range(len(pts)):
            left = err[i - 1] if i > 0 else None
            right = err[i + 1] if i < len(pts) - 1 else None
            e = err[i]
            if (left is None or abs(e) >= abs(left)) and (right is None or abs(e) >= abs(right)):
                if ext and mp.sign(ext[-1][1]) == mp.sign(e):
                    if abs(e) > abs(ext[-1][1]):
                        ext[-1] = (pts[i], e)
                else:
                    ext.append((pts[i], e))
        while len(ext) > m:
            # drop the smaller end
            if abs(ext[0][1]) < abs(ext[-1][1]):
                ext.pop(0)
            else:
                ext.pop()
        if len(ext) == m:
            ref = [t for t, _ in ext]
    maxerr = max(abs(e) for e in err)
    return c, maxerr


def rounded_error(g, w, a, b, c32, grid=20001):
    a, b = mp.mpf(a), mp.mpf(b)
    worst = 0
    for i in range(grid + 1):
        t = a + (b - a) * i / grid
        worst = max(worst, abs(w(t) * (g(t) - mp.polyval([mp.mpf(x) for x in c32[::-1]], t))))
    return worst


def fit(name, g, w, a, b, n, refit=True):
    # The weights below vanish at 0 (the fitted term is negligible there), which would make the
    # Remez system singular, so an interval starting at 0 starts a hair above it instead.
    if a == 0:
        a = mp.mpf(b) * mp.mpf('1e-9')
    c, e = remez(g, w, a, b, n)
    # (Not on an interval with 0 inside: there the basis t^i, t^(i+1), ... is no Haar system and
    # the exchange breaks down, so those coefficients are rounded all at once.)
    # Rounding all coefficients at once loses most of the fit; instead round the lowest one, refit
    # the others with it fixed, and so on ("fix and refit": Brisebarre, Muller & Tisserand 2006 do
    # this optimally with lattice reduction; this greedy variant is enough at f32).
    c32 = [] if refit else [f32(x) for x in c]
    for i in range(n + 1 if refit else 0):
        fixed = list(c32)
        gi = lambda t, fixed=fixed, i=i: g(t) - sum(mp.mpf(fixed[j]) * t ** j for j in range(i))
        ci_all, _ = remez(gi, w, a, b, n, lo=i)
        c32.append(f32(ci_all[0]))
    e32 = rounded_error(g, w, a, b, c32)
    print(f'{name}: degree {n} on [{a}, {b}], minimax weighted error {mp.nstr(e, 5)} '
          f'(2^{mp.nstr(mp.log(e, 2), 4)}), after f32 rounding {mp.nstr(e32, 5)} (2^{mp.nstr(mp.log(e32, 2), 4)})')
    for i, x in enumerate(c32):
        print(f'    c{i} = {x!r:>24}  // {hexf(x)}   exact fit {mp.nstr(c[i], 20)}')
    return c32


def series_or(fn, series, t, cut):
    """Evaluate a cancellation-prone quotient by its Taylor series near 0."""
    return series(t) if t < cut else fn(t)


# sin(r) = r + r^3 S(z), z = r^2, |r| <= 0.88 (see sincos.rs for the bound on |r|).
R_SIN = mp.mpf('0.88')
def g_sin(z):
    if abs(z) < mp.mpf('1e-20'):
        return mp.mpf(-1) / 6
    r = mp.sqrt(z)
    return (mp.sin(r) - r) / r ** 3
fit('sin S(z)', g_sin, lambda z: (z ** 1.5 / mp.sin(mp.sqrt(z))) if z > 0 else 0 * z + 0, 0, R_SIN ** 2, 3)

# cos(r) = 1 - z/2 + z^2 C(z)
def g_cos(z):
    if abs(z) < mp.mpf('1e-20'):
        return mp.mpf(1) / 24
    return (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z ** 2
fit('cos C(z)', g_cos, lambda z: z ** 2 / mp.cos(mp.sqrt(z)), 0, R_SIN ** 2, 3)

# exp(r) = 1 + r + r^2/2 + r^3 P(r), |r| <= 0.35
def g_exp(r):
    if abs(r) < mp.mpf('1e-20'):
        return mp.mpf(1) / 6
    return (mp.exp(r) - 1 - r - r * r / 2) / r ** 3
# The weight r^3/exp(r) vanishes inside the interval (Remez needs it non-zero), so the fit bounds
# the error by its value at the ends: |r|^3 <= 0.35^3.
fit('exp P(r)', g_exp, lambda r: mp.mpf('0.35') ** 3 / mp.exp(r), -0.35, 0.35, 5, refit=False)

# log(m) = 2 atanh(s) = 2s + 2s^3/3 + s^5 A(z), z = s^2, |s| <= 0.1716 (s = f/(2+f), m in [sqrt(1/2), sqrt(2)))
S_MAX = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)
def g_log(z):
    if abs(z) < mp.mpf('1e-20'):
        return mp.mpf(2) / 5
    s = mp.sqrt(z)
    return (2 * mp.atanh(s) - 2 * s - 2 * s ** 3 / 3) / s ** 5
fit('log A(z)', g_log, lambda z: z ** 2.5 / (2 * mp.atanh(mp.sqrt(z))) if z > 0 else 0 * z, 0, S_MAX ** 2 * mp.mpf('1.0001'), 4)

# tanh(x) = x + x^3 T(z), z = x^2, |x| <= 0.25 (above, tanh goes through exp)
R_TANH = mp.mpf('0.25')
def g_tanh(z):
    if abs(z) < mp.mpf('1e-20'):
        return mp.mpf(-1) / 3
    x = mp.sqrt(z)
    return (mp.tanh(x) - x) / x ** 3
fit('tanh T(z)', g_tanh, lambda z: z ** 1.5 / mp.tanh(mp.sqrt(z)) if z > 0 else 0 * z, 0, R_TANH ** 2, 4)

# erf(x) = x + x Q(z), z = x^2, |x| < 1 (above, erf = 1 - exp(-x^2) R(x - 2.5); erf.rs)
def g_erf(z):
    if abs(z) < mp.mpf('1e-20'):
        return 2 / mp.sqrt(mp.pi) - 1
    x = mp.sqrt(z)
    return (mp.erf(x) - x) / x
fit('erf Q(z)', g_erf, lambda z: mp.sqrt(z) / mp.erf(mp.sqrt(z)) if z > 0 else 0 * z + 1, 0, 1, 7)

# erfc(x) exp(x^2) = R(t), t = x - 2.5, 1 <= x <= 3.92. The interval holds 0, so the
# coefficients are rounded all at once (no fix-and-refit, see `fit`); the constant term, whose
# rounding alone would cost 2^-24 relative, is kept as an f32 pair. (Run with iters=10,
# grid=1200 and 40 digits for the recorded output: the full grid takes minutes.)
def g_erfcx(t):
    x = t + mp.mpf('2.5')
    return mp.erfc(x) * mp.exp(x * x)
c_r, e_r = remez(g_erfcx, lambda t: 1 / g_erfcx(t), -1.5, 3.92 - 2.5, 13, iters=10, grid=1200)
r32 = [f32(x) for x in c_r]
r0_lo = f32(c_r[0] - mp.mpf(r32[0]))
worst_r = 0
for i in range(4001):
    t = mp.mpf(-1.5) + mp.mpf('2.92') * i / 4000
    p = mp.polyval([mp.mpf(x) for x in r32[:0:-1]], t) * t + mp.mpf(r32[0]) + mp.mpf(r0_lo)
    worst_r = max(worst_r, abs(p / g_erfcx(t) - 1))
print(f'erfc R(t): degree 13 on [-1.5, 1.42], minimax relative error 2^{mp.nstr(mp.log(e_r, 2), 4)}, '
      f'after f32 rounding (R0 as a pair) 2^{mp.nstr(mp.log(worst_r, 2), 4)}')
print(f'    R0 = {r32[0]!r} + {r0_lo!r}  // {hexf(r32[0])} {hexf(r0_lo)}')
for i, x in enumerate(r32[1:]):
    print(f'    c{i + 1} = {x!r:>24}  // {hexf(x)}')

# ---- split constants ----
mp.mp.prec = 400

def split(v, parts):
    out = []
    rest = v
    for _ in range(parts):
        p = f32(rest)
        out.append(p)
        rest = rest - mp.mpf(p)
    return out, rest

print('pi/2 in 4 f32 parts (each the f32 rounding of what is left):')
pio2, rest = split(mp.pi / 2, 4)
for p in pio2:
    print(f'    {p!r:>24}  // {hexf(p)}')
print(f'    remainder {mp.nstr(rest, 5)}')
print('2/pi in f32 and its remainder:')
tp, rest = split(2 / mp.pi, 2)
for p in tp:
    print(f'    {p!r:>24}  // {hexf(p)}')

print('2/pi fraction bits, 32-bit words (for Payne-Hanek):')
frac = 2 / mp.pi
words = []
for _ in range(8):
    frac *= 2 ** 32
    wd = int(mp.floor(frac))
    words.append(wd)
    frac -= wd
print('    ' + ', '.join('0x%08x' % wd for wd in words))

def split_bits(v, bits_first):
    """First part rounded to `bits_first` significant bits (so small integer multiples are exact)."""
    e = mp.floor(mp.log(abs(v), 2))
    q = mp.mpf(2) ** (e - bits_first + 1)
    hi = mp.nint(v / q) * q
    return float(hi), v - hi

ln2 = mp.log(2)
print('ln2 in 2 f32 parts (exp reduction):')
l2, rest = split(ln2, 2)
for p in l2:
    print(f'    {p!r:>24}  // {hexf(p)}')
print(f'    1/ln2 = {f32(1 / ln2)!r}')
print('ln2: 16-bit head (e*head exact for |e| <= 256) and two f32 tails (log):')
hi, rest = split_bits(ln2, 16)
print(f'    {f32(hi)!r:>24}  // {hexf(f32(hi))}')
t, rest = split(rest, 2)
for p in t:
    print(f'    {p!r:>24}  // {hexf(p)}')
print('2/3 as f32 pair:')
t, rest = split(mp.mpf(2) / 3, 2)
for p in t:
    print(f'    {p!r:>24}  // {hexf(p)}')
