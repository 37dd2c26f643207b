"""Make Triton's interpreter type Python float arguments the way the GPU compiler does.

A compiled Triton kernel receives a Python float argument as an fp32 scalar unless the
parameter is annotated (``scale: tl.float64``). The interpreter keeps the Python float, so
float64 data blended with ``alpha = 0.1`` stays exact on the CPU and is off by ~1e-8 on
the GPU, and 16-bit data times an unannotated float stays 16-bit on the CPU but becomes
fp32 on the GPU. Tests run under the interpreter, so without this shim that whole class of
GPU bug passes CI (session 11 found dropout's fp32 scale on the H200 this way).

``install()`` wraps the interpreter's grid executor: every unannotated Python float
argument becomes an fp32 scalar tensor before the kernel runs, as on the GPU.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

_FLOAT64_NAMES = {"fp64", "float64"}


def _fp32_scalar(value):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([value], np.float32), tl.float32), tl.float32)


def _gpu_typed(fn, constexprs, args, kwargs):
    """Bind the call and turn each float the GPU would type fp32 into an fp32 scalar."""
    from triton.runtime.jit import _normalize_ty

    names = inspect.getfullargspec(fn).args
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    annotations = {name: _normalize_ty(ty) for name, ty in fn.__annotations__.items()}
    for name, value in bound.items():
        if type(value) is float and name not in constexprs and annotations.get(name) not in _FLOAT64_NAMES:
            bound[name] = _fp32_scalar(value)
    return bound


def install():
    """Patch triton.runtime.interpreter.GridExecutor once; a no-op outside the interpreter."""
    from triton.runtime import interpreter

    executor = interpreter.GridExecutor
    if getattr(executor, "_tridnn_fp32_floats", False):
        return
    original_call = executor.__call__

    @functools.wraps(original_call)
    def call(self, *args, **kwargs):
        return original_call(self, **_gpu_typed(self.fn, self.constexprs, args, kwargs))

    executor.__call__ = call
    executor._tridnn_fp32_floats = True
