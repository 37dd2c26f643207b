#!/bin/bash
# The GPU checks left open at the end of 2026-11-30's session 2, in one device call on
# nvidia-h200-x2 (about 9.5 minutes; every step has its own time limit and writes under $OUT):
#
#   both : the NCCL DDP test first (TRIDNN_GPU_TESTS=1: without it tests/conftest.py turns on
#          Triton's interpreter, which is what failed the first attempt)
#   GPU 0: conv1's padded TMA path timed against cuDNN, the host-overhead breakdown of one
#          call, then a profile of one training step
#   GPU 1: the GPU fuzz (2,000 problems) after the fixes, then the large-tensor checks
#
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_recheck.sh
# Results come back as one archive, $OUT/all.tgz (the tool returns at most 8 files).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/conv" "$OUT/rel" "$OUT/ddp"
status() { echo "$*" | tee -a "$OUT/status.txt"; }
TRIDNN_GPU_TESTS=1 timeout 140 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_ddp.py -k nccl \
    > "$OUT/ddp/nccl_test.log" 2>&1; status "nccl test rc=$?"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 80 python3 benchmarks/profile_gpu_host_overhead.py --out "$OUT/conv" > "$OUT/conv/host.log" 2>&1
  status "host rc=$?"
  timeout 120 python3 benchmarks/bench_gpu_conv.py --out "$OUT/conv" --sections rn50-fwd,rn50-bwd_data,rn50-bwd_filter \
      --layers conv1 --budget-s 100 > "$OUT/conv/conv1.log" 2>&1; status "conv1 rc=$?"
  TRIDNN_TUNE=first timeout 190 python3 benchmarks/profile_gpu_train_step.py --warmup 2 --steps 3 > "$OUT/conv/profile.log" 2>&1
  status "profile rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 170 python3 benchmarks/fuzz_gpu.py --device cuda --problems 2000 --workers 14 --time-budget-s 150 \
      --out "$OUT/rel" > "$OUT/rel/fuzz.log" 2>&1; status "fuzz rc=$?"
  timeout 200 python3 benchmarks/gpu_large_tensors.py --out "$OUT/rel" --time-budget-s 180 > "$OUT/rel/large.log" 2>&1
  status "large rc=$?"
) &
wait
echo "=== host"; tail -10 "$OUT/conv/host.log" | cut -c1-160
echo "=== conv1"; grep -E "conv1|geomean" "$OUT/conv/conv1.log" | cut -c1-160
echo "=== profile"; grep -E "per step|GPU kernel time" "$OUT/conv/profile.log" | cut -c1-160
echo "=== fuzz"; tail -8 "$OUT/rel/fuzz.log" | cut -c1-160
echo "=== large"; grep -E "pass|FAIL|skip" "$OUT/rel/large.log" | cut -c1-150 | head -16
echo "=== nccl"; tail -3 "$OUT/ddp/nccl_test.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
