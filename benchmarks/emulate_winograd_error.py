"""Winograd F(2x2,3x3) and F(4x4,3x3) error with rounded operands, emulated in NumPy.

Why: WINOGRAD_NONFUSED stores the transformed input V and filter U in the data type and
multiplies them at the math type's precision, so the tile size's error depends on that
rounding. This script measures max |y - ref| / max |ref| against the float64 direct
convolution for float32, tf32 and bfloat16 operands (the GEMM and transforms otherwise in
float32), which decides where F(4x4) may be used (cuda/conv_winograd_nonfused.tile_of).

    python benchmarks/emulate_winograd_error.py [--channels 64 256] [--size 18]
"""
import argparse

import ml_dtypes
import numpy as np

from tridnn.cpu.conv_winograd import matrices


def as_tf32(a):
    """Round to tf32 (10 mantissa bits) to nearest, as the tensor cores read float32."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x1000) & 0xFFFFE000).view(np.float32).astype(np.float64)


def as_bf16(a):
    return a.astype(ml_dtypes.bfloat16).astype(np.float64)


def as_f32(a):
    return a.astype(np.float32).astype(np.float64)


def winograd(x, w, m, rounding):
    """F(m x m, 3x3) correlation without padding; V and U rounded by ``rounding``."""
    at, g, bt = matrices(m)
    n = m + 2
    batch, c, h, wd = x.shape
    th, tw = -(-(h - 2) // m), -(-(wd - 2) // m)
    xp = np.zeros((batch, c, th * m + 2, tw * m + 2))
    xp[:, :, :h, :wd] = x
    patches = np.stack([np.stack([xp[:, :, i * m:i * m + n, j * m:j * m + n] for j in range(tw)], 2)
                        for i in range(th)], 2)                        # N C th tw n n
    v = rounding(as_f32(np.einsum("ab,ncijbd,ed->ncijae", bt, patches, bt)))
    u = rounding(as_f32(np.einsum("ab,kcbd,ed->kcae", g, w, g)))
    prods = as_f32(np.einsum("ncijae,kcae->nkijae", v, u))
    tiles = np.einsum("ab,nkijbd,ed->nkijae", at, prods, at)
    y = tiles.transpose(0, 1, 2, 4, 3, 5).reshape(batch, w.shape[0], th * m, tw * m)
    return y[:, :, :h - 2, :wd - 2]


def direct(x, w):
    h, wd = x.shape[2] - 2, x.shape[3] - 2
    return sum(np.einsum("nchw,kc->nkhw", x[:, :, i:i + h, j:j + wd], w[:, :, i, j])
               for i in range(3) for j in range(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--size", type=int, default=18)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'C':>5} {'operands':9} {'F(2x2)':>9} {'F(4x4)':>9} {'direct':>9}   (max error / max |y|)")
    for c in args.channels:
        x = rng.standard_normal((1, c, args.size, args.size))
        w = rng.standard_normal((32, c, 3, 3)) / np.sqrt(9 * c)
        for name, rounding, data in (("float32", as_f32, as_f32), ("tf32", as_tf32, as_f32),
                                     ("bfloat16", as_bf16, as_bf16)):
            xq, wq = data(x), data(w)
            ref = direct(xq, wq)
            scale = np.abs(ref).max()
            errs = [np.abs(winograd(xq, wq, m, rounding) - ref).max() / scale for m in (2, 4)]
            plain = np.abs(direct(rounding(xq), rounding(wq)) - ref).max() / scale
            print(f"{c:>5} {name:9} {errs[0]:9.2e} {errs[1]:9.2e} {plain:9.2e}")


if __name__ == "__main__":
    main()
