#!/bin/bash
# Pending GPU work in named steps (sessions 29-32; session 30 ran tests, the four A/B steps,
# tuner_gap and wgrad_sweep on an H100, session 32 wgrad14, flat1x1, dilated and the batch-64
# suites: docs/performance.md, sessions 30 and 32).
# Usage (device tool; carry build/base.tar):
#   git archive HEAD -o build/base.tar   # here
#   mkdir -p /tmp/base && tar xf build/base.tar -C /tmp/base && bash /tmp/base/benchmarks/gpu_images_inner_check.sh \
#       "tests fwd64 dgrad64 fwd256 dgrad256 wgrad_sweep"
# LIMIT (seconds, default 570) bounds the whole run: a step starts only with 60 s left.
# Steps:
#   tests      the strided images-inner configs forced, against float64: gluon_conv_strided's kernel,
#              gluon_dgrad_fused's one launch, and both through the API (forward; backward data a
#              launch a phase)
#   fwd64 / dgrad64 / fwd256 / dgrad256
#              bench_gpu_conv.py --algos get on the stride-2 layers, TRIDNN_IMAGES_INNER_STRIDED=1
#              against 0 on one machine (the A/B that decides the switch's default)
#   tuner_gap  sweep_gluon_conv.py --api on aspp_d2 backward data: with session 30's re-timing of
#              the leaders in reverse order, does the tuner now pick the fastest candidate?
#   wgrad_sweep  sweep_gluon_wgrad.py on res5_3x3, res4_3x3 and res5_3x3s2 (batch 64): the 128 x 256
#              ring-of-3 configs (30-32, TMA store of dw) against the picked ones
#   wgrad14    (session 30's new 14-wide backward-filter pick, 64x1x1 128x128 s5 images-inner)
#              bench_gpu_conv.py rn50-bwd_filter on res4_3x3, res4_3x3s2, res4_ds at batch 64 and 256
#   suites     the whole ResNet-50 suites (forward, backward data, backward filter at batch 64 and
#              256) with the defaults: the targets table (an H200 has not run them since session 12)
#   fwd_64 ... bwd_filter_256  (session 33) one of those six suites, so that a call can pick up where
#              the last one's time ran out
#   dilated    the DeepLab suites (dil-fwd, dil-bwd_data, dil-bwd_filter) with PICKS_DILATED
#   depthwise  (session 32) the MobileNetV2 depthwise suites (dw-fwd, dw-bwd_data, dw-bwd_filter, batch 64):
#              the targets 0.6 / 0.4 / 0.4 were set against the H200's cuDNN, so run this step on an H200
#   tf32 / fused  (session 33) float32 forward under TENSOR_OP math (tf32) against cuDNN's tf32; the
#              fused conv + bias + relu + residual against cuDNN's conv and PyTorch's bias, relu, add
#   layers     (session 32) bench_gpu_layers.py --budget-s 150: issue 5's layers against PyTorch (TB/s)
#   gn_coop    (session 34) group_norm_coop's GPU tests (the barrier at full size, bit for bit against the
#              two-launch form, a CUDA graph) and sweep_group_norm.py --only NHWC (its rows against norms.py's)
#   pool_split (session 35) sweep_pooling.py --only "bwd" --more: the max backward's two passes (taps,
#              gather) timed alone beside the whole, both layouts; the NCHW row gather's tiles, the NHWC taps
#              pass's tiles, the fused NHWC designs (run on an H100 in session 36)
#   flat1x1    sweep_gluon_conv.py on the 1x1 layers of 14- and 7-wide maps as flat GEMMs (batch 64,
#              forward and backward data, against cuBLAS / cuDNN): the flat configs (22-26)
# Results under $OUT (or ./gpu_out); a per-layer summary last.
cd /tmp/base
export PYTHONPATH=/tmp/base/src TRITON_CACHE_DIR=/tmp/tcd PYTHONUNBUFFERED=1
R=${OUT:-gpu_out}; mkdir -p "$R"; export R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
START=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - START) )); }
STRIDED=res3_3x3s2,res3_ds,res4_3x3s2,res4_ds,res5_3x3s2,res5_ds

suite() {  # tag section batch [layers]: one bench_gpu_conv.py section with the defaults
  local t; t=$(left); if [ "$t" -lt 60 ]; then echo "skip $1 (time)"; return; fi
  TRIDNN_CACHE_DIR=/tmp/fc_$1 timeout "$t" python3 benchmarks/bench_gpu_conv.py --batch "$3" --sections "$2" \
      --algos get --budget-s 600 ${4:+--layers $4} --out "$R/$1" > "$R/$1.txt" 2>&1
  echo "$1: $(grep -E '^\| (rn50|dil|dw|fp32|fused)' "$R/$1.txt" | tail -3 | tr '\n' ' ')"
}

script() {  # tag lines command...: one script within the time left; its last lines
  local t; t=$(left); if [ "$t" -lt 60 ]; then echo "skip $1 (time)"; return; fi
  local tag=$1 lines=$2; shift 2
  timeout "$t" "$@" > "$R/$tag.txt" 2>&1
  tail -"$lines" "$R/$tag.txt"
}

bench() {  # tag section batch strided(0|1)
  local t; t=$(left); if [ "$t" -lt 60 ]; then echo "skip $1 (time)"; return; fi
  local t0; t0=$(date +%s)
  TRIDNN_IMAGES_INNER_STRIDED=$4 TRIDNN_CACHE_DIR=/tmp/fc_$1 timeout "$t" python3 benchmarks/bench_gpu_conv.py \
      --batch "$3" --sections "$2" --algos get --budget-s 600 --layers $STRIDED --out "$R/$1" > "$R/$1.txt" 2>&1
  echo "$1 took $(( $(date +%s) - t0 )) s: $(grep -E '^\| rn50' "$R/$1.txt" | tail -1)"
}

for step in $1; do
  case $step in
    tests)
      t0=$(date +%s)
      TRIDNN_GPU_TESTS=1 timeout "${TEST_S:-200}" python3 -m pytest -q -p no:cacheprovider --gpu -m gpu \
          tests/test_gluon_conv_strided.py tests/test_gluon_dgrad_fused.py tests/test_gluon_integration.py \
          -k "images-inner and (strided or fused or direct or against_float64)" > "$R/tests.txt" 2>&1
      echo "tests took $(( $(date +%s) - t0 )) s: $(tail -1 "$R/tests.txt")";;
    fwd64) bench fwd64_on rn50-fwd 64 1; bench fwd64_off rn50-fwd 64 0;;
    dgrad64) bench dgrad64_on rn50-bwd_data 64 1; bench dgrad64_off rn50-bwd_data 64 0;;
    fwd256) bench fwd256_on rn50-fwd 256 1; bench fwd256_off rn50-fwd 256 0;;
    dgrad256) bench dgrad256_on rn50-bwd_data 256 1; bench dgrad256_off rn50-bwd_data 256 0;;
    tuner_gap)
      script tuner_gap 8 python3 benchmarks/sweep_gluon_conv.py --api --layers aspp_d2 --directions bwd_data \
          --out "$R/tuner_gap";;
    wgrad_sweep)
      script wgrad 30 python3 benchmarks/sweep_gluon_wgrad.py --layers res5_3x3,res4_3x3,res5_3x3s2 \
          --configs 3,4,8,12,27,28,30,31,32 --out "$R/wgrad" --budget-s $(( $(left) - 60 ));;
    wgrad14) for b in 64 256; do suite "wgrad14_$b" rn50-bwd_filter $b res4_3x3,res4_3x3s2,res4_ds; done;;
    suites) for b in 64 256; do for d in fwd bwd_data bwd_filter; do suite "${d}_$b" "rn50-$d" $b; done; done;;
    fwd_64|fwd_256|bwd_data_64|bwd_data_256|bwd_filter_64|bwd_filter_256)
      suite "$step" "rn50-${step%_*}" "${step##*_}";;
    dilated) suite dilated dil-fwd,dil-bwd_data,dil-bwd_filter 16;;
    depthwise) suite depthwise dw-fwd,dw-bwd_data,dw-bwd_filter 64;;
    tf32) suite tf32 fp32-tf32 64;;
    fused) suite fused fused 64;;
    layers) script layers 60 python3 benchmarks/bench_gpu_layers.py --budget-s 150 --out "$R/layers.json";;
    gn_coop)  # (session 34) the cooperative group norm: its GPU tests, then every NHWC sweep row
      t0=$(date +%s)
      TRIDNN_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --gpu -m gpu \
          tests/test_cuda_group_norm_coop.py > "$R/gn_coop_tests.txt" 2>&1
      echo "gn_coop tests took $(( $(date +%s) - t0 )) s: $(tail -1 "$R/gn_coop_tests.txt")"
      script gn_coop 32 python3 benchmarks/sweep_group_norm.py --only NHWC --out "$R/gn_coop";;
    pool_split) script pool_split 40 python3 benchmarks/sweep_pooling.py --only "bwd" --more --out "$R/pool_split";;
    flat1x1)
      script flat1x1 52 python3 benchmarks/sweep_gluon_conv.py --directions fwd,bwd_data --configs 22,23,24,25,26 \
          --layers flat_res4_1x1r,flat_res4_1x1c,flat_res5_1x1r,flat_res5_1x1c --budget-s $(( $(left) - 60 )) \
          --out "$R/flat1x1";;
    *) echo "unknown step $step";;
  esac
done

python3 - <<'PY'
import glob, json, os
for f in sorted(glob.glob(os.path.join(os.environ["R"], "*", "bench_gpu_conv.json"))):
    d = json.load(open(f))
    for section, rows in d["sections"].items():
        print(f.split("/")[-2], " ".join(f"{r['layer']}:{r.get('ratio', float('nan')):.3f}"
                                         f"({r.get('best_us', 0):.1f}/{r.get('cudnn_us', 0):.1f}us)" for r in rows))
PY
