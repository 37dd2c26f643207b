"""What the Gluon kernel tests (test_gluon_*) share: offline sm_90 compiles in a child
process, their SASS and resource usage through Triton's own cuobjdump, and the skips when
that tool or a Hopper GPU is missing."""
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager

import pytest


def cuobjdump():
    """Triton's bundled cuobjdump, or None."""
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    return path if os.path.exists(path) else None


def need_cuobjdump():
    """Skip the calling test where the SASS cannot be read."""
    if cuobjdump() is None:
        pytest.skip("Triton's cuobjdump is not installed")


def _dump(kernel, flag) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([cuobjdump(), flag, f.name], capture_output=True, text=True, check=True).stdout


def sass(kernel) -> str:
    """The SASS of a compiled kernel."""
    return _dump(kernel, "--dump-sass")


def registers(kernel) -> int:
    """Registers a thread of a compiled kernel."""
    return int(re.search(r"REG:(\d+)", _dump(kernel, "--dump-resource-usage")).group(1))


def compile_triton_sm90(spec, **_):
    """A plain Triton kernel compiled for sm_90 offline: spec = [module, kernel, types,
    consts, num_warps(, num_stages(, multiples))], with "tl.<dtype>" strings in consts
    standing for Triton dtypes (the spec crosses a process boundary as JSON); multiples:
    the arguments Triton would specialize as multiples of 16 (pointers, packed strides).
    For compile_in_child, as ("gluon_helpers", "compile_triton_sm90", spec, {})."""
    import importlib

    import triton.language as tl
    from triton.compiler import ASTSource

    from tridnn.cuda.gluon_common import compile_sm90

    module, name, types, consts, num_warps, *rest = spec
    stages = rest[0] if rest else None
    multiples = tuple(rest[1]) if len(rest) > 1 else ()
    fn = getattr(importlib.import_module(module), name)
    consts = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v for k, v in consts.items()}
    return compile_sm90(fn, types, consts, num_warps, source=ASTSource, num_stages=stages, pointers=multiples)


_CHILD = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
from gluon_helpers import registers, sass
out = []
for module, function, cfg, kwargs in json.loads(sys.stdin.read()):
    k = getattr(importlib.import_module(module), function)(cfg, **kwargs)
    if k is None:
        out.append(None)
        continue
    blocks = [d["block_size"] for d in (getattr(k.metadata, "tensordesc_meta", None) or [])]
    out.append(dict(shared=k.metadata.shared, regs=registers(k), sass=sass(k), blocks=blocks, ttgir=k.asm["ttgir"]))
print(json.dumps(out))
"""


def compile_in_child(calls, timeout=1800) -> list:
    """Facts {shared, regs, sass, blocks, ttgir} (None where the function returned None) of each
    (module, function, config, keyword arguments) call, e.g. ("tridnn.cuda.gluon_conv",
    "compile_sm90", cfg, {"has_beta": True}), compiled for sm_90 in one child process.

    Why a child: the other CPU tests run Triton's interpreter in this process, which leaves
    parts of triton.language patched (interpreter.InterpretedFunction.__call__ does not
    restore them after nested jit calls), and Gluon's compiler, built on triton.language,
    then fails; the child starts without TRITON_INTERPRET."""
    need_cuobjdump()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.path.join(os.path.dirname(here), "src") + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", _CHILD, here], input=json.dumps([list(c) for c in calls]),
                         capture_output=True, text=True, env=env, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def compile_triton_without_local_memory(specs) -> list:
    """Compile each compile_triton_sm90 spec for sm_90 in one child process and assert that
    it compiled and its SASS has no local-memory access (STL/LDL: register spills); returns
    the facts (compile_in_child's) for the caller's own checks."""
    facts = compile_in_child([("gluon_helpers", "compile_triton_sm90", spec, {}) for spec in specs])
    for spec, f in zip(specs, facts):
        assert f is not None and f["regs"] > 0, spec[3]
        assert not re.findall(r"\b(STL|LDL)\b", f["sass"]), (spec[3], spec[4:], f["regs"])
    return facts


@contextmanager
def not_interpreted():
    """TRITON_INTERPRET unset for the block (an offline compile is not interpreted)."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def need_hopper():
    """Skip the calling GPU test off a Hopper GPU; fail it under the interpreter (Gluon
    kernels do not run there)."""
    import torch
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.fail("Gluon does not run under the interpreter: set TRIDNN_GPU_TESTS=1")


def force_one_config(monkeypatch):
    """Make the config put in the returned ``state.cfg`` the only candidate of IMPLICIT_GEMM
    forward and ALGO_1 backward data (a one-config list is taken without timing), on fresh
    tuners; ``state.launches`` counts Gluon launches (gluon_conv.launch)."""
    import types
    import tridnn
    from tridnn.algorithms import registry
    from tridnn.cuda import common, gluon_conv
    from tridnn.cuda import conv_bwd_data_implicit_gemm as bwd
    from tridnn.cuda import conv_implicit_gemm as fwd
    state = types.SimpleNamespace(cfg=None, launches=0)
    real = gluon_conv.launch

    def counted(*a, **k):
        state.launches += 1
        return real(*a, **k)
    monkeypatch.setattr(gluon_conv, "launch", counted)
    for algo in (registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
                 registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)):
        monkeypatch.setattr(type(algo), "tuner", common.Tuner())
    monkeypatch.setattr(fwd, "tma_forward_candidates", lambda *a, **k: [state.cfg])
    monkeypatch.setattr(bwd, "tma_candidates", lambda *a, **k: [state.cfg])
    return state


def _box(desc, coords):
    """(desc's view of its CPU base tensor, the box's mask of elements inside the view's
    shape, their indices into the view) for the box at coords."""
    import numpy as np
    import torch
    view = torch.as_strided(desc.base, desc.shape, desc.strides)
    idx = np.meshgrid(*[np.arange(b) + c for b, c in zip(desc.block_shape, coords)], indexing="ij")
    inside = np.ones(idx[0].shape, bool)
    for i, size in zip(idx, desc.shape):
        inside &= (i >= 0) & (i < size)
    return view, torch.from_numpy(inside), tuple(torch.from_numpy(i[inside]) for i in idx)


def tma_box(desc, coords):
    """What a TMA load of a Gluon TensorDescriptor's box at coords puts in shared memory
    (desc.base a CPU tensor, as offline ``prepare`` calls build them): the view's elements,
    zero where a coordinate falls outside the view's shape."""
    import torch
    view, mask, where = _box(desc, coords)
    out = torch.zeros(desc.block_shape, dtype=view.dtype)
    out[mask] = view[where]
    return out


def tma_store(desc, coords, tile):
    """A TMA store of tile into desc's view at coords: the elements inside the view's shape
    are written, the rest dropped."""
    view, mask, where = _box(desc, coords)
    view[where] = tile.reshape(desc.block_shape)[mask].to(view.dtype)


def small_integers(seed, *tensors):
    """New integers in [-3, 3] into the tensors, in place (same addresses and strides): exact
    in 16-bit types and in float64 sums, so emulations and references agree exactly."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    for t in tensors:
        t.copy_(torch.randint(-3, 4, t.shape, generator=gen))


def tile_origin(t, tiles_h, tiles_w, n_blocks, meta):
    """gluon_conv._tile_coords: (image, row, column, channel) origin of tile t."""
    nb_k, r = t % n_blocks, t // n_blocks
    tw, r = r % tiles_w, r // tiles_w
    th, tn = r % tiles_h, r // tiles_h
    return tn * meta["NB"], th * meta["BH"], tw * meta["BW"], nb_k * meta["BLOCK_N"]


def _activate(v, act, coef):
    """gluon_conv.FUSED_ACTS' activations (epilogue.activate's piecewise-linear ones) in float64."""
    import torch
    if act in (1, 201):  # RELU (201: keeping NaN)
        return torch.where((v > 0) | ((v != v) if act == 201 else False), v, torch.zeros_like(v))
    if act in (3, 203):  # CLIPPED_RELU
        clipped = torch.clamp(torch.where(v > 0, v, torch.zeros_like(v)), max=coef)
        return torch.where(v != v, v, clipped) if act == 203 else clipped
    if act == 100:  # LEAKY_RELU
        return torch.where(v > 0, v, coef * v)
    raise NotImplementedError(f"the emulation has no activation {act} (not fused by gluon_conv)")


def _epilogue(a, meta, acc, y_at, k0):
    """gluon_conv's epilogue on a float64 tile: alpha, the old y (beta) and z (alpha2) boxes
    at y_at, the bias of channels k0.. (HAS_BIAS), the activation ACT, then the store into
    y's view."""
    import torch
    bm, bn = acc.shape
    acc = a["alpha"] * acc
    if meta.get("HAS_BETA"):
        acc += a["beta"] * tma_box(a["y_desc"], y_at).reshape(bm, bn).double()
    if meta.get("HAS_Z"):
        acc += a["alpha2"] * tma_box(a["z_desc"], y_at).reshape(bm, bn).double()
    if meta.get("HAS_BIAS"):
        cols = k0 + torch.arange(bn)
        bias = a["bias_ptr"].reshape(-1)
        acc += torch.where(cols < a["C_OUT"], bias[cols.clamp(max=bias.numel() - 1)].double(), 0.0)[None, :]
    if meta.get("ACT", -1) >= 0:
        acc = _activate(acc, meta["ACT"], a["coef"])
    tma_store(a["y_desc"], y_at, acc)


def emulate_gluon_conv(args, meta):
    """gluon_conv_fwd_kernel on the CPU in float64 from a ``gluon_conv.prepare`` launch's
    (args, meta): its tile order (_tile_coords), the loader's walk over taps and channel
    blocks, the epilogue's alpha, old-y (beta) and z (alpha2) tiles and its store, every box
    read and written through the descriptors in the kernel's coordinate order (images inner:
    [rows, columns, images, channels]); the fused bias and piecewise-linear activations."""
    import torch
    from tridnn.cuda.gluon_conv import gluon_conv_fwd_kernel
    a = dict(zip(gluon_conv_fwd_kernel.arg_names, args))
    nb, bh, bw, bn, bk = (meta[k] for k in ("NB", "BH", "BW", "BLOCK_N", "BLOCK_K"))
    bm, c, kw = nb * bh * bw, a["C"], a["KW"]

    def at(n0, r, col, ch):  # _pixel_load / _pixel_store
        return [r, col, n0, ch] if meta.get("IMAGES_INNER") else [n0, r, col, ch]

    for t in range(a["NUM_TILES"]):
        n0, oh0, ow0, k0 = tile_origin(t, a["TILES_H"], a["TILES_W"], a["N_BLOCKS"], meta)
        acc = torch.zeros(bm, bn, dtype=torch.float64)
        for kk in range(a["K_STEPS"]):
            tap, c0 = divmod(kk * bk, c)
            ih = oh0 - a["PAD_H"] + (tap // kw) * a["DIL_H"]
            iw = ow0 - a["PAD_W"] + (tap % kw) * a["DIL_W"]
            box = tma_box(a["x_desc"], at(n0, ih, iw, c0)).reshape(bm, bk).double()
            acc += box @ tma_box(a["w_desc"], [k0, kk * bk]).double().T
        _epilogue(a, meta, acc, at(n0, oh0, ow0, k0), k0)


def emulate_gluon_conv_strided(args, meta):
    """gluon_conv_strided_kernel on the CPU in float64 from its ``prepare``'s (args, meta):
    gluon_conv's tiles and epilogue, the loader's tap walk over x's phase view
    (gluon_conv_strided.walk_taps; images inner: [rows, row phase, columns, images, column
    phase * C + channels]), every box through the descriptors."""
    import torch
    from tridnn.cuda import gluon_conv_strided as gs
    a = dict(zip(gs.gluon_conv_strided_kernel.arg_names, args))
    nb, bh, bw, bn, bk = (meta[k] for k in ("NB", "BH", "BW", "BLOCK_N", "BLOCK_K"))
    bm, c, inner = nb * bh * bw, a["C"], meta.get("IMAGES_INNER")
    # the taps from the walk's host arguments (the loader's incremental steps, as walk_taps)
    taps, ih, ph = [], a["AH0"], a["BH0"]
    for _ in range(a["K_STEPS"] * bk // c // a["KW"]):
        iw, cb = a["AW0"], a["CB0"]
        for _ in range(a["KW"]):
            taps.append((ih, ph, iw, cb))
            cb, iw = cb + a["DCB"], iw + a["DAW"]
            cb, iw = (cb - a["SWC"], iw + 1) if cb >= a["SWC"] else (cb, iw)
        ph, ih = ph + a["DBH"], ih + a["DAH"]
        ph, ih = (ph - a["SH"], ih + 1) if ph >= a["SH"] else (ph, ih)

    def y_at(n0, r, col, ch):
        return [r, col, n0, ch] if inner else [n0, r, col, ch]

    for t in range(a["NUM_TILES"]):
        n0, oh0, ow0, k0 = tile_origin(t, a["TILES_H"], a["TILES_W"], a["N_BLOCKS"], meta)
        acc = torch.zeros(bm, bn, dtype=torch.float64)
        for kk in range(a["K_STEPS"]):
            tap, c0 = divmod(kk * bk, c)
            ah, bh_, aw, cb = taps[tap]
            at = [oh0 + ah, bh_, ow0 + aw, n0, cb + c0] if inner else [n0, oh0 + ah, bh_, ow0 + aw, cb + c0]
            box = tma_box(a["x_desc"], at).reshape(bm, bk).double()
            acc += box @ tma_box(a["w_desc"], [k0, kk * bk]).double().T
        _epilogue(a, meta, acc, y_at(n0, oh0, ow0, k0), k0)


def emulate_gluon_dgrad_fused(args, meta, grid):
    """gluon_dgrad_fused_kernel on the CPU in float64 from its ``prepare``'s (args, meta):
    each program's tiles as the schedule (sched_ptr) deals them to grid[0] programs (every
    tile of the list exactly once, or the test fails), per tile the table row of its phase
    slot (_slot_tile), the loader's taps and channel blocks of dy, the phase's filter
    columns, then the old-dx blend and the store through dx's 5-D phase view (images inner:
    dy [rows, columns, images, channels], dx [rows, row phase, columns, images, column phase
    * C + channels]), every box through the descriptors."""
    import torch
    from tridnn.cuda import gluon_dgrad_fused as gf
    a = dict(zip(gf.gluon_dgrad_fused_kernel.arg_names, args))
    nb, bh, bw, bn, bk = (meta[k] for k in ("NB", "BH", "BW", "BLOCK_N", "BLOCK_K"))
    bm, inner = nb * bh * bw, meta.get("IMAGES_INNER")
    rows = a["table_ptr"].view(-1, gf.ROW).tolist()
    sched, programs = a["sched_ptr"].tolist(), grid[0]
    order = [sched[programs + 1 + i] for p in range(programs) for i in range(sched[p], sched[p + 1])]
    assert sorted(order) == list(range(a["SLOTS"] * a["TILES_PER_PHASE"])), "the schedule misses or repeats tiles"
    for t in order:
        q = min(t // a["TILES_PER_PHASE"], a["SLOTS"] - 1)  # _slot_tile
        r = t - q * a["TILES_PER_PHASE"]
        pa, pb, _, tw_n, pad_h, pad_w, wcol, k_steps = rows[q]
        n0, i0, j0, c0_out = tile_origin(r, a["TILES_H"], a["TILES_W"], a["N_BLOCKS"], meta)
        acc = torch.zeros(bm, bn, dtype=torch.float64)
        for kk in range(k_steps):
            tap, c0 = divmod(kk * bk, a["K_IN"])
            ih, iw = i0 - pad_h + tap // tw_n, j0 - pad_w + tap % tw_n
            box = tma_box(a["dy_desc"], [ih, iw, n0, c0] if inner else [n0, ih, iw, c0]).reshape(bm, bk).double()
            acc += box @ tma_box(a["w_desc"], [c0_out, wcol + kk * bk]).double().T
        col = pb * a["C_OUT"] + c0_out
        at = [i0, pa, j0, n0, col] if inner else [n0, i0, pa, j0, col]
        acc = a["alpha"] * acc
        if meta.get("HAS_BETA"):
            acc += a["beta"] * tma_box(a["dx_desc"], at).reshape(bm, bn).double()
        tma_store(a["dx_desc"], at, acc)


def emulate_launch(grid, args, meta, y=None, kernel=None):
    """gluon_conv.launch's stand-in on the CPU: the launched kernel emulated through its
    descriptors (gluon_conv's by default, gluon_conv_strided's or gluon_dgrad_fused's)."""
    from tridnn.cuda import gluon_conv, gluon_conv_strided, gluon_dgrad_fused
    # (by identity: hashing a JIT kernel computes its cache key, which the interpreter refuses)
    if kernel is None or kernel is gluon_conv.gluon_conv_fwd_kernel:
        emulate_gluon_conv(args, meta)
    elif kernel is gluon_conv_strided.gluon_conv_strided_kernel:
        emulate_gluon_conv_strided(args, meta)
    elif kernel is gluon_dgrad_fused.gluon_dgrad_fused_kernel:
        emulate_gluon_dgrad_fused(args, meta, grid)
    else:
        raise NotImplementedError(f"no emulation of {kernel}")
    return y


def _pointer_store(base, offsets, values):
    """Plain stores at element offsets from ``base``'s first element (negative strides
    included, as flip mode's dw); an offset outside base's storage fails the test."""
    import torch
    size = base.untyped_storage().nbytes() // base.element_size()
    where = base.storage_offset() + offsets
    if not where.numel():
        return
    assert where.min() >= 0 and where.max() < size, "a store outside the tensor's memory"
    flat = torch.as_strided(base, (size,), (1,), 0)
    flat[where] = values.to(base.dtype)


def _pointer_load(base, offsets):
    """Plain loads at element offsets from ``base``'s first element (_pointer_store's reads)."""
    import torch
    return torch.as_strided(base, (base.untyped_storage().nbytes() // base.element_size(),), (1,), 0)[
        base.storage_offset() + offsets]


def emulate_gluon_wgrad(plan):
    """gluon_wgrad.launch(plan) on the CPU: gluon_wgrad_kernel emulated in float64 from the
    plan's (args, meta) - every unit (_unit_coords: whole tiles, then split slices), the
    loader's box walk and tap offsets into x's stride-phase view (images inner or not), the
    dy^T @ x products, and the consumer's stores (a whole tile through the TMA descriptor
    under TMA_DW, else pointer stores at dw's strides with DW_VEC's row-only mask; a
    slice's float32 partial into its workspace slot) - then the real finish kernel (plain
    Triton, under the interpreter) sums the slices into dw."""
    import torch
    from tridnn.cuda import common
    from tridnn.cuda import gluon_wgrad as gw
    a = dict(zip(gw.gluon_wgrad_kernel.arg_names, plan.args))
    m = plan.meta
    nb_, bh, bw, bm, bn, taps_n = (m[k] for k in ("NB", "BH", "BW", "BLOCK_M", "BLOCK_N", "TAPS_N"))
    inner, bp, tn = m["IMAGES_INNER"], nb_ * bh * bw, taps_n * bn
    c, t_all, kw_n = a["C"], a["T"], a["KW"]

    def tap_offsets(t):  # _tap_offsets
        t = min(t, t_all - 1)
        kh, kw = t // kw_n, t % kw_n
        a_h, a_w = kh * a["DIL_H"] - a["PAD_H"], kw * a["DIL_W"] - a["PAD_W"]
        q_h = (a_h + a["SH"] * (a["PAD_H"] + 1)) // a["SH"] - (a["PAD_H"] + 1)
        q_w = (a_w + a["SW"] * (a["PAD_W"] + 1)) // a["SW"] - (a["PAD_W"] + 1)
        return q_h, a_h - q_h * a["SH"], q_w, (a_w - q_w * a["SW"]) * c

    rows, cols = torch.arange(bm), torch.arange(tn)
    for u in range(a["UNITS"]):
        whole = u < a["DIRECT"]  # _unit_coords
        q = max(u - a["DIRECT"], 0)
        tile = u if whole else a["DIRECT"] + q % a["R"]
        cb, r = tile % a["N_CB"], tile // a["N_CB"]
        kb, tg = r % a["N_KB"], r // a["N_KB"]
        t0, k0, c0 = tg * taps_n, kb * bm, cb * bn
        first = 0 if whole else (q // a["R"]) * a["PER"]
        last = a["BOXES"] if whole else min(first + a["PER"], a["BOXES"])
        acc = torch.zeros(bm, tn, dtype=torch.float64)
        for b in range(first, last):
            tw, r = b % a["TILES_W"], b // a["TILES_W"]
            n, oh, ow = (r // a["TILES_H"]) * nb_, (r % a["TILES_H"]) * bh, tw * bw
            dy = tma_box(a["dy_desc"], [oh, ow, n, k0] if inner else [n, oh, ow, k0]).reshape(bp, bm).double()
            xs = []
            for j in range(taps_n):
                dh, ph, dw_, pc = tap_offsets(t0 + j)
                at = [oh + dh, ph, ow + dw_, n, pc + c0] if inner else [n, oh + dh, ph, ow + dw_, pc + c0]
                xs.append(tma_box(a["x_desc"], at).reshape(bp, bn).double())
            acc += dy.T @ torch.cat(xs, 1)
        if not whole:
            slot = q * bm * tn + (rows * tn)[:, None] + cols[None, :]
            a["ws_ptr"][slot.reshape(-1)] = acc.reshape(-1).float()
        elif m["TMA_DW"]:
            tma_store(a["dw_desc"], [k0, t0 * c + c0], (acc * a["alpha"]).float())
        else:
            kr, cc, t = k0 + rows, c0 + cols % bn, t0 + cols // bn
            kh, kw = t // kw_n, t % kw_n
            if m["DW_VEC"]:  # (DW_C = 1; columns unmasked: the host vouched for them)
                off = (kr * a["DW_K"])[:, None] + (cc + kh * a["DW_H"] + kw * a["DW_W"])[None, :]
                mask = (kr < a["K"])[:, None].expand(bm, tn)
            else:
                off = (kr * a["DW_K"])[:, None] + (cc * a["DW_C"] + kh * a["DW_H"] + kw * a["DW_W"])[None, :]
                mask = (kr < a["K"])[:, None] & ((cc < c) & (t < t_all))[None, :]
            v = (acc * a["alpha"]).float()
            if not m["BETA_ZERO"]:
                old = torch.zeros(bm, tn)
                old[mask] = _pointer_load(a["dw_ptr"], off[mask]).float()
                v += a["beta"] * old
            _pointer_store(a["dw_ptr"], off[mask], v[mask])
    if plan.finish_grid is not None:
        common.launch(gw.wgrad_finish_kernel, plan.finish_grid, plan.finish_args, plan.finish_meta, {})
    return plan.dw


def emulate_dw3_gluon(grid, args, meta):
    """conv_depthwise_gluon's dw3_gluon_fwd_kernel on the CPU in float64 from its (args,
    meta): every unit (_unit), the loader's input rows and their column-shifted windows
    through x's descriptor (stride 2: the pair view), and the consumer's walk as written -
    stride 1's two rolling accumulators, stride 2's carried filter row, the DATA walk's even
    and odd dx columns - with its masked row stores (beta: blended with the old row) at y's
    strides (a store outside y's memory fails the test)."""
    import torch
    from tridnn.cuda import conv_depthwise_gluon as dg
    a = dict(zip(dg.dw3_gluon_fwd_kernel.arg_names, args))
    bwi, bc, run, nb = (meta[k] for k in ("BWI", "BC", "RUN", "NB"))
    data, stride, flip, has_beta = meta["DATA"], meta["STRIDE"], meta["FLIP"], meta["HAS_BETA"]
    rows = run + 1 if data else (run - 1) * stride + 3
    row_step, windows = (1 if data else stride), (2 if data else 3)
    y, w = a["y_ptr"], a["w_ptr"]
    cols_at, chans_at = (a["COL0"], a["COL1"], a["COL2"]), (a["CH0"], a["CH1"], a["CH2"])

    def store_row(offs, keep, o, done):  # _store_row
        m = keep & (o < a["OH"])
        where = (offs + o * a["ys_h"])[m]
        v = done[m]
        if has_beta:
            v = v + a["beta"] * _pointer_load(y, where).double()
        _pointer_store(y, where, v)

    for u in range(a["NUM_UNITS"]):
        cb, r = u % a["C_BLOCKS"], u // a["C_BLOCKS"]
        j, r = r % a["STRIPS"], r // a["STRIPS"]
        n, o0, q0, c0 = (r // a["RUNS"]) * nb, (r % a["RUNS"]) * run, j * bwi, cb * bc
        row0 = o0 * row_step - a["PAD_H"]
        ring = [[tma_box(a["x_desc"], [n, row0 + i, q0 + cols_at[k], c0 + chans_at[k]]).double()
                 for k in range(windows)] for i in range(rows)]  # [NB, 1, BWI, BC] windows a row
        take = iter(ring)
        chans = c0 + torch.arange(bc)
        ok = chans < a["C"]

        def wt(kh, kw):  # _weight: alpha * w[c, 0, kh, kw] (turned with FLIP), [1, 1, 1, BC]
            kh, kw = (2 - kh, 2 - kw) if flip else (kh, kw)
            v = torch.zeros(bc, dtype=torch.float64)
            v[ok] = _pointer_load(w, chans[ok] * a["ws_k"] + kh * a["ws_h"] + kw * a["ws_w"]).double()
            return (a["alpha"] * v).reshape(1, 1, 1, bc)
        wk = [[wt(kh, kw) for kw in range(3)] for kh in range(3)]
        imgs = n + torch.arange(nb)
        cols = 2 * (q0 + torch.arange(bwi)) if data else q0 + torch.arange(bwi)
        i4, c4, ch4 = imgs.reshape(nb, 1, 1, 1), cols.reshape(1, 1, bwi, 1), chans.reshape(1, 1, 1, bc)
        keep = (i4 < a["N"]) & (c4 < a["OW"]) & (ch4 < a["C"])
        offs = i4 * a["ys_n"] + c4 * a["ys_w"] + ch4
        if data:
            keep_odd = (i4 < a["N"]) & (c4 + 1 < a["OW"]) & (ch4 < a["C"])
            xa, xb = next(take)
            carry_e, carry_o = xa * wk[2][1], xb * wk[2][0] + xa * wk[2][2]
            for t in range(run):
                row = 2 * (o0 + t)
                xa, xb = next(take)
                if row >= 1:
                    store_row(offs, keep, row - 1, carry_e + xa * wk[0][1])
                    store_row(offs + a["ys_w"], keep_odd, row - 1, carry_o + xb * wk[0][0] + xa * wk[0][2])
                store_row(offs, keep, row, xa * wk[1][1])
                store_row(offs + a["ys_w"], keep_odd, row, xb * wk[1][0] + xa * wk[1][2])
                carry_e, carry_o = xa * wk[2][1], xb * wk[2][0] + xa * wk[2][2]
        elif stride == 1:
            acc_a = acc_b = 0.0
            for i in range(run + 2):
                xa, xb, xc = next(take)
                done = acc_a + xa * wk[2][0] + xb * wk[2][1] + xc * wk[2][2]
                acc_a = acc_b + xa * wk[1][0] + xb * wk[1][1] + xc * wk[1][2]
                acc_b = xa * wk[0][0] + xb * wk[0][1] + xc * wk[0][2]
                if i >= 2:
                    store_row(offs, keep, o0 + i - 2, done)
        else:
            xa, xb, xc = next(take)
            acc = xa * wk[0][0] + xb * wk[0][1] + xc * wk[0][2]
            for t in range(run):
                xa, xb, xc = next(take)
                acc = acc + xa * wk[1][0] + xb * wk[1][1] + xc * wk[1][2]
                xa, xb, xc = next(take)
                done = acc + xa * wk[2][0] + xb * wk[2][1] + xc * wk[2][2]
                acc = xa * wk[0][0] + xb * wk[0][1] + xc * wk[0][2]
                store_row(offs, keep, o0 + t, done)
        assert next(take, None) is None, "the consumer took fewer rows than the loader streamed"


def emulate_dw3_gluon_wgrad(grid, args, meta):
    """conv_depthwise_gluon_wgrad's kernel on the CPU in float64 from its (args, meta): each
    program's units (its channel block must stay the program's: the grid a multiple of
    C_BLOCKS), per unit the loader's x rows (three column-shifted windows) and dy rows
    through the descriptors and the nine tap accumulators kept across the program's units,
    then the program's sums over images and columns into its partial slot (ATOMIC: added
    into slot 0)."""
    import torch
    from tridnn.cuda import conv_depthwise_gluon_wgrad as dgw
    a = dict(zip(dgw.dw3_gluon_wgrad_kernel.arg_names, args))
    bwi, bc, run, nb = (meta[k] for k in ("BWI", "BC", "RUN", "NB"))
    part = a["part_ptr"].reshape(-1)
    for pid in range(grid[0]):
        acc = torch.zeros(9, nb, 1, bwi, bc, dtype=torch.float64)
        for u in range(pid, a["NUM_UNITS"], grid[0]):
            cb, r = u % a["C_BLOCKS"], u // a["C_BLOCKS"]
            assert cb == pid % a["C_BLOCKS"], "a program's units span two channel blocks"
            j, r = r % a["STRIPS"], r // a["STRIPS"]
            n, o0, q0, c0 = (r // a["RUNS"]) * nb, (r % a["RUNS"]) * run, j * bwi, cb * bc
            xs = [[tma_box(a["x_desc"], [n, o0 - a["PAD_H"] + i, q0 - a["PAD_W"] + kw, c0]).double()
                   for kw in range(3)] for i in range(run + 2)]
            for t in range(run):
                g = tma_box(a["dy_desc"], [n, o0 + t, q0, c0]).double()
                for kh in range(3):
                    for kw in range(3):
                        acc[3 * kh + kw] += g * xs[t + kh][kw]
        chans = (pid % a["C_BLOCKS"]) * bc + torch.arange(bc)
        ok = chans < a["C"]
        slot = 0 if meta["ATOMIC"] else pid // a["C_BLOCKS"]
        sums = acc.sum(dim=(1, 2, 3)).T  # [BC, 9]
        where = (slot * a["C"] * 9 + chans[:, None] * 9 + torch.arange(9)[None, :])[ok]
        if meta["ATOMIC"]:
            part[where.reshape(-1)] += sums[ok].reshape(-1).float()
        else:
            part[where.reshape(-1)] = sums[ok].reshape(-1).float()
