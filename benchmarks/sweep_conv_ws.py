"""conv_tma's warp-specialized configs (WARP_SPEC: a producer warpgroup issues the TMA
loads, two consumer warpgroups run the MMAs) against their non-specialized twins, the
tuner's choice and cuDNN, on ResNet-50's stride-1 3x3 layers and two 1x1 layers,
bfloat16 channels-last, batch 64, forward and backward data.

    PYTHONPATH=src python3 benchmarks/sweep_conv_ws.py [--out DIR] [--budget-s 140]
    PYTHONPATH=src python3 benchmarks/sweep_conv_ws.py --dry-run   # CPU interpreter, tiny shapes

Per (layer, direction), every config is launched through conv_tma.launch_conv (alpha 1,
beta 0), its output checked against torch's convolution (cuDNN, cudnn.benchmark on) and
then timed (CUDA-graph replay median, bench_gpu_conv.bench):
  ws       each WARP_SPEC config conv_tma.candidates offers (after every other config:
           1x1 stride-1 layers only)
  probe    conv_tma.WS_SPATIAL_PROBE on the 3x3 layers (spatial boxes, never offered: Triton
           3.6 frees their input tile before the MMA reads it, a race), as they are and in
           the persistent kernel; output checked 5 times
  twin4    the same config without WARP_SPEC (same tile, 4 warps, 1 warpgroup of MMAs)
  twin8    the same tile at 8 warps (2 MMA warpgroups, like the 2 consumers), <= 3 stages
           (one tile per program configs only)
  tuner    the config Tuner.pick chooses from the list without WARP_SPEC configs (before
           this change), and 'tuner+ws' from the full list (what the library now picks)
Kernels are compiled first, all at once on a thread pool (sweep_conv_persistent.precompile).
The last table: layer, direction, role, config, us, TFLOP/s, time / cuDNN, relative L2 error.
"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu_conv as base  # noqa: E402
import sweep_conv_persistent as sp  # noqa: E402

from tridnn import shapes  # noqa: E402
from tridnn.cuda import common, conv_tma  # noqa: E402

LAYERS = ["res2_3x3", "res3_3x3", "res4_3x3", "res5_3x3", "res3_1x1c", "res4_1x1r"]
DRY_LAYERS = [shapes.conv("t_3x3", 16, 16, (6, 7), 3, 1, 1), shapes.conv("t_1x1", 16, 32, (5, 5), 1)]


def twins(cfg):
    """The non-specialized twins of a WARP_SPEC config: the same launch without the flag,
    and (one tile per program only, to keep the run short) the same tile with 8 warps (at
    most 3 stages: 8 warps x 4 stages on 128-pixel boxes miscompiled under Triton 3.6,
    conv_tma's config notes)."""
    plain = {k: v for k, v in cfg.items() if k not in ("WARP_SPEC", "WS_UNSAFE")}
    if plain.get("PERSISTENT"):
        return [("twin4", plain)]
    return [("twin4", plain), ("twin8", dict(plain, num_warps=8, num_stages=min(3, plain["num_stages"])))]


def cfg_name(c):
    """sweep_conv_persistent's short config name, WARP_SPEC as WS (WS_UNSAFE: the role says it)."""
    return sp.cfg_name({k: v for k, v in c.items() if k != "WS_UNSAFE"}).replace("WARP_SPEC", "WS")


def probe_configs(case, dry):
    """conv_tma.WS_SPATIAL_PROBE (and its persistent twins) for a spatial plan, marked
    WS_UNSAFE: Triton 3.6 frees their input tile before the MMA reads it, so the library
    never offers them; timed here to measure what warp specialization would give the
    3x3 layers. Boxes of two images only for outputs of <= 64 pixels."""
    plan = case.plan[0] if isinstance(case.plan, tuple) else case.plan
    if plan.n == 1 and plan.oh == 1:
        return []
    if dry:
        return [dict(conv_tma.INTERPRETER_TILE, WARP_SPEC=2, WS_UNSAFE=True),
                dict(conv_tma.INTERPRETER_TILE, WARP_SPEC=2, WS_UNSAFE=True, PERSISTENT=1, EPI_SPLIT=1)]
    if not conv_tma.persistent_ok(plan, case.problem):
        return []
    out_cap = max(64, 1 << (plan.c_out - 1).bit_length())
    small = plan.oh * plan.ow <= conv_tma.SMALL_OUTPUT and plan.n > 1
    base = [c for c in conv_tma.WS_SPATIAL_PROBE if c["BLOCK_N"] <= out_cap and (small or c.get("NB", 1) == 1)]
    base = [dict(c, WS_UNSAFE=True) for c in base]
    return base + [dict(c, PERSISTENT=1, EPI_SPLIT=1) for c in base]


def case_configs(case, dry):
    """(role, config) pairs to time for one case, deduplicated by config; sets case.configs
    (what precompile builds) and case.existing / case.full (the tuner's two lists).
    Roles: ws (offered), probe (spatial, WS_UNSAFE, never offered), twin4 / twin8."""
    cands = conv_tma.candidates(case.plan, case.dev, case.problem)
    plan = case.plan[0] if isinstance(case.plan, tuple) else case.plan
    if dry and plan.n == 1 and plan.oh == 1:  # the interpreter gets one config: add the offered WS ones by hand
        cands = cands + [dict(cands[0], WARP_SPEC=1), dict(cands[0], WARP_SPEC=2),
                         dict(cands[0], WARP_SPEC=1, PERSISTENT=1, EPI_SPLIT=1)]
    case.existing = [c for c in cands if not c.get("WARP_SPEC")]
    case.full = cands
    roles, seen = [], []
    pairs = [("ws", c) for c in cands if c.get("WARP_SPEC")] + [("probe", c) for c in probe_configs(case, dry)]
    for role, c in pairs:
        for r, cfg in [(role, c)] + twins(c):
            if cfg not in seen:
                seen.append(cfg)
                roles.append((r, cfg))
    case.roles = roles
    case.configs = [cfg for _, cfg in roles] + [c for c in case.existing if c not in seen]
    return case


def tuner_choice(case, cands):
    """What a fresh Tuner picks from ``cands`` for this case (its own timing and its
    cross-check against the first config)."""
    if len(cands) == 1 or case.dev.type != "cuda":
        return cands[0]
    key = ("sweep_conv_ws", case.p["name"], case.direction, len(cands))
    launch = lambda c, out: conv_tma.launch_conv(case.plan, case.problem, case.inp, case.w, out, 1.0, 0.0, c,
                                                 kmajor=case.kmajor)
    return common.Tuner().pick(key, cands, launch, case.out, case.dev)


def measure(case, cfg, tol, rep, checks=1):
    """Check ``cfg``'s output against torch (``checks`` times, the largest error counts:
    a race may show only now and then), then time it."""
    fn = case.call(cfg)
    entry = {}
    try:
        errs = []
        for _ in range(checks):
            case.out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            errs.append(base.rel_err(case.out, case.ref))
        entry["rel_err"] = max(errs, key=lambda e: float("inf") if e != e else e)
        entry["ok"] = entry["rel_err"] <= tol  # NaN (an unwritten element) fails too
        if entry["ok"]:
            entry["us"] = base.bench(fn, rep) * 1e6
            entry["tflops"] = case.problem.flops / entry["us"] / 1e6
    except Exception as exc:  # report, keep going
        entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return entry


def run_case(case, tol, deadline, rep):
    row = dict(layer=case.p["name"], direction=case.direction, plan=conv_tma.plan_kind(case.plan),
               cudnn_us=base.bench(case.ref_fn, rep) * 1e6, entries=[])
    row["cudnn_tflops"] = case.problem.flops / row["cudnn_us"] / 1e6
    timed = {}
    jobs = list(case.roles)
    for role, cands in (("tuner", case.existing), ("tuner+ws", case.full)):
        if time.time() > deadline:
            break
        try:
            jobs.append((role, tuner_choice(case, cands)))
        except Exception as exc:  # report, keep going
            row["entries"].append(dict(role=role, config="", error=f"{type(exc).__name__}: {exc}"[:300]))
    for role, cfg in jobs:
        name = cfg_name(cfg)
        if time.time() > deadline:
            row["entries"].append(dict(role=role, config=name, error="budget spent"))
            continue
        if name not in timed:
            timed[name] = measure(case, cfg, tol, rep, checks=5 if cfg.get("WS_UNSAFE") else 1)
        row["entries"].append(dict(role=role, config=name, **timed[name]))
        e = row["entries"][-1]
        shown = (f"{e['us']:8.1f} us {e['tflops']:6.1f} TF/s err {e['rel_err']:.1e}" if "us" in e
                 else e.get("error", f"err {e.get('rel_err', float('nan')):.1e}  BAD"))
        print(f"  {row['layer']:10s} {row['direction']:8s} {role:8s} {name:55s} {shown}", flush=True)
    errs = [e["rel_err"] for e in row["entries"] if "rel_err" in e]
    row["max_rel_err"] = max(errs) if errs else None
    row["bad"] = [(e["role"], e["config"]) for e in row["entries"] if "error" in e or not e.get("ok", True)]
    return row


def main():
    args = sp.parse_args(LAYERS, 140.0)
    start, deadline, dev, dtype, batch, layers = sp.setup(args, DRY_LAYERS, 140.0)
    cases = []
    for p in layers:
        for d in args.directions.split(","):
            case = sp.Case(p, d, batch, dtype, dev, args.dry_run)
            if case.plan is None:
                print(f"# {p['name']} {d}: no TMA plan", flush=True)
                continue
            case.dev = dev
            cases.append(case_configs(case, args.dry_run))
    rows = sp.compile_and_run(cases, lambda case: run_case(case, args.tol, deadline, args.rep), args, deadline)
    sp.write_json(args, "sweep_conv_ws.json", dev, batch, dtype, rows, start)
    print(f"\n# {dtype}, batch {batch}, wall {time.time() - start:.0f} s; us = CUDA-graph median; "
          f"err = relative L2 vs cuDNN; ratio = time / cuDNN (lower is better)")
    print("| layer | dir | role | config | us | TFLOP/s | ratio | err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layer']} | {r['direction']} | cudnn | | {r['cudnn_us']:.1f} | {r['cudnn_tflops']:.0f} | 1.00 | |")
        for e in r["entries"]:
            if "us" in e:
                print(f"| {r['layer']} | {r['direction']} | {e['role']} | {e['config']} | {e['us']:.1f} | "
                      f"{e['tflops']:.0f} | {e['us'] / r['cudnn_us']:.2f} | {e['rel_err']:.1e} |")
            else:
                err = f"{e['rel_err']:.1e}" if "rel_err" in e else e.get("error", "")[:60]
                print(f"| {r['layer']} | {r['direction']} | {e['role']} | {e['config']} | FAILED | | | {err} |")
    print("\n| layer | dir | cuDNN us | tuner us | tuner+ws us | best ws/probe us | best twin us | ws/twin "
          "| ws/cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        best = lambda roles: min((e["us"] for e in r["entries"] if e["role"] in roles and "us" in e), default=None)
        t, tw, ws, twin = best(("tuner",)), best(("tuner+ws",)), best(("ws", "probe")), best(("twin4", "twin8"))
        f = lambda v: f"{v:.1f}" if v else "n/a"
        q = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
        print(f"| {r['layer']} | {r['direction']} | {r['cudnn_us']:.1f} | {f(t)} | {f(tw)} | {f(ws)} | {f(twin)} | "
              f"{q(ws, twin)} | {q(ws, r['cudnn_us'])} |")
    return sp.exit_status(rows, args)


if __name__ == "__main__":
    sys.exit(main())
