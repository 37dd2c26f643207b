"""Which tuner candidate hangs? Runs bench_gpu_conv.py on chosen layers with the tuner wrapped
to print each candidate before its first run, and faulthandler dumping the stacks every 45 s.

    PYTHONPATH=src python3 benchmarks/diag_tuner_hang.py rn50-fwd OUTDIR [LAYERS]   (one GPU)

Used on 2026-11-30 (session 7) to find the warp-specialized conv_tma config that hung the H200."""
import faulthandler
import os
import sys
import time

faulthandler.dump_traceback_later(45, repeat=True)
import torch  # noqa: E402
from tridnn.cuda import common  # noqa: E402
_pick = common.Tuner.pick


def pick(self, key, candidates, launch, out, device, scratch_ok=False):
    """The tuner's pick with each candidate announced (and synchronized) before its first run."""
    seen = set()

    def announced(cfg, o):
        if repr(cfg) not in seen:
            seen.add(repr(cfg))
            print("  candidate", cfg, flush=True)
            t0 = time.time()
            launch(cfg, o)
            torch.cuda.synchronize()
            print(f"    first run ok {time.time() - t0:.1f} s", flush=True)
            return
        launch(cfg, o)
    best = _pick(self, key, candidates, announced, out, device, scratch_ok)
    print("  pick", best, flush=True)
    return best


common.Tuner.pick = pick
section, out_dir = sys.argv[1], sys.argv[2]
layers = sys.argv[3] if len(sys.argv) > 3 else "res2_1x1r,res3_3x3"
sys.argv = ["bench_gpu_conv.py", "--sections", section, "--algos", "get", "--budget-s", "60", "--out", out_dir,
            "--layers", layers]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv  # noqa: E402

bench_gpu_conv.main()
