"""test_fp8_formats.py — kernels/cuda/tcu_fp8.h (the FP8 formats the emulator and the CUDA backend
share) against a float64 reference written here from the formats' definition (the OCP 8-bit
floating point specification; NVIDIA's E4M3 "FN" variant without infinities):

  - decode: every one of the 256 bit patterns of E4M3 and of E5M2, value and sign (zeros, NaNs);
  - encode(decode(b)) == b for every finite pattern, with and without saturation;
  - rounding: the values beside and between every pair of neighbours (each FP8 value, the
    midpoints, one fp32 ulp either side of both), the overflow boundary (the midpoint between the
    largest finite value and the next power's step: 464 for E4M3, 61440 for E5M2), infinities,
    NaNs, fp32 subnormals and random fp32 values, each encoded with and without saturation and
    compared with the reference's round to nearest even;
  - the tensorwise scale (448 / amax rounded once to fp32; 1 for amax 0 or not finite, the inverse
    NaN there; FLT_MAX where the quotient overflows) and its inverse.

build/tests/fp8_dump runs the header's functions; the reference never calls them.
"""
import bisect
import math
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tap import Tap  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
DUMP = os.path.join(os.environ.get("TSR_ROOT", "."), BUILD, "tests", "fp8_dump")

# exponent bits, mantissa bits, bias, has infinities
FORMATS = {0: ("E4M3", 4, 3, 7, False), 1: ("E5M2", 5, 2, 15, True)}


def ref_decode(fmt, b):
    _, e_bits, m_bits, bias, has_inf = FORMATS[fmt]
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> m_bits) & ((1 << e_bits) - 1), b & ((1 << m_bits) - 1)
    top = (1 << e_bits) - 1
    if has_inf and e == top:
        return sign * math.inf if m == 0 else math.copysign(math.nan, sign)
    if not has_inf and e == top and m == (1 << m_bits) - 1:
        return math.copysign(math.nan, sign)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2 ** m_bits) * 2.0 ** (e - bias)


def finite_codes(fmt):
    """the non-negative finite values in order, with their codes"""
    return [(ref_decode(fmt, b), b) for b in range(128) if math.isfinite(ref_decode(fmt, b))]


FINITE = {fmt: finite_codes(fmt) for fmt in FORMATS}


def ref_encode(fmt, x, sat):
    """round to nearest even over the format's values, as if the exponent went on; past the
    largest finite value: saturate, or NaN (E4M3) / infinity (E5M2)"""
    _, e_bits, m_bits, bias, has_inf = FORMATS[fmt]
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    vals = FINITE[fmt]
    maxv, maxcode = vals[-1]
    over = maxcode if sat else (0x7C if has_inf else 0x7F)
    a = abs(x)
    if math.isinf(a):
        return sign | over
    step = 2.0 ** (math.floor(math.log2(maxv)) - m_bits)  # the top binade's spacing
    grid = [v for v, _ in vals] + [maxv + step]            # the next value, were there one
    codes = [c for _, c in vals] + [maxcode + 1]
    if a >= grid[-1]:
        return sign | over
    i = bisect.bisect_right(grid, a) - 1
    lo, hi = grid[i], grid[i + 1]
    if a - lo < hi - a or (a - lo == hi - a and codes[i] % 2 == 0):
        code = codes[i]
    else:
        code = codes[i + 1]
    return sign | (over if code > maxcode else code)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def is_f32(x):
    return math.isnan(x) or bits_f32(f32_bits(x)) == x


def rounding_cases(fmt, rng):
    vals = [v for v, _ in finite_codes(fmt)]
    step = 2.0 ** (math.floor(math.log2(vals[-1])) - FORMATS[fmt][2])
    vals.append(vals[-1] + step)
    pts = set()
    for lo, hi in zip(vals, vals[1:]):
        for p in (lo, (lo + hi) / 2):
            u = f32_bits(p)
            pts.update(bits_f32(v) for v in (u - 1, u, u + 1) if 0 <= v < 0x7F800000)
    pts.update(bits_f32(f32_bits(v)) for v in (0.0, math.inf, 2.0 ** -149, 2.0 ** -126,
                                               3.4028234663852886e38, 1e-30, 1e30))
    for _ in range(3000):  # log-uniform over the formats' range and beyond
        pts.add(bits_f32(f32_bits(2.0 ** rng.uniform(-22, 18) * rng.uniform(1, 2))))
    for _ in range(1000):  # any fp32 pattern that is a number
        u = rng.getrandbits(31)
        if u < 0x7F800000:
            pts.add(bits_f32(u))
    xs = sorted(pts)
    return xs + [-x for x in xs] + [math.nan]


def run(args, lines=None):
    out = subprocess.run([DUMP] + args, input="".join(lines) if lines else None,
                         capture_output=True, text=True, check=True)
    return out.stdout.split("\n")[:-1]


def same_value(got, want):
    if math.isnan(want):
        return math.isnan(got) and math.copysign(1, got) == math.copysign(1, want)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


def parse(s):
    return {"nan": math.nan, "-nan": -math.nan, "inf": math.inf, "-inf": -math.inf}.get(s) \
        if s.lstrip("-") in ("nan", "inf") else float.fromhex(s)


def check_decode(t):
    got = {}
    for line in run(["decode"]):
        f, b, v = line.split()
        got[(int(f), int(b))] = parse(v)
    for fmt, (name, *_rest) in FORMATS.items():
        bad = [b for b in range(256) if not same_value(got[(fmt, b)], ref_decode(fmt, b))]
        t.ok(not bad, f"{name}: all 256 bit patterns decode as the format defines them "
             f"({len(bad)} differ{': first 0x%02x -> %r, want %r' % (bad[0], got[(fmt, bad[0])], ref_decode(fmt, bad[0])) if bad else ''})")


def check_roundtrip(t):
    for fmt, (name, *_rest) in FORMATS.items():
        finite = [b for b in range(256) if math.isfinite(ref_decode(fmt, b))]
        lines = ["%08x\n" % f32_bits(ref_decode(fmt, b)) for b in finite]
        for sat in (0, 1):
            codes = [int(c, 16) for c in run(["encode", str(fmt), str(sat)], lines)]
            bad = [b for b, c in zip(finite, codes) if c != b]
            t.ok(len(codes) == len(finite) and not bad,
                 f"{name} sat={sat}: encode(decode(b)) == b for all {len(finite)} finite patterns "
                 f"({len(bad)} differ{': first 0x%02x' % bad[0] if bad else ''})")


def check_rounding(t, rng):
    for fmt, (name, *_rest) in FORMATS.items():
        xs = rounding_cases(fmt, rng)
        assert all(is_f32(x) for x in xs)
        lines = ["%08x\n" % (0x7FC00000 if math.isnan(x) else f32_bits(x)) for x in xs]
        for sat in (0, 1):
            codes = [int(c, 16) for c in run(["encode", str(fmt), str(sat)], lines)]
            bad = [(x, c) for x, c in zip(xs, codes) if c != ref_encode(fmt, x, sat)]
            t.ok(len(codes) == len(xs) and not bad,
                 f"{name} sat={sat}: {len(xs)} fp32 values (every neighbour pair's midpoints and "
                 f"their fp32 neighbours, overflow, infinities, NaN, random) round to nearest even "
                 f"as the reference ({len(bad)} differ"
                 f"{': first %r -> 0x%02x, want 0x%02x' % (bad[0][0], bad[0][1], ref_encode(fmt, bad[0][0], sat)) if bad else ''})")
    # the boundaries named in tcu_fp8.h, stated once more by hand
    want = {(0, 464.0, 1): 0x7E, (0, 464.0, 0): 0x7E, (0, 465.0, 0): 0x7F, (0, 465.0, 1): 0x7E,
            (0, math.inf, 1): 0x7E, (0, -math.inf, 1): 0xFE, (1, 61440.0, 0): 0x7C,
            (1, 61440.0, 1): 0x7B, (1, 61439.99609375, 0): 0x7B, (0, 2.0 ** -10, 1): 0x00,
            (0, 1.5 * 2.0 ** -10, 1): 0x01, (1, -2.0 ** -17, 1): 0x80}
    got = {k: int(run(["encode", str(k[0]), str(k[2])], ["%08x\n" % f32_bits(k[1])])[0], 16)
           for k in want}
    bad = [k for k in want if got[k] != want[k] or ref_encode(k[0], k[1], k[2]) != want[k]]
    t.ok(not bad, f"the hand-written boundary cases (E4M3 464 -> 448, 465 -> NaN or 448 saturated, "
         f"inf -> +-448; E5M2 61440 -> inf or 57344; half the smallest subnormal -> 0): "
         f"{len(bad)} differ {bad[:3]}")


def ref_scale(fmt, amax):
    fmax = ref_decode(fmt, 0x7E if fmt == 0 else 0x7B)
    a = abs(amax)
    if a == 0 or not math.isfinite(a):
        return 1.0, math.nan if not math.isfinite(a) else 1.0
    q = fmax / a  # float64, then one rounding to fp32: correctly rounded (53 >= 2 * 24 + 2)
    try:
        s = bits_f32(f32_bits(q))
    except OverflowError:
        s = math.inf
    if math.isinf(s):
        s = bits_f32(0x7F7FFFFF)
    return s, bits_f32(f32_bits(1.0 / s))


def check_scale(t, rng):
    amaxes = [bits_f32(f32_bits(a)) for a in (0.0, 2.0 ** -149, 1e-38, 1e-6, 0.02, 1.0, 3.3,
                                              448.0, 57344.0, 1e30, math.inf)]
    amaxes += [math.nan] + [bits_f32(f32_bits(2.0 ** rng.uniform(-40, 40))) for _ in range(500)]
    for fmt, (name, *_rest) in FORMATS.items():
        lines = ["%08x\n" % (0x7FC00000 if math.isnan(a) else f32_bits(a)) for a in amaxes]
        out = [tuple(bits_f32(int(v, 16)) for v in line.split()) for line in run(["scale", str(fmt)], lines)]
        bad = [a for a, (s, si) in zip(amaxes, out)
               if not (same_value(s, ref_scale(fmt, a)[0]) and
                       (same_value(si, ref_scale(fmt, a)[1]) or
                        math.isnan(si) and math.isnan(ref_scale(fmt, a)[1])))]
        t.ok(len(out) == len(amaxes) and not bad,
             f"{name}: the tensorwise scale fp8_max / amax and its inverse for {len(amaxes)} amax "
             f"values (0, fp32's subnormals, infinity, NaN, random) as the reference ({len(bad)} "
             f"differ{': first amax %r' % bad[0] if bad else ''})")


def main():
    seed = int(os.environ.get("TSR_TEST_SEED", "0") or 0) or random.randrange(1 << 30)
    t = Tap(2 + 4 + 5 + 2)
    t.diag(f"seed {seed} (replay with TSR_TEST_SEED={seed})")
    if not os.access(DUMP, os.X_OK):
        t.fail_until(13, f"{DUMP} is not built (make)")
        return 1
    rng = random.Random(seed)
    check_decode(t)
    check_roundtrip(t)
    check_rounding(t, rng)
    check_scale(t, rng)
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
