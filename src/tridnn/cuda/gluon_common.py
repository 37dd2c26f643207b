"""Helpers shared by the Gluon kernels (gluon_conv, gluon_wgrad, gluon_stream).

Why one module: the three kernels build TMA descriptors the same way (an NVMMA shared
layout per box, cached per address so a launch does not re-encode them), spell the same
descriptor types for their offline sm_90 compiles and cap registers by the same rule.
The one device helper, ``ring_barriers``, sets up the ready/empty barrier pairs of their
shared-memory rings.
"""
from __future__ import annotations

import os
import warnings

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from . import launch_record
from .conv_tma import _Address as Address  # a descriptor's base without the tensor (shared with conv_tma)


# Images-inner configs (gluon_conv, gluon_wgrad: descriptors with the images' dimension next
# to the channels) are offered to the tuners by default; TRIDNN_IMAGES_INNER=0 withdraws them.
# Session 28 (H100): 127 GPU tests against float64 passed; at batch 256 the bf16 forward of
# res3/4/5_3x3 went 1.13/1.10/1.16 -> 0.95/0.96/1.05 of cuDNN, backward data 1.13/1.14/1.25
# -> 0.99/1.03/1.21, and the backward filter's res5_ds 1.21 -> 0.97.
IMAGES_INNER_OFFERED = os.environ.get("TRIDNN_IMAGES_INNER", "1") != "0"
# At stride > 1 the forward (gluon_conv_strided) and the one-launch backward data
# (gluon_dgrad_fused) take them through their 5-D phase views too (session 29). On since
# session 30 (H100: 86 GPU tests against float64 passed; the six stride-2 layers, switch on
# against off on one machine, forward 0.976 -> 0.960 of cuDNN at batch 64 and 1.131 -> 1.009
# at 256, backward data 0.915 -> 0.902 and 1.027 -> 0.963). TRIDNN_IMAGES_INNER_STRIDED=0
# withdraws them at stride > 1 only (TRIDNN_IMAGES_INNER=0: everywhere).
IMAGES_INNER_STRIDED = os.environ.get("TRIDNN_IMAGES_INNER_STRIDED", "1") != "0"


def inner_batch(n, stride):
    """The batch the images-inner picks are offered for (the picks functions' n): None where
    IMAGES_INNER_STRIDED withdraws them (a stride > 1)."""
    return n if IMAGES_INNER_STRIDED or tuple(stride) == (1, 1) else None


def pixel_order(cfg, dims):
    """Four [N, H, W, C]-ordered values (a shape, strides, a box) in the order of the config's
    descriptors: unchanged, or [H, W, N, C] for an IMAGES_INNER config (None stays None)."""
    if dims is None or not cfg.get("IMAGES_INNER"):
        return dims
    return (dims[1], dims[2], dims[0], dims[3])


def phase_view_order(cfg, dims):
    """Five values ordered as a stride-phase view [N, H/sh, sh, W/sw, sw*C] (its shape,
    strides or a box) in the order of the config's descriptor: unchanged, or
    [H/sh, sh, W/sw, N, sw*C] for an IMAGES_INNER config."""
    if not cfg.get("IMAGES_INNER"):
        return tuple(dims)
    return tuple(dims[1:4]) + (dims[0], dims[4])


def guarded_launch(what, launch, *args) -> bool:
    """launch(*args) of an experimental Gluon config (it returns whether it launched), where
    a host-side failure (a compile or descriptor error: the Gluon API is experimental) warns
    and returns False, so the caller runs its reference config instead of the call failing.
    Out of resources (the tuner skips such a config), out of memory, CUDA errors and a launch
    record's refusal propagate (a record's bound launch refuses a dry run, which then runs
    the call itself; caught here, the dry run would record the reference config instead)."""
    try:
        return launch(*args)
    except launch_record.Refused:
        raise
    except Exception as exc:
        text = str(exc)
        if ("OutOfResources" in type(exc).__name__ or "resources" in text.lower()
                or "out of memory" in text.lower() or "CUDA" in text):
            raise
        warnings.warn(f"tridnn: the Gluon {what} failed ({type(exc).__name__}: {exc}); running the reference "
                      "config", RuntimeWarning, stacklevel=3)
        return False


def layout(block, dtype):
    """The NVMMA shared layout TMA boxes ``block`` of ``dtype`` (a gl dtype) land in."""
    return gl.NVMMASharedLayout.get_default_for(block, dtype)


def gl_dtype(torch_dtype):
    import torch
    return {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[torch_dtype]


_GL_OF_STR = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}


def desc_sig(dtype_str, block, make_layout=layout) -> str:
    """The signature type of a TMA descriptor argument with box ``block`` of ``dtype_str``
    ("bf16", "fp16", "fp32") in the layout ``make_layout(block, gl dtype)``, for offline compiles."""
    return f"tensordesc<{dtype_str}[{', '.join(map(str, block))}],{make_layout(list(block), _GL_OF_STR[dtype_str])!r}>"


_descriptors: dict = {}
_layouts: dict = {}


def descriptor(t, shape, strides, block, make_layout=layout):
    """A Gluon TMA descriptor of t's memory viewed as shape/strides with box ``block`` in the
    shared layout ``make_layout(block, gl dtype)``; on the GPU made once per address, dtype,
    view, box and layout (a descriptor encodes nothing else)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    shape, strides, block = tuple(shape), tuple(strides), tuple(block)
    lkey = (block, t.dtype, make_layout)
    lay = _layouts.get(lkey)
    if lay is None:
        lay = _layouts[lkey] = make_layout(list(block), gl_dtype(t.dtype))
    if t.device.type != "cuda":  # offline compiles and dry runs: the tensor itself
        return TensorDescriptor(t, list(shape), list(strides), list(block), lay)
    key = (t.data_ptr(), t.dtype, shape, strides, block, make_layout)
    d = _descriptors.get(key)
    if d is None:
        if len(_descriptors) > 4096:
            _descriptors.clear()
        d = _descriptors[key] = TensorDescriptor(Address(t.data_ptr(), t.dtype), list(shape), list(strides),
                                                 list(block), lay)
    return d


_PLACEHOLDERS: dict = {}  # (device, dtype) -> a one-element tensor


def placeholder(device, dtype):
    """A one-element tensor for a pointer argument the kernel never reads (an absent bias):
    one per device and dtype, so launch arguments kept for reuse (gluon_conv's launch
    records) hold no caller tensor alive."""
    import torch
    key = (str(device), dtype)
    t = _PLACEHOLDERS.get(key)
    if t is None:
        t = _PLACEHOLDERS[key] = torch.zeros(1, dtype=dtype, device=device)
    return t


# The JIT's per-call binding (signature, specialization, cache key, a tensor map encoded
# per descriptor) costs tens of microseconds of host time, as much as a ResNet layer's
# kernel. So after the first launch through the JIT of a (kernel, device, constexprs,
# specialization), later ones call its compiled launcher directly, as common.launch does
# for Triton kernels, with the encoded tensor maps cached per (cached) descriptor.
# TRIDNN_GLUON_JIT_LAUNCH=1: every launch through the JIT.
FAST_LAUNCH = os.environ.get("TRIDNN_GLUON_JIT_LAUNCH", "0") != "1"
_compiled: dict = {}


def constexpr_tail(kernel, meta) -> tuple:
    """The kernel's constexpr values in signature order (they follow the runtime arguments;
    meta may also hold launch options, as maxnreg, which are not parameters)."""
    names = kernel.arg_names
    first = next(i for i, n in enumerate(names) if n in meta)
    return tuple(meta[n] for n in names[first:])


def launch(kernel, grid, args, meta, spec):
    """kernel[grid](*args, **meta) for a Gluon kernel whose constexprs (meta, in signature
    order, after every runtime argument) are the last parameters. spec (hashable): what,
    besides meta, the compiled kernel depends on for these args: the caller vouches for it
    (its pointers' dtypes and 16-byte alignments; ints the kernel does not specialize)."""
    recorder = launch_record.active()
    if recorder is not None:  # a dry run (launch_record): keep the launch, queue nothing
        recorder.add(bind(kernel, grid, args, meta, spec), args)
        return
    base = args[0].base
    on_gpu = not hasattr(base, "device") or base.device.type == "cuda"  # an Address lives on the GPU
    if not (FAST_LAUNCH and on_gpu):
        kernel[grid](*args, **meta)
        return
    import torch
    from .common import TensorMapLauncher, _raw_stream
    index = torch.cuda.current_device()
    key = (kernel, index, spec, tuple(meta.items()))
    entry = _compiled.get(key)
    if entry is None:
        compiled = kernel[grid](*args, **meta)
        tail = constexpr_tail(kernel, meta)
        assert len(args) + len(tail) == len(kernel.arg_names)
        _compiled[key] = (compiled, tail, TensorMapLauncher.of(compiled.run))
        return
    compiled, tail, maps = entry
    values = (*args, *tail)
    g = (grid[0], 1, 1)
    if maps is not None:
        maps.launch(g, _raw_stream(index), compiled, values)
    else:
        compiled.run(g[0], g[1], g[2], _raw_stream(index), compiled.function, compiled.packed_metadata, None, None,
                     None, *values)


RECORD_LIMIT = 1024  # launch records kept per module before its table starts over


def recorded(records: dict, key, problem, cfg):
    """The payload kept in a module's launch ``records`` under key, or None (also for a key
    of None: records off). The record's problem and config objects must be the ones passed:
    the key holds their ids, and an id may be reused once its object is gone."""
    rec = records.get(key) if key is not None else None
    return rec[2] if rec is not None and rec[0] is problem and rec[1] is cfg else None


def keep_record(records: dict, key, problem, cfg, payload) -> None:
    """Keep payload under key (nothing for a key of None), with its problem and config."""
    if key is None:
        return
    if len(records) >= RECORD_LIMIT:
        records.clear()
    records[key] = (problem, cfg, payload)


def bind(kernel, grid, args, meta, spec):
    """The launch ``launch`` would make of these arguments as a common.Bound (no tensor held;
    calling it queues the launch), or None before ``launch`` compiled that variant or with
    the fast launch off."""
    base = args[0].base
    if not (FAST_LAUNCH and (not hasattr(base, "device") or base.device.type == "cuda")):
        return None
    import torch
    from .common import Bound
    index = torch.cuda.current_device()
    entry = _compiled.get((kernel, index, spec, tuple(meta.items())))
    if entry is None:
        return None
    compiled, tail, maps = entry
    return Bound.of(compiled, maps, (grid[0], 1, 1), (*args, *tail), index)


def sm_count(device) -> int:
    """SMs of a CUDA device; 132 (an H200) elsewhere, for plans built on the CPU."""
    if device.type != "cuda":
        return 132
    from .common import sm_count as cuda_sm_count  # (asked once per device)
    return cuda_sm_count(device)


def max_regs(num_warps: int, per_sm: int = 1, pingpong: bool = False) -> int:
    """The register cap that lets per_sm programs (num_warps consumer warps, twice with
    pingpong, plus one 4-warp group for the loader) fit the SM's 64K registers; setmaxnreg
    then moves the loader's surplus to the consumers."""
    threads = (num_warps * (2 if pingpong else 1) + 4) * 32 * per_sm
    return min(256, (65536 // threads) // 8 * 8)


def compile_sm90(fn, types, consts, num_warps, maxnreg=None, pointers=(), source=None, num_stages=None):
    """Compile the Gluon kernel ``fn`` for sm_90 without a GPU; returns the CompiledKernel.
    types: argument name -> type (arguments not named are i32); consts: constexpr values;
    maxnreg: the register cap (None: none); pointers: arguments Triton would see as multiples
    of 16; source: the AST source class (default Gluon's; triton.compiler.ASTSource for a
    plain Triton kernel); num_stages: a plain Triton kernel's pipeline depth (None: Triton's
    default)."""
    from triton.backends.compiler import GPUTarget
    if source is None:
        from triton.experimental.gluon._runtime import GluonASTSource as source

    sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}  # in the kernel's order
    extra = {}
    if pointers:
        extra["attrs"] = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in pointers}
    src = source(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()}, **extra)
    opts = dict(num_warps=num_warps)
    if maxnreg is not None:
        opts["maxnreg"] = maxnreg
    if num_stages is not None:
        opts["num_stages"] = num_stages
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


@gluon.jit
def ring_barriers(STAGES: gl.constexpr):
    """(ready, empty): one mbarrier pair per slot of a ring of STAGES shared-memory slots
    (ready: the slot's TMA load has landed; empty: its readers are done), initialized with
    count 1. The caller fences (fence_async_shared) once its own barriers are set up too."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    return ready, empty
