#!/bin/bash
# Session 7 round B (nvidia-h200-x2): the Gluon kernels' first GPU runs and the forward suite
# with Gluon candidates in the tuner.
#   GPU 0: Gluon backward filter sweep + GPU tests, Gluon streaming reductions sweep + GPU
#          tests, depthwise strip sweep + GPU tests.
#   GPU 1: Gluon conv GPU tests (kernel + integration), sweep_gluon_conv --api (forward and
#          backward data through the public API), ResNet-50 forward suite (get's choice).
# Run from a snapshot: mkdir -p /tmp/base && tar xf build/base.tar -C /tmp/base && bash benchmarks/h200_session7_b.sh
set -u
ROOT=$PWD; cd /tmp/base
export PYTHONPATH=/tmp/base/src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 150 python3 benchmarks/sweep_gluon_wgrad.py --out "$OUT/g0/wg" > "$OUT/g0/wgrad.log" 2>&1; echo "wgrad sweep rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 80 python3 -m pytest -q -x -p no:cacheprovider --gpu tests/test_gluon_wgrad.py > "$OUT/g0/wgrad_tests.log" 2>&1; echo "wgrad tests rc=$?"
    timeout 90 python3 benchmarks/sweep_gluon_stream.py --out "$OUT/g0/st" > "$OUT/g0/stream.log" 2>&1; echo "stream sweep rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 60 python3 -m pytest -q -x -p no:cacheprovider --gpu tests/test_gluon_stream.py > "$OUT/g0/stream_tests.log" 2>&1; echo "stream tests rc=$?"
    timeout 100 python3 benchmarks/sweep_depthwise_fwd.py --budget-s 70 --passes strip --out "$OUT/g0/dwf" > "$OUT/g0/dwf.log" 2>&1; echo "dw sweep rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    TRIDNN_GPU_TESTS=1 timeout 110 python3 -m pytest -q -x -p no:cacheprovider --gpu tests/test_gluon_conv.py tests/test_gluon_integration.py > "$OUT/g1/gluon_tests.log" 2>&1; echo "gluon tests rc=$?"
    timeout 150 python3 benchmarks/sweep_gluon_conv.py --api --directions fwd,bwd_data --budget-s 120 --out "$OUT/g1/api" > "$OUT/g1/api.log" 2>&1; echo "api sweep rc=$?"
    timeout 190 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/fwd" --sections rn50-fwd --algos get --budget-s 170 > "$OUT/g1/fwd.log" 2>&1; echo "fwd rc=$?"
}
gpu0 & gpu1 &
wait
echo "=== wgrad"; tail -32 "$OUT/g0/wgrad.log" | cut -c1-140
echo "=== wgrad tests"; tail -3 "$OUT/g0/wgrad_tests.log" | cut -c1-200
echo "=== stream"; tail -30 "$OUT/g0/stream.log" | cut -c1-140
echo "=== stream tests"; tail -3 "$OUT/g0/stream_tests.log" | cut -c1-200
echo "=== dw"; grep -E "^  dw|geomean" "$OUT/g0/dwf.log" | cut -c1-140
echo "=== gluon tests"; tail -3 "$OUT/g1/gluon_tests.log" | cut -c1-200
echo "=== api"; tail -40 "$OUT/g1/api.log" | cut -c1-140
echo "=== fwd"; grep -hE "^\| (rn50|section)|skipped|geomean" "$OUT/g1/fwd.log" | cut -c1-140
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
