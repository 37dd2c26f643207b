"""How fast does one SM issue wgmma from shared memory, with no loads at all?

Session 24's diag (diag_wgrad_l2.py) found the Gluon backward filter's k-step (128 x 128
tile, 128 pixels, 2.1 M MACs) at ~0.9 us on a program alone: ~62% of the H100's dense bf16
rate, with the L2 out of the picture. Its consumer issues async wgmma with BOTH operands
MN-major (dy^T and x boxes as TMA writes them: ``HGMMA ... tnspA.tnspB``) and keeps one
k-step in flight. The forward kernel's operands are K-major. So: is the tensor-core issue
rate itself lower for this operand form or tile shape, or is the loss in the pipeline
around it (TMA, barriers, the loader)?

This kernel has no pipeline: each program (one per SM) loads one A and one B tile into
shared memory once, then runs ITERS k-steps of acc += A @ B with the real kernel's issue
pattern (async wgmma over BK, wait until one group is outstanding). Rows: tile shape,
warps, each operand's major order, BK. A row's us/k-step is comparable with the real
kernel's after scaling to its MACs (printed: us for 2.1 M MACs, i.e. a 128 x 128 x 128
step). The result sums are checked against torch on the same tiles (ITERS * A @ B).

    PYTHONPATH=src python benchmarks/diag_wgmma_rate.py [--out DIR]   # a Hopper GPU, ~30 s
    PYTHONPATH=src python benchmarks/diag_wgmma_rate.py --dry-run     # CPU: sm_90 compiles only
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gluon_sweep_common as gsc  # noqa: E402  (benchmarks/, the script's own folder)
from tridnn.cuda.gluon_common import ring_barriers  # noqa: E402

PEAK_BF16_DENSE = 989e12  # H100 / H200 SXM dense bf16, FLOP/s (both have the same tensor cores)


@gluon.jit
def _load_tile(ptr, R: gl.constexpr, C: gl.constexpr, num_warps: gl.constexpr):
    """A row-major [R, C] bfloat16 tile from global memory into registers."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    r = gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, C, layout=gl.SliceLayout(0, layout))
    return gl.load(ptr + r[:, None] * C + c[None, :])


@gluon.jit
def wgmma_loop_kernel(
    # a: [BM, BK] (K-major) or [BK, BM] (MN-major), row-major in memory; b: [BN, BK] or [BK, BN]
    a_ptr, b_ptr,
    # out[program]: the sum of the program's accumulator (keeps the MMAs alive)
    out_ptr,
    ITERS,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
    A_MN: gl.constexpr, B_MN: gl.constexpr, num_warps: gl.constexpr,
):
    # Stage 1: both operands into shared memory once, in the asked major order.
    if A_MN:
        a_smem = gl.allocate_shared_memory(gl.bfloat16, [BK, BM], gl.NVMMASharedLayout.get_default_for(
            [BK, BM], gl.bfloat16), _load_tile(a_ptr, BK, BM, num_warps))
        a = a_smem.permute((1, 0))
    else:
        a = gl.allocate_shared_memory(gl.bfloat16, [BM, BK], gl.NVMMASharedLayout.get_default_for(
            [BM, BK], gl.bfloat16), _load_tile(a_ptr, BM, BK, num_warps))
    if B_MN:
        b = gl.allocate_shared_memory(gl.bfloat16, [BK, BN], gl.NVMMASharedLayout.get_default_for(
            [BK, BN], gl.bfloat16), _load_tile(b_ptr, BK, BN, num_warps))
    else:
        b_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, BK], gl.NVMMASharedLayout.get_default_for(
            [BN, BK], gl.bfloat16), _load_tile(b_ptr, BN, BK, num_warps))
        b = b_smem.permute((1, 0))
    fence_async_shared()

    # Stage 2: the backward filter consumer's issue pattern, one k-step in flight.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for _ in range(ITERS):
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc, a, b = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    # Stage 3: one float a program.
    gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, axis=1), axis=0))


# -- the same k-steps fed by a TMA ring (the backward filter's pipeline, no geometry) -------
@gluon.jit
def _ring_loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, STEPS, NBOX,
                 BK: gl.constexpr, STAGES: gl.constexpr, FOUR_D: gl.constexpr):
    """One warp: k-step i TMA-loads box (program * STEPS + i) mod NBOX of both [P, channels]
    tensors (BK pixel rows each) into ring slot i mod STAGES. FOUR_D: the tensors are
    [P / 64, 8, 8, channels] images and a box is [BK / 8, 1, 8, channels] (the backward
    filter's dy box: BK / 8 images, one row of 8 pixels each)."""
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for i in range(STEPS):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        box = (gl.program_id(0) * STEPS + i) % NBOX
        mbarrier.expect(ready.index(s), nbytes)
        if FOUR_D:
            n = (box // 8) * (BK // 8)
            h = box % 8
            tma.async_copy_global_to_shared(a_desc, [n, h, 0, 0], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [n, h, 0, 0], ready.index(s), b_bufs.index(s))
        else:
            tma.async_copy_global_to_shared(a_desc, [box * BK, 0], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [box * BK, 0], ready.index(s), b_bufs.index(s))


@gluon.jit
def _ring_consumer(out_ptr, a_bufs, b_bufs, ready, empty, STEPS,
                   BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                   WARPS: gl.constexpr):
    """The backward filter consumer's loop: wait for the slot, async wgmma of the MN-major
    boxes (A = a box^T), one k-step in flight, free the slot of the MMA that retired."""
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for i in range(STEPS):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        a = a_bufs.index(s).reshape([BK, BM]).permute((1, 0))
        b = b_bufs.index(s).reshape([BK, BN])
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc, a, b = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, axis=1), axis=0))


@gluon.jit
def ring_kernel(
    # TMA descriptors: a [P, BM] box [BK, BM], b [P, BN] box [BK, BN] (pixels x channels);
    # FOUR_D: [P / 64, 8, 8, BM] box [BK / 8, 1, 8, BM] and the same for b
    a_desc, b_desc,
    out_ptr, STEPS, NBOX,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, FOUR_D: gl.constexpr,
    num_warps: gl.constexpr,
):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready, empty = ring_barriers(STAGES)
    fence_async_shared()
    gl.warp_specialize([
        (_ring_consumer, (out_ptr, a_bufs, b_bufs, ready, empty, STEPS, BM, BN, BK, STAGES, num_warps)),
        (_ring_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, STEPS, NBOX, BK, STAGES, FOUR_D)),
    ], [1], [40])


# (BM, BN, BK, STAGES, warps): the backward filter's 128 x 128 tile at its 128-pixel box and
# ring of 3, then finer boxes in deeper rings (the same bytes in flight)
RING_CASES = [(128, 128, 128, 3, 8), (128, 128, 64, 6, 8), (128, 128, 64, 4, 8), (128, 128, 32, 8, 8),
              (128, 256, 64, 4, 8), (128, 256, 32, 8, 8)]
RING_PROGRAMS = (None, 12)  # every SM, and 12 programs (little L2 sharing)
RING_FOOTPRINT_MB = (8, 1024)  # L2-resident boxes, and boxes streamed from memory


# (BM, BN, warps): the backward filter's tiles (8 warps = 2 warpgroups of 64 rows) and the
# one-warpgroup shapes
SHAPES = [(128, 128, 8), (128, 256, 8), (128, 128, 4), (64, 256, 4)]
ORDERS = [(False, False), (True, True), (True, False), (False, True)]  # (A MN-major, B MN-major)
BKS = (128, 64)


def name(bm, bn, warps, a_mn, b_mn, bk) -> str:
    return f"{bm}x{bn} w{warps} A:{'MN' if a_mn else 'K'} B:{'MN' if b_mn else 'K'} bk{bk}"


def _sass_facts(kernel) -> str:
    """Registers, spills and the HGMMA shapes / operand modes of a compiled kernel's SASS."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from gluon_helpers import registers, sass  # Triton's cuobjdump
    code = sass(kernel)
    hgmma = re.findall(r"HGMMA\.(64x\d+x16)\.F32\.BF16 \S+, gdesc\[\w+\](\S*),", code)
    spills = len(re.findall(r"\b(STL|LDL)\b", code))
    return (f"regs {registers(kernel):4d} spills {spills:3d} HGMMA {len(hgmma)} {sorted(set(hgmma))} "
            f"UTMALDG {len(re.findall('UTMALDG', code))}")


def compile_all():
    """CPU: every variant compiled for sm_90 (registers, spills and MMA modes printed)."""
    from tridnn.cuda.gluon_common import compile_sm90, desc_sig, max_regs
    for bm, bn, warps in SHAPES:
        for a_mn, b_mn in ORDERS:
            for bk in BKS:
                consts = dict(BM=bm, BN=bn, BK=bk, A_MN=a_mn, B_MN=b_mn, num_warps=warps)
                k = compile_sm90(wgmma_loop_kernel, {"a_ptr": "*bf16", "b_ptr": "*bf16", "out_ptr": "*fp32"},
                                 consts, warps, pointers=("a_ptr", "b_ptr", "out_ptr"))
                print(f"{name(bm, bn, warps, a_mn, b_mn, bk):34s} {_sass_facts(k)}", flush=True)
    for (bm, bn, bk, stages, warps), four_d in [(c, False) for c in RING_CASES] + [(RING_CASES[0], True)]:
        a_box, b_box = ([bk // 8, 1, 8, bm], [bk // 8, 1, 8, bn]) if four_d else ([bk, bm], [bk, bn])
        types = {"a_desc": desc_sig("bf16", a_box), "b_desc": desc_sig("bf16", b_box), "out_ptr": "*fp32"}
        consts = dict(BM=bm, BN=bn, BK=bk, STAGES=stages, FOUR_D=four_d, num_warps=warps)
        k = compile_sm90(ring_kernel, types, consts, warps, maxnreg=max_regs(warps), pointers=("out_ptr",))
        print(f"ring {bm}x{bn} bk{bk} s{stages} w{warps}{' 4d' if four_d else ''}: shared {k.metadata.shared} "
              f"{_sass_facts(k)}", flush=True)


def rates(ms, macs, steps, programs) -> dict:
    """A timing's row fields: us, us a k-step (of ``macs``), us scaled to a 2.1 M-MAC
    (128 x 128 x 128) k-step, TFLOP/s of all programs, and the fraction of the peak."""
    us_step = ms * 1e3 / steps
    tflops = 2 * macs * steps * programs / (ms * 1e-3) / 1e12
    return dict(us=ms * 1e3, us_per_step=us_step, us_per_2m=us_step * (128 * 128 * 128) / macs, tflops=tflops,
                of_peak=tflops * 1e12 / PEAK_BF16_DENSE)


def report(label, width, row, extra=""):
    """Print a row: label, us, us a k-step, us a 2.1 M-MAC k-step, TFLOP/s, of peak (and
    ``extra``), flagged when its sum missed torch's."""
    print(f"{label:{width}s} {row['us']:9.1f} {row['us_per_step']:10.3f} {row['us_per_2m']:12.3f} "
          f"{row['tflops']:8.0f} {row['of_peak']:8.2f}{extra}"
          + ("" if row["rel_err"] < 1e-2 else f"  WRONG (rel err {row['rel_err']:.2e})"), flush=True)


def run_ring(steps, rows, row_elems=None, quick=False, four_d=False):
    """The RING_CASES on every SM and on 12, L2-resident and streamed. row_elems: each pixel
    row of the tensors holds that many channels, of which the boxes read the first BM (BN),
    as a box of 128 channels reads an NHWC tensor of many (None: packed [P, BM] tensors,
    so a box is one contiguous block). quick: the backward filter's two tiles, L2-resident.
    four_d: the tensors as 8 x 8 images, boxes of BK / 8 images x 1 row x 8 pixels."""
    from tridnn.cuda.common import gpu_time_ms
    from tridnn.cuda.gluon_common import descriptor, max_regs
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'ring variant':44s} {'us':>9s} {'us/k-step':>10s} {'us/2.1M MAC':>12s} {'TFLOP/s':>8s} "
          f"{'of peak':>8s} {'GB/s/SM':>8s}", flush=True)
    cases = [c for c in RING_CASES if c in ((128, 128, 128, 3, 8), (128, 256, 64, 4, 8))] if quick else RING_CASES
    for bm, bn, bk, stages, warps in cases:
        for mb in RING_FOOTPRINT_MB[:1] if quick else RING_FOOTPRINT_MB:
            whole = 8 * bk if four_d else bk  # pixels in whole boxes (4-D: whole images too)
            p = mb * 2**20 // (2 * (bm + bn)) // whole * whole
            a_t = (torch.rand(p, row_elems or bm, device="cuda") - 0.5).to(torch.bfloat16)[:, :bm]
            b_t = (torch.rand(p, row_elems or bn, device="cuda") - 0.5).to(torch.bfloat16)[:, :bn]
            nbox = p // bk
            if four_d:  # [images, 8, 8, channels] views of the same memory
                a4 = a_t.unflatten(0, (p // 64, 8, 8))
                b4 = b_t.unflatten(0, (p // 64, 8, 8))
                a_desc = descriptor(a4, a4.shape, a4.stride(), [bk // 8, 1, 8, bm])
                b_desc = descriptor(b4, b4.shape, b4.stride(), [bk // 8, 1, 8, bn])
            else:
                a_desc = descriptor(a_t, a_t.shape, a_t.stride(), [bk, bm])
                b_desc = descriptor(b_t, b_t.shape, b_t.stride(), [bk, bn])
            for programs in RING_PROGRAMS:
                grid = sms if programs is None else programs
                out = torch.empty(grid, device="cuda", dtype=torch.float32)

                def run(n=steps):
                    ring_kernel[(grid,)](a_desc, b_desc, out, n, nbox, BM=bm, BN=bn, BK=bk, STAGES=stages,
                                         FOUR_D=four_d, num_warps=warps, maxnreg=max_regs(warps))

                run(2)
                torch.cuda.synchronize()
                # program 0's two boxes: pixel rows 0..2*BK, or (4-D) rows 0 and 1 of images 0..BK/8
                rows_ = (torch.arange(2 * bk) if not four_d else
                         (torch.arange(bk // 8)[:, None, None] * 64 + torch.arange(2)[None, :, None] * 8
                          + torch.arange(8)[None, None, :]).flatten()).to(a_t.device)
                want = (a_t[rows_].double().T @ b_t[rows_].double()).sum().item()
                err = abs(out[0].item() - want) / max(1.0, abs(want))
                row = rates(gpu_time_ms(run, rep_ms=20.0), bm * bn * bk, steps, grid)
                gbs = 2 * bk * (bm + bn) / (row["us_per_step"] * 1e-6) / 1e9
                label = (f"{bm}x{bn} bk{bk} s{stages} w{warps} {mb}MB {grid}prog"
                         + (f" row{row_elems}" if row_elems else "") + (" 4d" if four_d else ""))
                row.update(variant="ring " + label, bm=bm, bn=bn, bk=bk, stages=stages, warps=warps,
                           row_elems=row_elems, four_d=four_d, footprint_mb=mb, programs=grid, gb_s_per_sm=gbs,
                           rel_err=err)
                rows.append(row)
                report(label, 44, row, f" {gbs:8.1f}")


def run_bare(iters, rows):
    """Every SHAPES x ORDERS x BKS variant of the bare loop on every SM."""
    from tridnn.cuda.common import gpu_time_ms
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    g = torch.Generator().manual_seed(0)
    print(f"{'variant':34s} {'us':>9s} {'us/k-step':>10s} {'us/2.1M MAC':>12s} {'TFLOP/s':>8s} {'of peak':>8s}",
          flush=True)
    for bm, bn, warps in SHAPES:
        for a_mn, b_mn in ORDERS:
            for bk in BKS:
                a_host = (torch.rand((bk, bm) if a_mn else (bm, bk), generator=g) - 0.5).to(torch.bfloat16)
                b_host = (torch.rand((bk, bn) if b_mn else (bn, bk), generator=g) - 0.5).to(torch.bfloat16)
                at, bt = a_host.cuda(), b_host.cuda()
                out = torch.empty(sms, device="cuda", dtype=torch.float32)
                consts = dict(BM=bm, BN=bn, BK=bk, A_MN=a_mn, B_MN=b_mn, num_warps=warps)

                def run(iters=iters):
                    wgmma_loop_kernel[(sms,)](at, bt, out, iters, **consts)

                run(3)
                torch.cuda.synchronize()
                am = a_host.double().T if a_mn else a_host.double()
                bmat = b_host.double() if b_mn else b_host.double().T
                want = 3 * (am @ bmat).sum().item()
                err = abs(out[0].item() - want) / max(1.0, abs(want))
                row = rates(gpu_time_ms(run, rep_ms=20.0), bm * bn * bk, iters, sms)
                row.update(variant=name(bm, bn, warps, a_mn, b_mn, bk), bm=bm, bn=bn, warps=warps, a_mn=a_mn,
                           b_mn=b_mn, bk=bk, rel_err=err)
                rows.append(row)
                report(row["variant"], 34, row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for diag_wgmma_rate.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: compile every variant for sm_90 only")
    ap.add_argument("--iters", type=int, default=4000, help="k-steps a program")
    ap.add_argument("--ring", action="store_true", help="also the k-steps fed by a TMA ring (RING_CASES)")
    ap.add_argument("--only-ring", action="store_true", help="the TMA ring rows only")
    ap.add_argument("--ring-row", type=int,
                    help="channels a pixel row of the ring's tensors (the boxes read the first ones)")
    ap.add_argument("--ring-quick", action="store_true", help="the ring's backward-filter tiles only, L2-resident")
    ap.add_argument("--ring-4d", action="store_true", help="the ring's boxes as the backward filter's 4-D dy box")
    a = ap.parse_args()
    if a.dry_run:
        gsc.offline_driver()
        compile_all()
        return
    rows = []
    if not a.only_ring:
        run_bare(a.iters, rows)
    if a.ring or a.only_ring:
        run_ring(a.iters // 4, rows, a.ring_row, a.ring_quick, a.ring_4d)
    gsc.write_json(a.out, "diag_wgmma_rate.json", dict(device=torch.cuda.get_device_name(0), iters=a.iters, rows=rows))


if __name__ == "__main__":
    main()
