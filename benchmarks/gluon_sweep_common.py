"""What the Gluon sweeps (sweep_gluon_conv, sweep_gluon_wgrad, sweep_gluon_stream) share.

A Gluon kernel that deadlocks hangs its process, so each sweep first runs every config on
small problems in child processes of itself (``script --canary i,j,... [--dry-run]``); the
child prints one ``CANARY <index> ok|BAD <error>`` line per config (``report_canary``) and
the parent (``run_canaries``) marks the first config a child did not report as the one that
hung or crashed it, then restarts the rest. ``--dry-run`` compiles for sm_90 on the CPU
through ``offline_driver``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def offline_driver():
    """--dry-run: let the JIT bind and compile for sm_90 without CUDA."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class Offline:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    driver.set_active(Offline())


def bench(fn, rep):
    """Median microseconds of CUDA-graph replays of fn."""
    import triton
    return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median") * 1e3


def useful(cfg, n, oh, ow) -> float:
    """Output pixels / pixels the NB x BH x BW boxes cover (a FLAT wgrad config's boxes run
    along the one row of n * oh * ow pixels)."""
    import triton
    if cfg.get("FLAT"):
        n, oh, ow = 1, 1, n * oh * ow
    nb, bh, bw = cfg["NB"], cfg["BH"], cfg["BW"]
    covered = triton.cdiv(n, nb) * nb * triton.cdiv(oh, bh) * bh * triton.cdiv(ow, bw) * bw
    return n * oh * ow / covered


def error_note(e) -> str:
    """A table note for an exception: its type and the first 80 characters of its first line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"


def report_canary(i, worst):
    """The child's line for config i (worst relative error over its problems)."""
    print(f"CANARY {i} {'ok' if worst < 2e-2 else 'BAD'} {worst:.3e}", flush=True)


def _start_child(script, todo, dry, limit_s):
    cmd = [sys.executable, os.path.abspath(script), "--canary", ",".join(map(str, todo))]
    if dry:
        cmd.append("--dry-run")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), time.time() + limit_s


def run_canaries(script, indices, dry, limit_s=60.0, jobs=1):
    """{config index: (status, error)}; status ok / BAD / hang / crash. The configs are
    spread over ``jobs`` children of ``script`` (their compiles run in parallel), each with
    ``limit_s`` seconds; a child that hangs or dies is restarted without the first config it
    did not report."""
    status = {}
    indices = list(indices)
    groups = [indices[j::jobs] for j in range(jobs) if indices[j::jobs]]
    while groups:
        procs = [(g, *_start_child(script, g, dry, limit_s)) for g in groups]
        groups = []
        for todo, proc, deadline in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.time()))
                timed_out = False
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                timed_out = True
            for line in out.splitlines():
                if line.startswith("CANARY "):
                    _, i, st, e = line.split()
                    status[int(i)] = (st, float(e))
            todo = [i for i in todo if i not in status]
            if todo:  # the first unreported config hung or crashed the child
                bad = todo.pop(0)
                status[bad] = ("hang" if timed_out else "crash", float("nan"))
                tail = (err or "").strip().splitlines()[-3:]
                print(f"canary: config {bad} {status[bad][0]}: {' | '.join(tail)}", flush=True)
                if todo:
                    groups.append(todo)
    return status


def write_json(out, filename, record):
    """Write record to out/filename (when --out is given) and say where."""
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, filename)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {path}")


def select(ap, a, n_configs, known_layers):
    """(config indices, layer names) from --configs (default: all n_configs) and --layers,
    each layer checked against known_layers."""
    indices = [int(i) for i in a.configs.split(",") if i] or list(range(n_configs))
    layers = [name for name in a.layers.split(",") if name]
    for name in layers:
        if name not in known_layers:
            ap.error(f"unknown layer {name}")
    return indices, layers


def cudnn_setup(dry):
    """The device the sweep runs on; on the GPU, cudnn.benchmark on and a line naming
    the device and versions."""
    import torch
    if dry:
        return "cpu"
    torch.backends.cudnn.benchmark = True
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  cudnn "
          f"{torch.backends.cudnn.version()}", flush=True)
    return "cuda"
