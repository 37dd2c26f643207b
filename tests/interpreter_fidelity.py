"""Make Triton's interpreter type Python float arguments the way the GPU compiler does.

A compiled Triton kernel receives a Python float argument as an fp32 scalar unless the
parameter is annotated (``scale: tl.float64``). The interpreter keeps the Python float, so
float64 data blended with ``alpha = 0.1`` stays exact on the CPU and is off by ~1e-8 on
the GPU, and 16-bit data times an unannotated float stays 16-bit on the CPU but becomes
fp32 on the GPU. Tests run under the interpreter, so without this shim that whole class of
GPU bug passes CI (session 11 found dropout's fp32 scale on the H200 this way).

``install()`` wraps the interpreter's grid executor: every unannotated Python float
argument becomes an fp32 scalar tensor before the kernel runs, as on the GPU.

It also gives ``tl.minimum`` / ``tl.maximum`` the GPU's NaN rule. Without
``propagate_nan=tl.PropagateNan.ALL`` they compile to PTX ``min`` / ``max``, which return the
other operand when one is NaN (IEEE minNum); the interpreter used NumPy's ``minimum``, which
returns the NaN. So ``tl.minimum(x, 0.0)`` on a NaN gave 0 on the GPU and NaN in CI (session
24: ELU dropped NaN inputs on an H100, found by the GPU fuzz). ``propagate_nan=ALL`` keeps
NumPy's rule, as on the GPU.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np


def _fp32_scalar(value):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([value], np.float32), tl.float32), tl.float32)


@functools.lru_cache(maxsize=None)
def _parameters(fn):
    """(parameter names in order, the ones a Python float reaches as fp32 on the GPU: neither
    constexpr nor annotated float64), once per kernel function."""
    from triton.runtime.jit import _normalize_ty

    names = tuple(inspect.getfullargspec(fn).args)
    kinds = {name: _normalize_ty(ty) for name, ty in fn.__annotations__.items()}
    return names, frozenset(n for n in names if kinds.get(n) not in ("constexpr", "fp64"))


def _gpu_typed(fn, args, kwargs):
    """Bind the call and turn each float the GPU would type fp32 into an fp32 scalar."""
    names, fp32 = _parameters(fn)
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    return {name: _fp32_scalar(value) if type(value) is float and name in fp32 else value
            for name, value in bound.items()}


def _gpu_nan_rule(builder):
    """minnum / maxnum as PTX min / max: a NaN operand gives the other operand."""
    builder.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
    builder.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)


def install():
    """Patch triton.runtime.interpreter.GridExecutor (and its builder's float min / max)
    once; a no-op outside the interpreter."""
    from triton.runtime import interpreter

    executor = interpreter.GridExecutor
    if getattr(executor, "_tridnn_fp32_floats", False):
        return
    original_call = executor.__call__

    @functools.wraps(original_call)
    def call(self, *args, **kwargs):
        return original_call(self, **_gpu_typed(self.fn, args, kwargs))

    executor.__call__ = call
    executor._tridnn_fp32_floats = True
    _gpu_nan_rule(interpreter.InterpreterBuilder)
