"""Pieces shared by the Triton convolution algorithms: the base class, row indexing,
and the per-problem launch-config tuner."""
from __future__ import annotations

import collections
import functools
import os
import threading
import warnings

import torch
import triton
import triton.language as tl

from ..algorithms.base import Algorithm
from . import launch_record
from . import layer_utils  # noqa: F401  (its fixes to Triton's interpreter, for every kernel)
from .geometry import unsupported_dtype
from .memo import IdentityMemo


class TritonConvAlgorithm(Algorithm):
    """Base of the Triton convolutions. ``handles_flip``: the kernels read CONVOLUTION
    mode's flipped filter (and write the flipped filter gradient) by reversing the tap
    index, so the API passes the filter unflipped."""
    backend = "triton"
    handles_flip = True
    exact = True  # integer fills are exact even in tf32; transform methods say False

    def not_applicable(self, problem):
        return unsupported_dtype(problem)

    def replay(self, problem, tensors, workspace, alpha, beta):
        """A dry run's launch record of ``run`` for these tensors (launch_record), or None
        where run does more than queue launches (torch operations, a tuner miss)."""
        owned = [*tensors.values(), *workspace.values()]
        return launch_record.record(lambda: self.run(problem, tensors, workspace, alpha, beta), owned)


def interpreted(tensor) -> bool:
    return tensor.device.type != "cuda"


_SMS: dict = {}  # device index -> SMs (asked once: torch's query costs microseconds a call)


def sm_count(device) -> int:
    if device.type != "cuda":
        return 4
    sms = _SMS.get(device.index)
    if sms is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        if device.index is not None:  # (a bare "cuda" means whichever device is current)
            _SMS[device.index] = sms
    return sms


@triton.jit
def _zero_kernel(out_ptr,   # a contiguous buffer
                 n,         # its elements
                 BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), out_ptr.dtype.element_ty), mask=offs < n)


def zero_fill(t) -> None:
    """t[...] = 0 for a contiguous tensor, as a launch (``t.zero_()`` is a torch operation,
    which a launch record cannot repeat: ALGO_0's atomic partials start from zero every call)."""
    if not t.is_contiguous():
        raise ValueError("zero_fill: the buffer must be contiguous")
    n = t.numel()
    # (the interpreter runs programs one at a time: few wide ones, ~1 ms each)
    block = 1024 if t.is_cuda else min(triton.next_power_of_2(max(n, 1)), 1 << 16)
    if n:
        launch(_zero_kernel, (cdiv(n, block),), (t, n), dict(BLOCK=block), {})


@triton.jit
def split_rows(offs_m, OD, OH, OW):
    """Output-pixel row index -> (n, od, oh, ow)."""
    ow = offs_m % OW
    t = offs_m // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    n = t // OD
    return n, od, oh, ow


@triton.jit
def wide(strides):
    """A tuple of element strides as int64. A kernel's INT64 path widens the strides of its
    views, so every coordinate x stride term is int64: not only the image's, since one
    term alone passes 2^31 in a single big image (oh * s_h of a 1 x 2 x 32800 x 32800
    channels-last view). The coordinates stay int32 (their divisions too)."""
    out = ()
    for i in tl.static_range(len(strides)):
        out = out + (tl.cast(strides[i], tl.int64),)
    return out


@triton.jit
def grouped_tile(pid, num_m, num_n, GROUP_M: tl.constexpr):
    """Tile (pid_m, pid_n) of a linear program id, GROUP_M row tiles at a time so that
    neighbouring programs share their A rows and B columns in L2."""
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


class Tuner:
    """Chooses a launch config per problem by timing each candidate on the GPU (once, then
    the leaders a second time in reverse order: ``_retimed_leaders``).

    ``candidates``: the configs, or a function returning them (called on a miss only).
    ``launch(config, out)`` runs the kernel(s) writing into ``out`` (a scratch output
    during tuning, so the caller's output and beta blending are never disturbed).
    Under the interpreter the first candidate is taken without timing.

    The candidates' outputs are cross-checked: they fall into groups that agree up to
    rounding, the largest group's configs are kept (on a tie, the group of the earliest
    config: the lists put a conservative config first) and every other config is dropped
    with a warning. So a miscompiled config can be slow to tune but never wins, even when
    it is the first: the fused WINOGRAD's first GPU config gave wrong bfloat16 results on
    an H100 (2026-12-06) and the four others agreed.

    TRIDNN_TUNE=first skips the timing and takes the first candidate (fuzzing and
    first-call latency: one compile per kernel instead of one per candidate).

    ``tolerance``: the relative L2 difference that counts as disagreement; reductions
    whose split changes the summation order over ~10^5 terms with cancellation
    (backward filter) pass a looser one than rounding alone needs."""

    # (key, config) of every choice made, newest last: benchmarks read which kernel a call
    # tuned to (bench_gpu_conv.py's "tuned" field); appended only on a miss
    picks: collections.deque = collections.deque(maxlen=4096)

    def __init__(self, tolerance=None):
        self._best: dict = {}
        self._lock = threading.Lock()
        self.tolerance = tolerance

    def chosen(self, key):
        """The config picked for key, None before its first pick (nothing is tuned)."""
        return self._best.get(key)

    def pick(self, key, candidates, launch, out, device, scratch_ok=False):
        """``scratch_ok``: ``out`` is a workspace buffer the caller overwrites next anyway
        (an im2col/col2im column, Winograd's transform products), so the candidates are
        timed on it instead of on a scratch copy: those buffers can be tens of GiB.
        ``candidates`` and ``out`` may be callables that make them, called on a miss only."""
        best = self._best.get(key)
        if best is not None:
            return best
        if launch_record.active() is not None:  # a dry run: nothing it launches would run
            raise launch_record.Refused(f"no tuned config yet for {key}")
        if callable(candidates):  # built only on a miss (it costs host time per call)
            candidates = candidates()
        if callable(out):
            out = out()
        if device.type != "cuda" or len(candidates) == 1 or os.environ.get("TRIDNN_TUNE") == "first":
            best = candidates[0]
        else:
            scratch = out if scratch_ok else torch.empty_strided(out.shape, out.stride(), dtype=out.dtype,
                                                                 device=out.device)
            groups = []  # [a sample of the group's first result, [(ms, cfg), ...]], by first config
            for cfg in candidates:
                try:
                    run = functools.partial(launch, cfg, scratch)
                    ms = gpu_time_ms(run)
                except Exception as exc:  # a config that does not fit (shared memory, registers)
                    if "OutOfResources" not in type(exc).__name__ and "resources" not in str(exc).lower():
                        raise
                    continue
                sample = _sample(scratch)
                group = next((g for g in groups if agrees(sample, g[0], self.tolerance)), None)
                if group is None:
                    groups.append([sample, [(ms, cfg, run)]])
                else:
                    group[1].append((ms, cfg, run))
            if not groups:
                raise RuntimeError(f"no launch config fits this GPU for {key}")
            kept = max(groups, key=lambda g: len(g[1]))[1]  # (max: the earliest of equal groups)
            for group in groups:
                if group[1] is not kept:
                    for _, cfg, _ in group[1]:
                        warnings.warn(f"tridnn: launch config {cfg} gave a result that disagrees with "
                                      f"{len(kept)} of the {sum(len(g[1]) for g in groups)} configs that ran "
                                      f"(among them {kept[0][1]}) for {key}; it is not used", RuntimeWarning,
                                      stacklevel=2)
            best = min(_retimed_leaders(kept), key=lambda t: t[0])[1]
        with self._lock:
            self._best[key] = best
        Tuner.picks.append((key, best))
        return best


RETIME_MARGIN = 0.15  # candidates within this fraction of the fastest are timed a second time
RETIME_MAX = 4


def _retimed_leaders(timed):
    """The leaders of one timing pass, each timed again in reverse order, their two times
    averaged: a clock or power drift across the pass favours the configs timed early (on an
    H100, session 30, aspp_d2's three backward-data leaders ran 5-11% slower a few seconds
    later); timing them again back to front cancels a linear drift. Only configs within
    RETIME_MARGIN of the fastest can change places.
    ``timed``: [(ms, cfg, run)] in the order they ran; returns [(ms, cfg)]."""
    fastest = min(ms for ms, _, _ in timed)
    close = [i for i, (ms, _, _) in enumerate(timed) if ms <= fastest * (1 + RETIME_MARGIN)]
    leaders = sorted(sorted(close, key=lambda i: timed[i][0])[:RETIME_MAX], reverse=True)  # back to front
    if len(leaders) < 2:
        return [(ms, cfg) for ms, cfg, _ in timed]
    return [(0.5 * (timed[i][0] + gpu_time_ms(timed[i][2])), timed[i][1]) for i in leaders]


GRAPH_LAUNCHES = 64  # launches captured per timing graph (at most; fewer for slow configs)


def gpu_time_ms(fn, rep_ms: float = 15.0) -> float:
    """Median GPU milliseconds of ``fn`` (kernel launches on the current stream), host time
    excluded: the launches are captured into a CUDA graph and the graph replayed.

    Why not triton.testing.do_bench: it records its start event before each call, so
    a launch whose host side (descriptor building, a filter copy, Python) takes longer
    than the GPU work is timed at its host cost. On the H200's host (2026-11-30 17:50 UTC,
    benchmarks/sweep_gluon_conv.py --api) that made the Gluon convolutions look 3-5x
    slower than they run (res4_3x3 forward 95.6 us against 27.4 in a graph) and the tuner
    picked the slower kernels; the benchmarks time in graphs, so now the tuner does too.
    A launch that cannot be captured (a host sync) falls back to do_bench."""
    fn()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    n = max(1, min(GRAPH_LAUNCHES, int(rep_ms / max(start.elapsed_time(end), 1e-3))))
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
    except Exception:  # not capturable: time it eagerly
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=3, rep=int(rep_ms), return_mode="median")
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / n)
    return sorted(times)[len(times) // 2]


SAMPLE_ELEMENTS = 1 << 22


def _sample(t):
    """A copy of the tuner's output to cross-check configs on: all of it up to
    SAMPLE_ELEMENTS elements, beyond that an evenly strided subset (a 72 GiB column buffer
    must not be cloned)."""
    flat = t.reshape(-1)
    step = max(1, flat.numel() // SAMPLE_ELEMENTS)
    return flat[::step].clone()


def agrees(a, b, tol=None) -> bool:
    """Whether two results of one problem match up to rounding: the same non-finite
    positions and a relative L2 difference of the finite rest within ``tol`` (default:
    what summation order changes in the output's precision)."""
    if tol is None:
        tol = 5e-4 if a.element_size() <= 2 else 5e-5
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):
        return False
    a, b = a[fa].double(), b[fb].double()
    return bool((a - b).norm() <= tol * b.norm() + 1e-30)


def next_pow2(n: int) -> int:
    """triton.next_power_of_2 in plain Python (no JIT wrapper on the host path)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


_INT32_TABLES: dict = {}  # (device, values) -> the int32 tensor on that device


def int32_table(values, device):
    """A kernel's small int32 lookup table (a flat or nested list of ints) on ``device``,
    made once per values and device (a host-to-device copy each call would cost more than
    the kernels reading it)."""
    key = (str(device), tuple(values))
    t = _INT32_TABLES.get(key)
    if t is None:
        if len(_INT32_TABLES) > 256:
            _INT32_TABLES.clear()
        t = _INT32_TABLES[key] = torch.tensor(values, dtype=torch.int32, device=device).reshape(-1)
    return t


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) in plain Python (triton.cdiv goes through a JIT wrapper: ~2 us a call)."""
    return -(-a // b)


def reduction_slices(tiles: int, length: int, min_length: int, sms: int, cap: int | None = None) -> int:
    """How many slices to cut a reduction of ``length`` into (split-K): enough that ``tiles``
    output tiles a slice make two waves of ``sms`` programs, each slice at least
    ``min_length`` long and at most ``cap`` slices."""
    most = length // min_length if cap is None else min(length // min_length, cap)
    return max(1, min(cdiv(2 * sms, tiles), most))


_problem_keys = IdentityMemo()


def problem_key(problem) -> str:
    """problem.key(), computed once per problem object."""
    return _problem_keys.get((problem,), None, problem.key)


_compiled: dict = {}

try:  # the raw handle of PyTorch's current stream, without a Stream object (what Triton uses)
    from torch._C import _cuda_getCurrentRawStream as _raw_stream
except ImportError:  # a CPU-only torch build: no CUDA launches happen
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _spec_key(args):
    """What Triton specializes a launch on: ints by value, tensors by dtype and 16-byte
    alignment, everything else by type."""
    return tuple(a if type(a) is int else (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                 else type(a) for a in args)


_OPTIONS = frozenset(("num_warps", "num_stages", "num_ctas", "maxnreg"))


def jit_run(kernel, grid, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)`` (arguments positional, constexprs and launch
    options by keyword) through ``launch``'s cache of compiled kernels."""
    consts = {k: v for k, v in kwargs.items() if k not in _OPTIONS}
    options = {k: v for k, v in kwargs.items() if k in _OPTIONS}
    launch(kernel, grid, args, consts, options)


def _launch_key(kernel, args, consts, options, static):
    """(the launch's device, its key in _compiled; None off the GPU: the JIT runs it)."""
    first = args[0]
    device = (first if isinstance(first, torch.Tensor) else next(a for a in args if isinstance(a, torch.Tensor))).device
    if device.type != "cuda":
        return device, None
    # The compiled function handle belongs to the GPU it was loaded on, so the device
    # is part of the key: a process driving two GPUs must not reuse cuda:0's on cuda:1.
    if static is None:
        return device, (device.index, kernel, _spec_key(args), tuple(consts.items()), tuple(options.items()))
    key, n = static
    return device, (device.index, kernel, key, tuple(a.data_ptr() % 16 == 0 for a in args[:n]))


def launch(kernel, grid, args: tuple, consts: dict, options: dict, static=None):
    """``kernel[grid](*args, **consts, **options)``, minus Triton's per-call binding cost.

    The first launch of a specialization goes through the JIT (compiling if needed) and
    keeps the compiled kernel; later launches with the same ints, dtypes, alignments and
    constexprs call its launcher directly on PyTorch's current stream. Under the
    interpreter every launch goes through the JIT.

    ``static = (key, n)``: the caller vouches that ``key`` (hashable) determines every
    argument but the first ``n`` (tensors, whose dtypes are part of the key) and the
    float scalars, so only those tensors' 16-byte alignments are checked per call."""
    device, full = _launch_key(kernel, args, consts, options, static)
    recorder = launch_record.active()
    if recorder is not None:  # a dry run (launch_record): keep the launch, queue nothing
        recorder.add(_record_bound(kernel, grid, args, consts, options, device, full), args)
        return
    if full is None:
        kernel[grid](*args, **consts, **options)
        return
    entry = _compiled.get(full)
    if entry is None:
        compiled = kernel[grid](*args, **consts, **options)
        if len(args) + len(consts) == len(kernel.arg_names):  # else defaults fill gaps: keep the JIT path
            slots = [(i, consts[n]) for i, n in enumerate(kernel.arg_names) if n in consts]
            # the launcher takes the constexprs in their places; when they all come after
            # the runtime arguments (the usual signature) they are one tuple appended
            tail = tuple(v for _, v in slots) if [i for i, _ in slots] == list(
                range(len(args), len(args) + len(slots))) else None
            _compiled[full] = (compiled, slots, tail, TensorMapLauncher.of(compiled.run) if CACHE_TMA_MAPS else None)
        return
    compiled, slots, tail, maps = entry
    if tail is not None:
        values = (*args, *tail)
    else:
        values = list(args)
        for i, v in slots:
            values.insert(i, v)
    g = tuple(grid) + (1,) * (3 - len(grid))
    if maps is not None:
        maps.launch(g, _raw_stream(device.index), compiled, values)
        return
    compiled.run(g[0], g[1], g[2], _raw_stream(device.index), compiled.function,
                 compiled.packed_metadata, None, None, None, *values)


def bind(kernel, grid, args: tuple, consts: dict, options: dict, static=None):
    """The launch ``launch`` would make of these arguments, bound (a ``Bound``), or None when
    it has not compiled that specialization yet (launch first) or launches through the JIT."""
    device, full = _launch_key(kernel, args, consts, options, static)
    return _bound(_compiled.get(full) if full is not None else None, grid, args, device)


def _record_bound(kernel, grid, args, consts, options, device, full):
    """A dry run's launch, bound (None before its first compile, and under the interpreter)."""
    return _bound(_compiled.get(full) if full is not None else None, grid, args, device)


def _bound(entry, grid, args, device):
    """The Bound of a launch of a compiled entry of ``_compiled`` (None: no entry)."""
    if entry is None:
        return None
    compiled, slots, tail, maps = entry
    values = list(args)
    for i, v in slots:
        values.insert(i, v)
    return Bound.of(compiled, maps, grid, values, device.index)


def _raw_launch(launcher):
    """The C launch function under Triton's CudaLauncher (3.6) for a kernel with no scratch
    buffers and no descriptor arguments, whose ``__call__`` only allocates scratch and
    passes the arguments on; None for any other shape of launcher."""
    raw = getattr(launcher, "launch", None)
    if (raw is None or getattr(raw, "__name__", "") == "inner" or not hasattr(launcher, "launch_cooperative_grid")
            or getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1)):
        return None
    return raw


class Bound:
    """One launch with every argument resolved to what the compiled launcher takes: tensors
    as their addresses (ints), TMA descriptors as their encoded tensor maps. Calling it
    queues the launch on PyTorch's current stream: one C call, no binding. It holds no
    tensor, so keeping it keeps no memory alive; it is valid while those addresses hold
    the tensors it was bound for (the caller's key says when: launch records)."""
    __slots__ = ("fn", "grid", "index", "head", "values")

    @classmethod
    def of(cls, compiled, maps, grid, values, index):
        """values: the launch's arguments with the constexprs in place (None when a
        descriptor argument has no cached encoder)."""
        b = cls()
        b.grid, b.index = tuple(grid) + (1,) * (3 - len(grid)), index
        if maps is not None:
            values = maps.arguments(values)
            b.fn, b.head = maps.raw, (compiled.function, maps.coop, maps.pdl, None, None, compiled.packed_metadata,
                                      None, None, None)
        else:
            if any(hasattr(v, "block_shape") for v in values):  # a descriptor nothing here encodes
                return None
            run = compiled.run
            raw = _raw_launch(run)
            if raw is not None:  # past the launcher's Python wrapper (~1-2 us a launch)
                b.fn, b.head = raw, (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                                     compiled.packed_metadata, None, None, None)
            else:
                b.fn, b.head = run, (compiled.function, compiled.packed_metadata, None, None, None)
        b.values = tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v for v in values)
        return b

    def __call__(self):
        if launch_record.active() is not None:
            raise launch_record.Refused("a launch bound elsewhere (its addresses cannot be checked)")
        g = self.grid
        self.fn(g[0], g[1], g[2], _raw_stream(self.index), *self.head, *self.values)


# Kernels with TMA descriptor arguments: Triton's launcher (3.6) encodes every descriptor
# into a CUtensorMap (cuTensorMapEncodeTiled) and rebuilds the argument list in Python on
# every launch. The encoding depends only on the descriptor (base address, shape,
# strides, box) and the kernel's layout metadata (swizzle, element type), and conv_tma
# hands the same descriptor object back for the same address and view, so the encoded
# maps are kept per (kernel, argument position, descriptor) and passed straight to the
# compiled launcher. False: every launch goes through Triton's own path.
CACHE_TMA_MAPS = os.environ.get("TRIDNN_CACHE_TMA_MAPS", "1") != "0"


class TensorMapLauncher:
    """A compiled kernel's raw launcher plus its encoded tensor maps, reused across
    launches. ``of`` returns None when the launcher is not the shape this relies on
    (no descriptor arguments, scratch buffers to allocate, another Triton version):
    then the normal path runs."""
    __slots__ = ("raw", "positions", "metas", "maps", "coop", "pdl", "encode")
    LIMIT = 4096  # cached maps per kernel before the cache starts over

    def __init__(self, raw, positions, metas, coop, pdl):
        from triton.backends.nvidia.driver import make_tensordesc_arg
        self.raw, self.positions, self.metas, self.coop, self.pdl = raw, positions, metas, coop, pdl
        self.encode = make_tensordesc_arg
        self.maps: dict = {}

    @classmethod
    def of(cls, launcher):
        inner = getattr(launcher, "launch", None)
        names = getattr(getattr(inner, "__code__", None), "co_freevars", ())
        if getattr(inner, "__name__", "") != "inner" or not {"launcher", "tensordesc_indices",
                                                             "tensordesc_meta"} <= set(names):
            return None
        cells = dict(zip(names, (c.cell_contents for c in inner.__closure__)))
        metas = cells["tensordesc_meta"]
        if (getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1)
                or getattr(launcher, "num_ctas", 1) != 1 or not metas or any(m is None for m in metas)):
            return None
        return cls(cells["launcher"], sorted(cells["tensordesc_indices"]), list(metas),
                   launcher.launch_cooperative_grid, launcher.launch_pdl)

    def expand(self, pos: int, k: int, desc) -> tuple:
        """(CUtensorMap, *shape, *strides) of descriptor argument number ``k``."""
        if isinstance(desc.base, torch.Tensor):  # would pin the tensor's memory in the cache
            return tuple(self.encode(desc, self.metas[k]))
        key = (pos, id(desc))
        hit = self.maps.get(key)
        if hit is not None and hit[0] is desc:
            return hit[1]
        if len(self.maps) >= self.LIMIT:
            self.maps.clear()
        out = tuple(self.encode(desc, self.metas[k]))
        self.maps[key] = (desc, out)  # the entry holds desc, so its id is not reused meanwhile
        return out

    def arguments(self, values) -> list:
        """The kernel arguments as the raw launcher takes them: each descriptor replaced by
        its expansion, everything else as given."""
        out, start = [], 0
        for k, pos in enumerate(self.positions):
            out.extend(values[start:pos])
            out.extend(self.expand(pos, k, values[pos]))
            start = pos + 1
        out.extend(values[start:])
        return out

    def launch(self, grid, stream, compiled, values):
        self.raw(grid[0], grid[1], grid[2], stream, compiled.function, self.coop, self.pdl, None, None,
                 compiled.packed_metadata, None, None, None, *self.arguments(values))
