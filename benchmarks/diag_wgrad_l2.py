"""Is the Gluon backward-filter kernel bound by L2 bandwidth or by each SM's own work?

Session 24's question: res5's backward filter runs at ~60% of the bf16 MMA rate (session 12),
and session 12's sweep found no schedule or tile that helps. One 128-pixel k-step of a
128 x 128 tile reads 64 KB of dy and x boxes (56 KB on 7-wide images: TMA fills the 8th
column without reading) for 2.1 M MACs. At ~1.3 us a k-step (res5: ~31 k-steps a program
in ~40 us), 132 SMs pull ~5.7 TB/s out of L2, about what Hopper's L2 delivers. If that
is the limit, the same program does each k-step faster when fewer programs share the L2,
and a 128 x 256 tile (48 KB a k-step for the same MACs) does more MACs a second. If the
limit is inside each SM (MMA issue, the ring), the time a k-step stays flat.

So: synthetic 1x1 problems on 7x7 images (batch 64), sized so that the tiles divide the
program counts exactly, every tile whole (no split, no finish kernel), each config with
``sms`` = 132, 66, 44, 33, 22 and 12 programs (each program then runs 1, 2, 3, 4, 6 and 11
tiles). Printed per row: us, k-steps a program, us a k-step, MMA TFLOP/s counted on the
padded boxes (what the tensor cores execute) and the L2 read rate of all programs
together (bytes the boxes read from memory, at the measured k-step rate).

    PYTHONPATH=src python benchmarks/diag_wgrad_l2.py [--out DIR]   # a Hopper GPU, ~1 min
    PYTHONPATH=src python benchmarks/diag_wgrad_l2.py --dry-run     # CPU: sm_90 compiles only

Each config's first launch is checked against torch's float64 weight gradient.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gluon_sweep_common as gsc  # noqa: E402  (benchmarks/, the script's own folder)

N, OH, OW = 64, 7, 7  # res5's images
# (config, C, K): 1x1 problems whose tile count is 132 (= 12 x 11 output x input channel blocks)
CASES = [
    (dict(NB=16, BH=1, BW=8, BLOCK_M=128, BLOCK_N=128, STAGES=3, num_warps=8), 1408, 1536),
    (dict(NB=8, BH=1, BW=8, BLOCK_M=128, BLOCK_N=256, STAGES=4, num_warps=8), 2816, 1536),
    # (session 28) the same tile with a ring of 3: room for its whole bfloat16 tile in shared
    # memory (TMA_DW), which the ring of 4 leaves none for
    (dict(NB=8, BH=1, BW=8, BLOCK_M=128, BLOCK_N=256, STAGES=3, num_warps=8), 2816, 1536),
]
# --variants (session 25): the 128 x 128 tile with a 64-pixel box in a ring of 6 (as many
# bytes in flight, in finer steps), and with one consumer warpgroup (no barrier between two)
VARIANTS = [
    (dict(NB=8, BH=1, BW=8, BLOCK_M=128, BLOCK_N=128, STAGES=6, num_warps=8), 1408, 1536),
    (dict(NB=16, BH=1, BW=8, BLOCK_M=128, BLOCK_N=128, STAGES=3, num_warps=4), 1408, 1536),
]
PROGRAMS = (132, 66, 44, 33, 22, 12)


def box_bytes(cfg, ow=OW) -> int:
    """Bytes one k-step reads from memory: the dy and x boxes' real pixels (7 of 8 columns
    on res5's images)."""
    real = cfg["NB"] * cfg["BH"] * min(cfg["BW"], ow)
    return 2 * real * (cfg["BLOCK_M"] + cfg["BLOCK_N"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for diag_wgrad_l2.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build the plans and compile for sm_90 only")
    ap.add_argument("--rep", type=int, default=20, help="milliseconds of graph replays per timing")
    ap.add_argument("--variants", action="store_true", help="also the VARIANTS configs")
    ap.add_argument("--batch", default=str(N),
                    help="comma-separated image counts (more: more k-steps a tile, so a tile's epilogue and unit "
                         "setup weigh less; several: the pair in one run, on one GPU)")
    ap.add_argument("--hw", type=int, default=OH, help="image height and width (8: boxes without the padded column)")
    ap.add_argument("--programs", default=",".join(map(str, PROGRAMS)), help="comma-separated program counts")
    ap.add_argument("--scalar-dw", action="store_true",
                    help="also time each plan's whole tiles storing dw from registers: in pairs (TMA_DW off) and "
                         "one element at a time (DW_VEC off too, as before session 27)")
    ap.add_argument("--no-store", action="store_true",
                    help="also time each plan with K = 0 passed to the kernel: every epilogue store is masked off "
                         "but the MMAs and the epilogue's address work still run (is a tile's fixed cost the "
                         "stores or the rest?)")
    a = ap.parse_args()
    oh = ow = a.hw
    programs_list = [int(v) for v in a.programs.split(",")]
    if a.dry_run:
        gsc.offline_driver()
    from tridnn.cuda import gluon_common, gluon_wgrad as gw

    dev = "cpu" if a.dry_run else "cuda"
    rows = []
    print(f"{'config':28s} {'C':>5s} {'K':>5s} {'progs':>5s} {'batch':>5s} {'us':>8s} {'steps':>5s} {'us/step':>8s} "
          f"{'TFLOP/s':>8s} {'L2 TB/s':>8s}", flush=True)
    batches = [int(v) for v in a.batch.split(",")]
    for batch, (base, c, k) in [(nb, case) for nb in batches for case in CASES + (VARIANTS if a.variants else [])]:
        cfg = gw.config(base["NB"], base["BH"], base["BW"], base["BLOCK_M"], base["BLOCK_N"], base["STAGES"],
                        base["num_warps"])
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch, c, oh, ow, generator=g).to(torch.bfloat16).to(dev).contiguous(
            memory_format=torch.channels_last)
        dy = torch.randn(batch, k, oh, ow, generator=g).to(torch.bfloat16).to(dev).contiguous(
            memory_format=torch.channels_last)
        tiles = gw.num_tiles(cfg, k, c, 1)
        boxes = gw.num_boxes(cfg, batch, oh, ow)
        assert tiles == PROGRAMS[0], (gw.name(cfg), tiles)
        want = None
        if not a.dry_run:
            want = torch.einsum("nkhw,nchw->kc", dy.double(), x.double())[:, :, None, None]
        for programs in programs_list:
            plan = gw.prepare(x, dy, (1, 1), (0, 0), (1, 1), cfg, sms=programs, direct=tiles)
            assert plan.finish_grid is None and plan.grid[0] == programs
            steps = tiles // programs * boxes
            row = dict(config=gw.name(cfg), C=c, K=k, batch=batch, hw=oh, programs=programs, steps=steps)
            head = f"{row['config']:28s} {c:5d} {k:5d} {programs:5d} {batch:5d}"
            if a.dry_run:
                gw.gluon_wgrad_kernel.warmup(*plan.args, grid=plan.grid, **plan.meta)
                rows.append(row)
                print(f"{head} compiled", flush=True)
                break  # one compile per config
            gw.launch(plan)
            torch.cuda.synchronize()
            err = ((plan.dw.double() - want).abs().max() / want.abs().max()).item()
            us = gsc.bench(lambda: gw.launch(plan), a.rep)
            per_step = us / steps
            macs = tiles * boxes * cfg["NB"] * cfg["BH"] * cfg["BW"] * cfg["BLOCK_M"] * cfg["BLOCK_N"]
            row.update(us=us, us_per_step=per_step, err=err, tflops=2 * macs / us * 1e-6,
                       l2_tb_s=programs * box_bytes(cfg, ow) / per_step * 1e-6,
                       dw_vec=plan.meta["DW_VEC"], tma_dw=plan.meta["TMA_DW"])
            rows.append(row)
            print(f"{head} {us:8.1f} {steps:5d} {per_step:8.3f} {row['tflops']:8.0f} {row['l2_tb_s']:8.2f}"
                  + ("  BAD" if err > 2e-2 else "")
                  + ("  (TMA store)" if plan.meta["TMA_DW"] else "  (register pairs)" if plan.meta["DW_VEC"] else ""),
                  flush=True)
            # the same plan with part of its epilogue changed: (label, JSON key, launch args, constexprs)
            variants = []
            if a.scalar_dw:
                variants += [("register pairs", "us_pairs_dw", plan.args, dict(plan.meta, TMA_DW=False)),
                             ("scalar dw stores", "us_scalar_dw", plan.args,
                              dict(plan.meta, TMA_DW=False, DW_VEC=False))]
            if a.no_store:  # K = 0: every store masked off
                muted = list(plan.args)
                muted[gw.gluon_wgrad_kernel.arg_names.index("K")] = 0
                variants.append(("no stores", "us_no_store", tuple(muted), plan.meta))
            for label, key, args, meta in variants:
                row[key] = gsc.bench(lambda: gluon_common.launch(gw.gluon_wgrad_kernel, plan.grid, args, meta,
                                                                 plan.spec), a.rep)
                print(f"{head} {row[key]:8.1f} {steps:5d} {row[key] / steps:8.3f}    ({label})", flush=True)
    if a.out:
        meta = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), torch=torch.__version__,
                    gpu=None if a.dry_run else torch.cuda.get_device_name())
        gsc.write_json(a.out, "diag_wgrad_l2.json", dict(meta=meta, rows=rows))


if __name__ == "__main__":
    main()
