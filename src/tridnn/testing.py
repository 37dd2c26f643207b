"""Helpers for checking algorithms: fills, layouts, poisoning and tolerances.

After oneDNN's benchdnn: inputs are small integers, sparse enough that every partial
sum is an exactly representable float32 integer, so any method that accumulates in
float32 or wider and rounds once must equal the float64 reference rounded to the
output dtype, bit for bit. Transform methods (Winograd, FFT) round inside the
transform, so they get a tolerance instead.
"""
from __future__ import annotations

import os
import zlib

import numpy as np

from .descriptors import FilterDescriptor, TensorDescriptor
from .types import DataType, TensorFormat

LAYOUTS = ("NCHW", "NHWC", "strided")


def seed_for(key) -> int:
    """A 32-bit random seed for one test, the same in every process and run.

    Python's hash() of a string changes from process to process, so seeds drawn from it
    gave every CI run different inputs and made a failure unrepeatable. ``key`` is the
    test's node id or its case tuple; ``TRIDNN_TEST_SEED`` (any string) salts every seed,
    to draw a different set of inputs on purpose."""
    return zlib.crc32(f"{seed_salt()}|{key!r}".encode())


def seed_salt() -> str:
    """TRIDNN_TEST_SEED, the salt of every test's seed ('': the fixed draws CI runs)."""
    return os.environ.get("TRIDNN_TEST_SEED", "")


# Normalized max error |got - ref| / max(1, max|ref|), and relative L2 error fallback.
TOLERANCE = {
    # dtype: (pointwise, l2)
    DataType.DOUBLE: (1e-12, 1e-13),
    DataType.FLOAT: (2e-5, 5e-6),
    DataType.HALF: (4e-3, 1e-3),
    DataType.BFLOAT16: (3e-2, 8e-3),
}


def fill(shape, dtype, rng: np.random.Generator, lo: int = -2, hi: int = 2,
         density: float = 0.5) -> np.ndarray:
    """Integers in [lo, hi], each nonzero with probability ``density``, as ``dtype``."""
    dtype = DataType.of(dtype)
    values = rng.integers(lo, hi + 1, size=shape).astype(np.float64)
    values *= rng.random(size=shape) < density
    return values.astype(dtype.numpy)


def poison(array) -> None:
    """Fill an output with NaN so an unwritten element cannot pass as a result."""
    array[...] = np.nan


def assert_all_written(array, name: str = "output") -> None:
    bad = np.isnan(np.asarray(array, np.float64))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.size} elements were not written "
                             f"(first at {where})")


def make_tensor(dims, dtype, layout: str, rng: np.random.Generator, values=None):
    """(descriptor, logical view) in layout NCHW, NHWC or 'strided' (a non-contiguous
    view: every other element of a larger NHWC-ordered buffer with padded channels)."""
    dtype = DataType.of(dtype)
    dims = tuple(dims)
    if layout in ("NCHW", "NHWC"):
        desc = TensorDescriptor.packed(dims, dtype, TensorFormat[layout])
        flat = np.empty(desc.span, dtype.numpy)
        view = np.lib.stride_tricks.as_strided(flat, dims, [s * flat.itemsize for s in desc.strides])
    elif layout == "strided":
        n, c, *spatial = dims
        big = np.empty((n, *spatial[:-1], spatial[-1] * 2, c + 3), dtype.numpy) if spatial else None
        idx = (slice(None),) + tuple(slice(None) for _ in spatial[:-1]) + (slice(None, None, 2), slice(1, 1 + c))
        phys = big[idx]
        view = np.moveaxis(phys, -1, 1)
        # NumPy may report stride 0 for the axes of an empty array; any positive stride
        # describes an axis that never moves
        desc = TensorDescriptor(dims, dtype, tuple(max(1, s // view.itemsize) for s in view.strides))
    else:
        raise ValueError(f"unknown layout {layout!r}; valid: {LAYOUTS}")
    if values is not None:
        view[...] = values
    return desc, view


def make_filter(dims, dtype, layout: str, values=None):
    """(FilterDescriptor, logical view) in KCRS ('NCHW') or KRSC ('NHWC') memory order."""
    fmt = TensorFormat.NHWC if layout == "NHWC" else TensorFormat.NCHW
    desc = FilterDescriptor(tuple(dims), dtype, fmt)
    flat = np.empty(desc.as_tensor().span, DataType.of(dtype).numpy)
    view = np.lib.stride_tricks.as_strided(flat, desc.dims, [s * flat.itemsize for s in desc.strides])
    if values is not None:
        view[...] = values
    return desc, view


def expected(ref, dtype, alpha=1.0, beta=0.0, prior=None) -> np.ndarray:
    """alpha * ref + beta * prior in float64, rounded once to the output dtype."""
    out = alpha * np.asarray(ref, np.float64)
    if beta != 0:
        out = out + beta * np.asarray(prior, np.float64)
    return out.astype(DataType.of(dtype).numpy)


def assert_exact(got, want, name="output") -> None:
    got64 = np.asarray(got, np.float64)
    want64 = np.asarray(want, np.float64)
    if not np.array_equal(got64, want64):
        diff = np.abs(got64 - want64)
        where = tuple(int(i) for i in np.unravel_index(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)), diff.shape))
        raise AssertionError(f"{name}: not exact; {int((got64 != want64).sum())} of {got64.size} differ, "
                             f"worst at {where}: got {got64[where]}, want {want64[where]}")


def assert_close(got, ref, dtype, name="output") -> None:
    """The documented tolerance for transform methods: pointwise, else relative L2."""
    pointwise, l2 = TOLERANCE[DataType.of(dtype)]
    got64 = np.asarray(got, np.float64)
    ref64 = np.asarray(ref, np.float64)
    if np.isnan(got64).any():
        raise AssertionError(f"{name}: result has NaN")
    scale = max(1.0, float(np.abs(ref64).max(initial=0.0)))
    err = float(np.abs(got64 - ref64).max(initial=0.0)) / scale
    if err <= pointwise:
        return
    l2_err = float(np.linalg.norm(got64 - ref64) / max(np.linalg.norm(ref64), 1e-30))
    if l2_err > l2:
        raise AssertionError(f"{name}: max error {err:.3g} (tolerance {pointwise:g}) and relative "
                             f"L2 error {l2_err:.3g} (tolerance {l2:g}) for {DataType.of(dtype).name}")


def check_result(got, ref, dtype, exact: bool, alpha=1.0, beta=0.0, prior=None, name="output"):
    """Exact methods must equal the rounded reference; others meet the tolerance."""
    assert_all_written(got, name)
    want = expected(ref, dtype, alpha, beta, prior)
    if exact:
        assert_exact(got, want, name)
    else:
        assert_close(got, np.asarray(alpha * np.asarray(ref, np.float64)
                                     + (beta * np.asarray(prior, np.float64) if beta else 0.0)),
                     dtype, name)
