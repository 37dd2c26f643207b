"""Tensors past 2^31 elements through the Triton kernels: results checked on exact probes.

The other half of docs/reliability.md's GPU checks. Offsets past 2^31 - 1 need int64
index math; a kernel that keeps int32 wraps around and writes (or reads) the wrong
elements. Checked, through the public API on one GPU:

- convolution forward, every Triton algorithm: depthwise 1x2x32800x32800 float16 3x3
  (2.15e9 elements, NCHW), 4097x2x512x512 float16 3x3, 2 -> 2 channels (NHWC), and the
  single image 1x2x32800x32800 float16 3x3, 2 -> 2 channels, channels-last (NHWC: one
  image past 2^31 elements, so a row term oh * ys_h alone passes 2^31 and the kernels'
  INT64 path must widen every offset term, not only the image's); then backward data
  and backward filter, every Triton algorithm, on the same problems (the registry's
  lists: session 14's transform methods and ALGO_3 are in them);
- max pooling 3x3/2 (input past 2^31) and average pooling 3x3/1 (input and output past
  2^31) forward, max pooling backward, on the 4097x2x512x512 tensor;
- batch norm training forward (SPATIAL) on the same tensor (2^30 elements per channel).

A float64 reference of whole tensors this size is too slow, so the inputs are small
integers (every float32 partial sum is exact) and sampled windows of rows are checked:
the first rows, the middle, the rows holding element 2^31 of the output and of the
input, and the last rows. Each window's reference is tridnn.reference in float64 on the
CPU, run on the input rows the window needs plus a margin (at the window's edges the
reference pads, so only the rows whose inputs all lie inside are compared). The weight
gradient (a reduction over 2^31 elements) and the batch statistics are computed whole,
exactly, in float64 on the GPU. Every output is NaN-poisoned first and scanned whole
for NaN afterwards, so an unwritten element (the last rows included) fails.

    PYTHONPATH=src python3 benchmarks/gpu_large_tensors.py --out $OUT
    TRITON_INTERPRET=1 .venv/bin/python benchmarks/gpu_large_tensors.py --device cpu --small
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

INT32_BOUNDARY = 2**31
WORKSPACE_CAP = 96 << 30  # bytes; the H200 has ~139 GiB and the operands here take < 20 GiB
# beside the workspace: the operands (< 20 GiB) and the FFT methods' own temporaries (cuFFT
# output and plans: up to 21.4 GiB on the H100 run of 2026-12-05, where six FFT / ALGO_0
# checks with 33-72 GiB workspaces ran out of the 80 GiB)
OUTSIDE_WORKSPACE = 48 << 30


def workspace_cap(run) -> int:
    """The largest workspace a check may take on this device (bytes)."""
    if run.device.type != "cuda":
        return WORKSPACE_CAP
    return min(WORKSPACE_CAP, run.torch.cuda.get_device_properties(run.device).total_memory - OUTSIDE_WORKSPACE)


# -- geometry of the checked windows -----------------------------------------------------------------
class Shapes:
    """The problems at full size, or scaled down for a dry run under the interpreter
    (--small: the same structure; element 2^31 becomes the element 3/4 of the way in)."""

    def __init__(self, small: bool):
        self.small = small
        self.dw = (1, 2, 40, 36) if small else (1, 2, 32800, 32800)
        self.single = self.dw  # the same dims, channels-last and not depthwise
        self.batch = (5, 2, 12, 10) if small else (4097, 2, 512, 512)
        self.rows = 3 if small else 8  # rows per probe window

    def boundary(self, elements: int) -> int:
        return elements * 3 // 4 if self.small else INT32_BOUNDARY


def element_position(t, offset: int):
    """(n, c, h) of the element at memory offset ``offset`` of the 4-D view ``t``."""
    order = sorted(range(4), key=lambda d: -t.stride()[d])
    index = [0] * 4
    for d in order:
        index[d], offset = divmod(offset, t.stride()[d])
    return index[0], index[1], index[2]


def probe_rows(shapes, out, inp=None):
    """Row windows (n, h0, h1) of ``out`` to check: first, middle, last, and those holding
    element 2^31 of ``out`` and (mapped through the op's row scale) of ``inp``."""
    n_all, _, rows_all, _ = out.shape
    r = min(shapes.rows, rows_all)
    middle = (rows_all - r) // 2
    windows = [(0, 0, r), (n_all // 2, middle, middle + r), (n_all - 1, rows_all - r, rows_all)]
    for t in (out, inp):
        if t is None or shapes.boundary(t.numel()) >= t.numel():  # no element 2^31 in this tensor
            continue
        n, _, h = element_position(t, shapes.boundary(t.numel()))
        h = h * rows_all // t.shape[2]  # input rows -> output rows
        h0 = min(max(0, h - r // 2), rows_all - r)
        windows.append((n, h0, h0 + r))
    return sorted(set(windows))


def input_window(o0, o1, k, s, p, in_rows, margin=2):
    """Input rows [xa, xb), xa a multiple of s, such that the op on them with padding p
    (pretended at the window's edges) gives output rows xa // s ... of which [o0, o1)
    see only real rows or real padding."""
    xa = max(0, (o0 - margin) * s)
    xa -= xa % s
    xb = min(in_rows, (o1 - 1 + margin) * s - p + k)
    return xa, xb


def output_window_for_input_rows(i0, i1, k, s, p, in_rows, out_rows, margin=2):
    """For an adjoint (data gradient) window of input rows [i0, i1): input rows [xa, xb)
    and the output rows [ya, yb) that the pretended op on them produces."""
    xa = max(0, i0 - margin * s - k)
    xa -= xa % s
    xb = min(in_rows, i1 + margin * s + k)
    ya = xa // s
    yb = min(out_rows, ya + (xb - xa + 2 * p - k) // s + 1)
    return xa, xb, ya, yb


def host64(t) -> np.ndarray:
    return t.detach().to("cpu", dtype=__import__("torch").float64).numpy()


# -- the checks ---------------------------------------------------------------------------------------
class Runner:
    def __init__(self, args):
        import torch

        import tridnn
        from fuzz_gpu import CompileCounter, limit_tuning
        self.torch = torch
        self.tridnn = tridnn
        self.args = args
        self.compiles = CompileCounter(args.device, count_only=False)
        limit_tuning("first")  # one untimed launch config per kernel: the Tuner would time every candidate
        if args.device == "cpu":
            self.handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
        else:
            self.handle = tridnn.Handle(device=args.device, find_cache=None)
        self.device = self.handle.backend.device
        self.gen = torch.Generator(device=self.device).manual_seed(args.seed)
        self.shapes = Shapes(args.small)
        self.rows: list = []
        self.broken = ""
        self.start = time.perf_counter()

    # -- arrays --------------------------------------------------------------------------------------
    def tensor(self, dims, layout, dtype):
        """A packed logical-NCHW view in NCHW or NHWC memory order, and its descriptor."""
        from tridnn.types import TensorFormat
        torch = self.torch
        tdt = getattr(torch, dtype)
        if layout == "NHWC":
            n, c, h, w = dims
            t = torch.empty((n, h, w, c), dtype=tdt, device=self.device).permute(0, 3, 1, 2)
        else:
            t = torch.empty(dims, dtype=tdt, device=self.device)
        return self.tridnn.TensorDescriptor.packed(dims, dtype, TensorFormat[layout]), t

    def fill_ints(self, t, lo, hi, density=1.0):
        """Small integers in [lo, hi] (zero where a draw above ``density`` falls)."""
        torch = self.torch
        flat = t.permute(*sorted(range(t.dim()), key=lambda d: -t.stride()[d]))  # memory order
        assert flat.is_contiguous(), "fill_ints takes packed tensors"
        buf = flat.view(-1)
        chunk = 1 << 28
        for start in range(0, buf.numel(), chunk):
            part = buf[start:start + chunk]
            vals = torch.randint(lo, hi + 1, part.shape, generator=self.gen, device=self.device, dtype=torch.int8)
            if density < 1.0:
                keep = torch.rand(part.shape, generator=self.gen, device=self.device) < density
                vals = vals * keep
            part.copy_(vals)

    def unwritten(self, t) -> int:
        """NaN count of a poisoned output after the call, scanned whole (in slices of N)."""
        torch = self.torch
        step = max(1, (1 << 28) // max(1, t[0].numel()))
        total = 0
        for n0 in range(0, t.shape[0], step):
            total += int(torch.isnan(t[n0:n0 + step]).sum().item())
        return total

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def check_context(self, message: str) -> None:
        """After a failure: whether the CUDA context still works (an illegal address breaks it)."""
        from fuzz_gpu import _context_broken
        if self.device.type == "cuda" and _context_broken(self.torch, self.device, message):
            self.broken = f"not run: the CUDA context broke earlier ({message[:120]})"

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.start > self.args.time_budget_s

    def record(self, op, shape, elements, fn, note=""):
        """Run one check; a row of the table whatever happens."""
        only = getattr(self.args, "only", None)
        if only and not any(part in op for part in only.split(",")):
            return
        if self.out_of_time() or self.broken:
            self.rows.append(dict(op=op, shape=shape, elements=elements, max_error=None, status="skipped",
                                  seconds=0.0, note=self.broken or "time budget reached"))
            return
        t0 = time.perf_counter()
        compiles0 = self.compiles.compiles
        try:
            max_error, check = fn()
            status, detail = "pass", check
            self.sync()
        except Exception as exc:  # noqa: BLE001  (each failure becomes a row; the next check runs)
            max_error, status = None, "FAIL"
            detail = f"{type(exc).__name__}: {exc}"[:600]
            traceback.print_exc()
            self.check_context(detail)
        self.rows.append(dict(op=op, shape=shape, elements=elements, max_error=max_error, status=status,
                              seconds=round(time.perf_counter() - t0, 2), compiles=self.compiles.compiles - compiles0,
                              note=(note + " " + detail).strip()))
        print(f"  {op:<44} {status:<5} {self.rows[-1]['seconds']:>7.1f} s  {detail[:100]}", flush=True)

    # -- comparisons ---------------------------------------------------------------------------------
    def compare(self, got, want, dtype, exact, name):
        """Max |got - want| of one window; raises on a mismatch (exact or the dtype's tolerance)."""
        from tridnn import testing
        got = np.asarray(got, np.float64)
        want = np.asarray(want, np.float64)
        if np.isnan(got).any():
            raise AssertionError(f"{name}: {int(np.isnan(got).sum())} NaN (unwritten) in the window")
        testing.check_result(got, want, dtype, exact, name=name)
        return float(np.abs(got - want.astype(testing.DataType.of(dtype).numpy).astype(np.float64)).max(initial=0))


# -- convolution ----------------------------------------------------------------------------------------
CONV_PROBLEMS = {  # name: (shape attribute, layout, groups, output channels)
    "depthwise": ("dw", "NCHW", 2, 2),
    "batch": ("batch", "NHWC", 1, 2),
    "single": ("single", "NHWC", 1, 2),  # one channels-last image past 2^31 elements
}


def conv_checks(run: Runner, name: str, directions):
    import tridnn
    from tridnn import reference
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    torch = run.torch
    attr, layout, groups, k_out = CONV_PROBLEMS[name]
    dims = getattr(run.shapes, attr)
    n, c, h, w = dims
    dtype = "float16"
    conv = tridnn.ConvolutionDescriptor(padding=(1, 1), stride=(1, 1), dilation=(1, 1), groups=groups, nd=2)
    x_desc, x = run.tensor(dims, layout, dtype)
    w_desc = tridnn.FilterDescriptor((k_out, c // groups, 3, 3), dtype,
                                     tridnn.TensorFormat.NHWC if layout == "NHWC" else tridnn.TensorFormat.NCHW)
    y_dims = conv.output_dims(x_desc, w_desc)
    y_desc, y = run.tensor(y_dims, layout, dtype)
    wt = torch.empty(w_desc.dims, dtype=torch.float16, device=run.device)
    if layout == "NHWC":
        wt = wt.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    run.fill_ints(wt, -2, 2)
    w64 = host64(wt)
    geometry = dict(stride=(1, 1), dilation=(1, 1), groups=groups)
    label = f"{n}x{c}x{h}x{w} {dtype} {layout} 3x3" + (" depthwise" if groups == c else "")
    elements = max(x.numel(), y.numel())

    def run_algo(direction, algo, out, call, check):
        op = f"conv {direction} {name} {algo.name}"
        row = dict(op=op, shape=label, elements=elements, max_error=None, seconds=0.0)
        try:
            problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
            reason = algo.not_applicable(problem)
            need = 0 if reason is not None else algo.workspace_size(problem)
        except Exception as exc:  # noqa: BLE001  (the host side of the algorithm failed: a row)
            traceback.print_exc()
            run.rows.append(dict(row, status="FAIL", note=f"{type(exc).__name__}: {exc}"[:600]))
            return
        if reason is not None:
            run.rows.append(dict(row, status="n/a", note=reason))
            return
        cap = workspace_cap(run)
        if need > cap:
            run.rows.append(dict(row, status="skipped",
                                 note=f"workspace {need / 2**30:.1f} GiB over this device's {cap / 2**30:.0f} GiB "
                                      f"cap (the operands and FFT temporaries need the rest)"))
            return

        def body():
            out.fill_(float("nan"))
            if need and run.device.type == "cuda":  # earlier checks' cached blocks and cuFFT plans
                torch.backends.cuda.cufft_plan_cache.clear()
                torch.cuda.empty_cache()
            ws = torch.empty(need, dtype=torch.uint8, device=run.device) if need else None
            call(algo, ws)
            run.sync()
            del ws
            missing = run.unwritten(out)
            if missing:
                raise AssertionError(f"{missing} output elements never written (NaN poison left)")
            return check(algo)
        run.record(op, label, elements, body, note=f"workspace {need / 2**30:.1f} GiB")

    if "fwd" in directions:
        run.fill_ints(x, -2, 2)

        def fwd_call(algo, ws):
            tridnn.convolution_forward(run.handle, 1.0, x_desc, x, w_desc, wt, conv, algo.enum, ws, 0.0, y_desc, y)

        def fwd_check(algo):
            worst = 0.0
            for (pn, o0, o1) in probe_rows(run.shapes, y, x):
                xa, xb = input_window(o0, o1, 3, 1, 1, h)
                want = reference.conv_forward(host64(x[pn:pn + 1, :, xa:xb]), w64, pad_pre=(1, 1), pad_post=(1, 1),
                                              **geometry)
                got = host64(y[pn:pn + 1, :, o0:o1])
                worst = max(worst, run.compare(got, want[:, :, o0 - xa:o1 - xa], dtype, algo.exact,
                                               f"y rows {o0}:{o1} of image {pn}"))
            return worst, "exact" if algo.exact else "within float16 tolerance"
        for algo in registry.algorithms("conv", "fwd", "triton"):
            run_algo("fwd", algo, y, fwd_call, fwd_check)

    if "bwd_data" in directions:
        dy, dx = y, x  # dy takes y's memory, dx x's
        run.fill_ints(dy, -2, 2)

        def bwd_data_call(algo, ws):
            tridnn.convolution_backward_data(run.handle, 1.0, w_desc, wt, y_desc, dy, conv, algo.enum, ws, 0.0,
                                             x_desc, dx)

        def bwd_data_check(algo):
            worst = 0.0
            for (pn, i0, i1) in probe_rows(run.shapes, dx, dy):
                xa, xb, ya, yb = output_window_for_input_rows(i0, i1, 3, 1, 1, h, y_dims[2])
                want = reference.conv_backward_data(host64(dy[pn:pn + 1, :, ya:yb]), w64, (1, c, xb - xa, w),
                                                    pad_pre=(1, 1), pad_post=(1, 1), **geometry)
                got = host64(dx[pn:pn + 1, :, i0:i1])
                worst = max(worst, run.compare(got, want[:, :, i0 - xa:i1 - xa], dtype, algo.exact,
                                               f"dx rows {i0}:{i1} of image {pn}"))
            return worst, "exact" if algo.exact else "within float16 tolerance"
        for algo in registry.algorithms("conv", "bwd_data", "triton"):
            run_algo("bwd_data", algo, dx, bwd_data_call, bwd_data_check)

    if "bwd_filter" in directions:
        # {-1, 0, 1} data and sparse +-1 gradients keep the 2^31-term sums (exact in float32
        # partials) far inside float16's range; the reference is the whole sum in float64
        run.fill_ints(x, -1, 1)
        run.fill_ints(y, -1, 1, density=0.25)
        dw = torch.empty_like(wt)
        want = weight_gradient(run, x, y, w_desc.dims, groups)

        def bwd_filter_call(algo, ws):
            tridnn.convolution_backward_filter(run.handle, 1.0, x_desc, x, y_desc, y, conv, algo.enum, ws, 0.0,
                                               w_desc, dw)

        def bwd_filter_check(algo):
            # half-type weight gradients round split partial sums (tests/test_cuda_conv.py): tolerance
            got = host64(dw)
            return run.compare(got, want, dtype, False, "dw"), \
                f"whole dw within float16 tolerance (|dw| up to {np.abs(want).max():.0f})"
        for algo in registry.algorithms("conv", "bwd_filter", "triton"):
            run_algo("bwd_filter", algo, dw, bwd_filter_call, bwd_filter_check)
    del x, y
    if run.device.type == "cuda":
        torch.cuda.empty_cache()


def weight_gradient(run, x, dy, w_dims, groups):
    """dw[k, c, r, s] = sum over n, h, w of x_padded[n, c, h + r, w + s] * dy[n, k, h, w], whole,
    in float64 on the device (exact: integer terms, sums far below 2^53); stride 1, pad 1."""
    torch = run.torch
    k_out, cg, kh, kw = w_dims
    kg = k_out // groups
    n, c, h, w = x.shape
    dw = torch.zeros(w_dims, dtype=torch.float64, device=run.device)
    step = max(1, (1 << 26) // max(1, c * h * w))
    row_step = h if step > 1 or c * h * w <= (1 << 26) else max(1, (1 << 26) // (c * w))
    for n0 in range(0, n, step):
        for r0 in range(0, h, row_step):
            r1 = min(h, r0 + row_step)
            lo, hi = max(0, r0 - 1), min(h, r1 + 1)
            xs = torch.zeros((min(step, n - n0), c, r1 - r0 + 2, w + 2), dtype=torch.float64, device=run.device)
            xs[:, :, lo - r0 + 1:hi - r0 + 1, 1:w + 1] = x[n0:n0 + step, :, lo:hi].to(torch.float64)
            g = dy[n0:n0 + step, :, r0:r1].to(torch.float64)
            for r in range(kh):
                for s in range(kw):
                    shifted = xs[:, :, r:r + (r1 - r0), s:s + w]
                    for grp in range(groups):
                        xg = shifted[:, grp * cg:(grp + 1) * cg]
                        gg = g[:, grp * kg:(grp + 1) * kg]
                        dw[grp * kg:(grp + 1) * kg, :, r, s] += torch.einsum("nchw,nkhw->kc", xg, gg)
    return dw.cpu().numpy()


# -- pooling and batch norm ------------------------------------------------------------------------------
def pooling_checks(run: Runner):
    import tridnn
    from tridnn import PoolingDescriptor, PoolingMode
    from tridnn.reference import pooling as pool_ref
    torch = run.torch
    dims = run.shapes.batch
    n, c, h, w = dims
    dtype = "float16"
    x_desc, x = run.tensor(dims, "NHWC", dtype)
    run.fill_ints(x, -2, 2)
    label = f"{n}x{c}x{h}x{w} {dtype} NHWC"
    cases = [("max pool 3x3/2 fwd", PoolingMode.MAX, 2), ("avg pool 3x3/1 fwd (incl. padding)",
                                                         PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING, 1)]
    for op, mode, s in cases:
        pool = PoolingDescriptor(mode, (3, 3), (1, 1), (s, s))
        y_dims = tridnn.get_pooling_forward_output_dim(pool, x_desc)
        y_desc, y = run.tensor(y_dims, "NHWC", dtype)

        def body(pool=pool, mode=mode, s=s, y=y, y_desc=y_desc):
            y.fill_(float("nan"))
            tridnn.pooling_forward(run.handle, pool, 1.0, x_desc, x, 0.0, y_desc, y)
            run.sync()
            missing = run.unwritten(y)
            if missing:
                raise AssertionError(f"{missing} output elements never written")
            worst = 0.0
            for (pn, o0, o1) in probe_rows(run.shapes, y, x):
                xa, xb = input_window(o0, o1, 3, s, 1, h)
                want = pool_ref.pooling_forward(host64(x[pn:pn + 1, :, xa:xb]), int(mode), (3, 3), (1, 1), (s, s))
                got = host64(y[pn:pn + 1, :, o0:o1])
                ya = xa // s
                worst = max(worst, run.compare(got, want[:, :, o0 - ya:o1 - ya], dtype, mode.is_max,
                                               f"y rows {o0}:{o1} of image {pn}"))
            return worst, "exact" if mode.is_max else "within float16 tolerance"
        run.record(op, label, max(x.numel(), y.numel()), body)
        if mode.is_max:
            max_y, max_y_desc = y, y_desc
        else:
            del y
    # max pooling backward: dx (past 2^31) from dy over the forward's y
    pool = PoolingDescriptor(PoolingMode.MAX, (3, 3), (1, 1), (2, 2))
    dy_desc, dy = run.tensor(max_y_desc.dims, "NHWC", dtype)
    run.fill_ints(dy, -2, 2)
    dx_desc, dx = run.tensor(dims, "NHWC", dtype)

    def backward():
        tridnn.pooling_forward(run.handle, pool, 1.0, x_desc, x, 0.0, max_y_desc, max_y)
        dx.fill_(float("nan"))
        tridnn.pooling_backward(run.handle, pool, 1.0, max_y_desc, max_y, dy_desc, dy, x_desc, x, 0.0, dx_desc, dx)
        run.sync()
        missing = run.unwritten(dx)
        if missing:
            raise AssertionError(f"{missing} dx elements never written")
        worst = 0.0
        for (pn, i0, i1) in probe_rows(run.shapes, dx, dy):
            xa, xb, ya, yb = output_window_for_input_rows(i0, i1, 3, 2, 1, h, max_y.shape[2])
            want = pool_ref.pooling_backward(host64(x[pn:pn + 1, :, xa:xb]), host64(dy[pn:pn + 1, :, ya:yb]),
                                             0, (3, 3), (1, 1), (2, 2))
            got = host64(dx[pn:pn + 1, :, i0:i1])
            worst = max(worst, run.compare(got, want[:, :, i0 - xa:i1 - xa], dtype, True,
                                           f"dx rows {i0}:{i1} of image {pn}"))
        return worst, "exact"
    run.record("max pool 3x3/2 bwd", label, dx.numel(), backward)
    del dx, dy, max_y
    batch_norm_check(run, x_desc, x, label)
    del x
    if run.device.type == "cuda":
        torch.cuda.empty_cache()


def batch_norm_check(run: Runner, x_desc, x, label):
    import tridnn
    torch = run.torch
    c = x.shape[1]
    mode = tridnn.BatchNormMode.SPATIAL
    eps = 1e-5
    bn = tridnn.derive_bn_tensor_descriptor(x_desc, mode)
    param = lambda v: torch.tensor(v, dtype=torch.float32, device=run.device).reshape(bn.dims)  # noqa: E731
    scale, bias = param([1.5, 0.75][:c] + [1.0] * (c - 2)), param([0.25, -0.5][:c] + [0.0] * (c - 2))
    rmean, rvar = param([0.0] * c), param([1.0] * c)
    smean, sinv = param([float("nan")] * c), param([float("nan")] * c)
    y_desc, y = run.tensor(tuple(x.shape), "NHWC", "float16")

    def body():
        y.fill_(float("nan"))
        tridnn.batch_norm_forward_training(run.handle, mode, 1.0, 0.0, x_desc, x, y_desc, y, bn, scale, bias, 1.0,
                                           rmean, rvar, eps, smean, sinv)
        run.sync()
        missing = run.unwritten(y)
        if missing:
            raise AssertionError(f"{missing} output elements never written")
        # whole-tensor statistics in float64 (integer data: the sums are exact)
        count = x.numel() // c
        s1 = torch.zeros(c, dtype=torch.float64, device=run.device)
        s2 = torch.zeros(c, dtype=torch.float64, device=run.device)
        step = max(1, (1 << 26) // max(1, x[0].numel()))
        for n0 in range(0, x.shape[0], step):
            part = x[n0:n0 + step].to(torch.float64)
            s1 += part.sum((0, 2, 3))
            s2 += (part * part).sum((0, 2, 3))
        mean = (s1 / count).cpu().numpy()
        var = (s2 / count).cpu().numpy() - mean ** 2
        inv = 1.0 / np.sqrt(var + eps)
        worst = run.compare(host64(smean).reshape(-1), mean, "float32", False, "saved mean")
        worst = max(worst, run.compare(host64(sinv).reshape(-1), inv, "float32", False, "saved inverse std"))
        # running mean with factor 1 is the batch mean; running variance the unbiased batch variance
        worst = max(worst, run.compare(host64(rmean).reshape(-1), mean, "float32", False, "running mean"))
        worst = max(worst, run.compare(host64(rvar).reshape(-1), var * count / (count - 1), "float32", False,
                                       "running variance"))
        sc, bs = host64(scale).reshape(1, c, 1, 1), host64(bias).reshape(1, c, 1, 1)
        for (pn, o0, o1) in probe_rows(run.shapes, y, x):
            xw = host64(x[pn:pn + 1, :, o0:o1])
            want = sc * (xw - mean.reshape(1, c, 1, 1)) * inv.reshape(1, c, 1, 1) + bs
            worst = max(worst, run.compare(host64(y[pn:pn + 1, :, o0:o1]), want, "float16", False,
                                           f"y rows {o0}:{o1} of image {pn}"))
        return worst, "statistics within float32 tolerance, y within float16 tolerance"
    run.record("batch norm SPATIAL training fwd", label, x.numel(), body)


# -- report ------------------------------------------------------------------------------------------------
def table(rows) -> str:
    head = ("op", "shape", "elements", "max error", "result", "s")
    lines = [head] + [(r["op"], r["shape"], f"{r['elements']:,}", "-" if r["max_error"] is None else
                       f"{r['max_error']:.3g}", r["status"], f"{r['seconds']:.1f}") for r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(v).ljust(wd) if i < 2 or i == 4 else str(v).rjust(wd)
                               for i, (v, wd) in enumerate(zip(line, widths))) for line in lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the interpreter, with --small)")
    parser.add_argument("--small", action="store_true", help="scaled-down shapes for a dry run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget-s", type=float, default=270.0,
                        help="checks not started by then are reported as skipped")
    parser.add_argument("--directions", default="fwd,bwd_data,bwd_filter",
                        help="convolution directions to check (forward runs first)")
    parser.add_argument("--out", type=Path, default=None, help="directory for gpu_large_tensors.json")
    parser.add_argument("--only", default=None,
                        help="comma-separated parts of check names to run (e.g. 'depthwise FFT,ALGO_0')")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        if not args.small:
            parser.error("the interpreter runs only --small shapes")
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import warnings
    warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)
    # the interpreter evaluates masked-off lanes too (log(0), 0/0): NumPy warns, results are unaffected
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    import torch
    run = Runner(args)
    directions = [d for d in args.directions.split(",") if d]
    print(f"device {run.handle.device} ({run.handle.backend.device_name}), shapes "
          f"{'small (dry run)' if args.small else 'full'}", flush=True)
    # the checks the issue asks for first (the layers: few kernels, quick), the extra directions after
    extra = [d for d in directions if d != "fwd"]
    groups = [("pooling and batch norm", pooling_checks, ()),
              ("conv fwd depthwise", conv_checks, ("depthwise", [d for d in directions if d == "fwd"])),
              ("conv fwd batch", conv_checks, ("batch", [d for d in directions if d == "fwd"])),
              ("conv fwd single", conv_checks, ("single", [d for d in directions if d == "fwd"])),
              ("conv bwd depthwise", conv_checks, ("depthwise", extra)),
              ("conv bwd batch", conv_checks, ("batch", extra)),
              ("conv bwd single", conv_checks, ("single", extra))]
    for name, fn, fn_args in groups:
        if run.broken or (fn is conv_checks and not fn_args[1]):
            continue
        try:
            fn(run, *fn_args)
        except Exception as exc:  # noqa: BLE001  (setting up a group failed: a row, then the next group)
            traceback.print_exc()
            message = f"{type(exc).__name__}: {exc}"[:600]
            run.rows.append(dict(op=f"{name} (setup)", shape="", elements=0, max_error=None, status="FAIL",
                                 seconds=0.0, note=message))
            run.check_context(message)
        if run.device.type == "cuda":
            torch.cuda.empty_cache()
    import triton
    report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), device=str(run.device),
                  device_name=run.handle.backend.device_name, torch=torch.__version__, triton=triton.__version__,
                  small=args.small, seconds=round(time.perf_counter() - run.start, 1),
                  compiles=run.compiles.compiles, compile_seconds=round(run.compiles.seconds, 1),
                  peak_gib=round(torch.cuda.max_memory_allocated(run.device) / 2**30, 1)
                  if run.device.type == "cuda" else None, rows=run.rows)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_large_tensors.json").write_text(json.dumps(report, indent=1))
    failed = [r for r in run.rows if r["status"] == "FAIL"]
    for r in failed:
        print(f"FAIL {r['op']}: {r['note']}")
    skipped = [r for r in run.rows if r["status"] == "skipped"]
    print(f"{len(run.rows)} checks, {len(failed)} failed, {len(skipped)} skipped, {report['seconds']} s "
          f"({report['compiles']} Triton compiles, {report['compile_seconds']} s), peak {report['peak_gib']} GiB")
    print(table(run.rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
