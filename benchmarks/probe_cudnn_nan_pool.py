"""What cuDNN's max pooling does with a window of only NaN when NaN is not propagated.

tridnn's reference and NumPy backend give NaN there and send the window's gradient to its
first element; the Triton kernels give -inf and send it nowhere (docs/reliability.md, "NaN
and inf"). PyTorch does not expose cuDNN's maxpoolingNanOpt, so this calls cuDNN's legacy
pooling API through ctypes (the libcudnn.so.9 shim that torch loads), on a 1x1x4x4 float32
NCHW image whose top-left 2x2 window is all NaN and whose top-right one holds one NaN,
2x2 windows at stride 2, every mode and NaN option, and prints cuDNN's y and dx beside
tridnn's (Triton) and the float64 reference's.

    PYTHONPATH=src python3 benchmarks/probe_cudnn_nan_pool.py
"""
from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import torch

import tridnn
from tridnn.reference import pooling as pool_ref


def load_cudnn():
    """The libcudnn.so.9 shim torch uses (nvidia-cudnn wheel or torch/lib)."""
    import site
    roots = site.getsitepackages() + [os.path.dirname(torch.__file__)]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "libcudnn.so.9*"), recursive=True)):
            return ctypes.CDLL(path)
    return ctypes.CDLL("libcudnn.so.9")


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: cuDNN status {status}")


def cudnn_pool(lib, x, dy, mode, propagate):
    """(y, dx) of cuDNN's 2x2 stride-2 max pooling of x [1, 1, H, W] (float32, NCHW)."""
    handle, pd, xd, yd = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")
    check(lib.cudnnSetStream(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "cudnnSetStream")
    for d in (xd, yd):
        check(lib.cudnnCreateTensorDescriptor(ctypes.byref(d)), "cudnnCreateTensorDescriptor")
    n, c, h, w = x.shape
    check(lib.cudnnSetTensor4dDescriptor(xd, 0, 0, n, c, h, w), "x descriptor")  # NCHW, float
    check(lib.cudnnSetTensor4dDescriptor(yd, 0, 0, n, c, h // 2, w // 2), "y descriptor")
    check(lib.cudnnCreatePoolingDescriptor(ctypes.byref(pd)), "cudnnCreatePoolingDescriptor")
    # mode: CUDNN_POOLING_MAX 0, CUDNN_POOLING_MAX_DETERMINISTIC 3; NaN opt: NOT_PROPAGATE 0, PROPAGATE 1
    check(lib.cudnnSetPooling2dDescriptor(pd, mode, int(propagate), 2, 2, 0, 0, 2, 2), "pooling descriptor")
    y = torch.full((n, c, h // 2, w // 2), 7.0, device="cuda")
    dx = torch.full_like(x, 7.0)
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    check(lib.cudnnPoolingForward(handle, pd, ctypes.byref(one), xd, ptr(x), ctypes.byref(zero), yd, ptr(y)),
          "cudnnPoolingForward")
    check(lib.cudnnPoolingBackward(handle, pd, ctypes.byref(one), yd, ptr(y), yd, ptr(dy), xd, ptr(x),
                                   ctypes.byref(zero), xd, ptr(dx)), "cudnnPoolingBackward")
    torch.cuda.synchronize()
    lib.cudnnDestroyPoolingDescriptor(pd)
    lib.cudnnDestroyTensorDescriptor(xd)
    lib.cudnnDestroyTensorDescriptor(yd)
    lib.cudnnDestroy(handle)
    return y.cpu().numpy(), dx.cpu().numpy()


def tridnn_pool(x, dy, mode, propagate):
    """(y, dx) of tridnn's Triton pooling on the GPU."""
    handle = tridnn.Handle(device="cuda")
    pool = tridnn.PoolingDescriptor(mode, (2, 2), (0, 0), (2, 2), nan_opt=int(propagate))
    xd = tridnn.TensorDescriptor.packed(tuple(x.shape), "float32", tridnn.TensorFormat.NCHW)
    yd = tridnn.TensorDescriptor.packed(tuple(dy.shape), "float32", tridnn.TensorFormat.NCHW)
    y = torch.full_like(dy, 7.0)
    dx = torch.full_like(x, 7.0)
    tridnn.pooling_forward(handle, pool, 1.0, xd, x, 0.0, yd, y)
    tridnn.pooling_backward(handle, pool, 1.0, yd, y, yd, dy, xd, x, 0.0, xd, dx)
    torch.cuda.synchronize()
    return y.cpu().numpy(), dx.cpu().numpy()


def main():
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0:2, 0:2] = float("nan")  # the all-NaN window
    x[0, 0, 0, 3] = float("nan")  # one NaN in the top-right window
    x = x.cuda()
    dy = torch.ones(1, 1, 2, 2, device="cuda")
    lib = load_cudnn()
    for mode, cudnn_mode in ((tridnn.PoolingMode.MAX, 0), (tridnn.PoolingMode.MAX_DETERMINISTIC, 3)):
        for propagate in (False, True):
            print(f"== {mode.name}, {'PROPAGATE_NAN' if propagate else 'NOT_PROPAGATE_NAN'}")
            x64 = x.cpu().double().numpy()
            ref_y = pool_ref.pooling_forward(x64, int(mode), (2, 2), (0, 0), (2, 2), propagate)
            ref_dx = pool_ref.pooling_backward(x64, dy.cpu().double().numpy(), int(mode), (2, 2), (0, 0), (2, 2),
                                               propagate)
            rows = [("reference", ref_y, ref_dx)]
            for name, fn in (("cuDNN", lambda: cudnn_pool(lib, x, dy, cudnn_mode, propagate)),
                             ("tridnn", lambda: tridnn_pool(x, dy, mode, propagate))):
                try:
                    rows.append((name, *fn()))
                except Exception as exc:  # report and go on
                    print(f"   {name}: {type(exc).__name__}: {exc}")
            for name, y, dx in rows:
                print(f"   {name:9s} y {np.asarray(y).ravel().tolist()}  dx of the all-NaN window "
                      f"{np.asarray(dx)[0, 0, 0:2, 0:2].ravel().tolist()}")


if __name__ == "__main__":
    main()
