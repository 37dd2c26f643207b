#!/bin/bash
# Session 7 round B: the Gluon kernels' first GPU runs and the suites with Gluon candidates.
# Steps run in the order given, on one GPU (an x2 machine was not lent at 17:45 UTC):
#   bash benchmarks/h200_session7_b.sh gluon_tests api wgrad stream
# Steps: gluon_tests (Gluon conv kernel + integration GPU tests), api (sweep_gluon_conv --api,
# forward and backward data through the public API), wgrad (Gluon backward-filter sweep),
# wgrad_tests, stream (Gluon streaming reductions sweep), stream_tests, dw (depthwise strip
# sweep), fwd / dgrad / wgrad_suite (ResNet-50 batch-64 suites, get's choice).
# Run from a snapshot: mkdir -p /tmp/base && tar xf build/base.tar -C /tmp/base && bash benchmarks/h200_session7_b.sh ...
set -u
cd /tmp/base
export PYTHONPATH=/tmp/base/src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/r"
R="$OUT/r"
gpu_tests() { TRIDNN_GPU_TESTS=1 timeout "$1" python3 -m pytest -q -x -p no:cacheprovider --gpu -m gpu "${@:3}" > "$R/$2.log" 2>&1; echo "$2 rc=$?"; tail -3 "$R/$2.log" | cut -c1-200; }
for step in "$@"; do
  case $step in
    gluon_tests) gpu_tests 110 gluon_tests tests/test_gluon_conv.py tests/test_gluon_integration.py ;;
    api) timeout 150 python3 benchmarks/sweep_gluon_conv.py --api --directions fwd,bwd_data --budget-s 120 --out "$R/api" > "$R/api.log" 2>&1
         echo "api rc=$?"; tail -40 "$R/api.log" | cut -c1-140 ;;
    wgrad) timeout 150 python3 benchmarks/sweep_gluon_wgrad.py --out "$R/wg" > "$R/wgrad.log" 2>&1
           echo "wgrad rc=$?"; tail -32 "$R/wgrad.log" | cut -c1-140 ;;
    wgrad_tests) gpu_tests 80 wgrad_tests tests/test_gluon_wgrad.py ;;
    stream) timeout 90 python3 benchmarks/sweep_gluon_stream.py --out "$R/st" > "$R/stream.log" 2>&1
            echo "stream rc=$?"; tail -30 "$R/stream.log" | cut -c1-140 ;;
    stream_tests) gpu_tests 60 stream_tests tests/test_gluon_stream.py ;;
    dw) timeout 100 python3 benchmarks/sweep_depthwise_fwd.py --budget-s 70 --passes strip --out "$R/dwf" > "$R/dwf.log" 2>&1
        echo "dw rc=$?"; grep -E "^  dw|geomean" "$R/dwf.log" | cut -c1-140 ;;
    fwd|dgrad|wgrad_suite)
        sec=$([ $step = fwd ] && echo rn50-fwd || ([ $step = dgrad ] && echo rn50-bwd_data || echo rn50-bwd_filter))
        timeout ${SUITE_S:-190} python3 benchmarks/bench_gpu_conv.py --out "$R/$step" --sections $sec --algos get --budget-s $(( ${SUITE_S:-190} - 22 )) > "$R/$step.log" 2>&1
        echo "$step rc=$?"; grep -hE "^\| (rn50|section)|skipped|geomean" "$R/$step.log" | cut -c1-140 ;;
  esac
done
cd "$OUT" && tar czf /tmp/all.tgz r && rm -rf "$R" && mv /tmp/all.tgz "$OUT/all.tgz"
