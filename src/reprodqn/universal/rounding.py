"""exp and log rounded correctly to binary32: the policy gradient's elementary functions in
the universal spec (policy.py); and a binary64 power the same on every machine (prioritized
replay's exponents).

No libm promises a correctly rounded exp or log, and they differ between machines (glibc,
numpy's own SIMD code, SVML). This evaluates in binary64 with numpy, whose error is a few
binary64 ulps at most, and keeps the rounding to binary32 only where it cannot depend on
that error: a result within 2^-40 (relative) of a binary32 rounding boundary is computed
again exactly, with the standard library's decimal at 50 digits, and rounded from there
(Ziv's strategy). Any binary64 exp or log within 2^12 ulps therefore gives these bits, and
the slow path runs about once in 2^16 values.
"""

from __future__ import annotations

import decimal

import numpy as np

f32, f64 = np.float32, np.float64
TRUST = 2.0**-40  # the binary64 result's relative error stays far below this
# above this, binary32's round to nearest gives inf: the largest float plus half its ulp
OVERFLOW = (2.0 - 2.0**-24) * 2.0**127
_CONTEXT = decimal.Context(prec=50)


def _to_binary32(exact: decimal.Decimal) -> np.float32:
    """The binary32 nearest an exact value (ties to even), by comparing it with the two
    binary32 values around its binary64 neighbour, all exactly in decimal."""
    if exact >= decimal.Decimal(OVERFLOW):
        return f32(np.inf)
    guess = f32(float(exact))
    below = guess if decimal.Decimal(float(guess)) <= exact else np.nextafter(guess, f32(-np.inf))
    above = np.nextafter(below, f32(np.inf))
    low, high = decimal.Decimal(float(below)), decimal.Decimal(float(above))
    if exact - low < high - exact:
        return f32(below)
    if exact - low > high - exact:
        return f32(above)
    return f32(below) if int(np.asarray(below).view(np.uint32)) % 2 == 0 else f32(above)


def _rounded(approx: np.ndarray, inputs: np.ndarray, exact) -> np.ndarray:
    """approx (binary64) rounded to binary32, except where a boundary is too near: there
    `exact(x)` (a Decimal) decides."""
    with np.errstate(over="ignore"):
        result = approx.astype(f32)
    finite = np.isfinite(approx) & (approx != 0)
    up = approx > result.astype(f64)
    other = np.nextafter(result, np.where(up, f32(np.inf), f32(-np.inf)).astype(f32))
    with np.errstate(over="ignore", invalid="ignore"):
        boundary = (result.astype(f64) + other.astype(f64)) / 2
    boundary = np.where(np.isinf(result) | np.isinf(other), OVERFLOW, boundary)
    near = finite & (np.abs(approx - boundary) <= np.abs(approx) * TRUST)
    for i in np.flatnonzero(near):
        result.flat[i] = _to_binary32(exact(decimal.Decimal(float(inputs.flat[i]))))
    return result


def exp32(x) -> np.ndarray:
    """e^x correctly rounded to binary32, elementwise."""
    x = np.asarray(x, f32)
    with np.errstate(over="ignore", under="ignore"):
        approx = np.exp(x.astype(f64))
    return _rounded(approx, x, lambda d: d.exp(_CONTEXT))


def log32(x) -> np.ndarray:
    """ln x correctly rounded to binary32, elementwise (x > 0; ln 0 = -inf)."""
    x = np.asarray(x, f32)
    if np.any(x < 0) or np.any(np.isnan(x)):
        from reprodqn.universal.errors import NumericsError

        raise NumericsError("compute.numerics universal: log of a negative number or NaN")
    with np.errstate(divide="ignore"):
        approx = np.log(x.astype(f64))
    return _rounded(approx, x, lambda d: d.ln(_CONTEXT))


_POWER_CONTEXT = decimal.Context(prec=40)


def power64(base, exponent: float) -> np.ndarray:
    """base ** exponent in binary64, elementwise (base >= 0), the same bits on every machine:
    computed by Python's decimal (libmpdec, software arithmetic) at 40 digits, then rounded
    to the nearest binary64. libm's pow is not correctly rounded everywhere, and 40 digits
    leave a binary64 rounding in doubt only within 1e-40 of a boundary. Slow (tens of
    microseconds a value): for the few values an update or a step needs."""
    values = np.asarray(base, f64)
    if np.any(values < 0) or not np.all(np.isfinite(values)):
        from reprodqn.universal.errors import NumericsError

        raise NumericsError("compute.numerics universal: a power of a negative or non-finite base")
    y = decimal.Decimal(float(exponent))
    out = np.empty(values.shape, f64)
    for i, x in enumerate(values.flat):
        out.flat[i] = float(_POWER_CONTEXT.power(decimal.Decimal(float(x)), y)) if x else 0.0
    return out
