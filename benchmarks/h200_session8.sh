#!/bin/bash
# Session 8's GPU rounds: named steps run in two lanes, one a GPU (nvidia-h200-x2), or in one
# lane on a single GPU. Usage (device tool, from a snapshot of HEAD):
#   git archive HEAD -o build/base.tar   # here; carry build/base.tar
#   mkdir -p /tmp/base && tar xf build/base.tar -C /tmp/base && bash /tmp/base/benchmarks/h200_session8.sh \
#       "strided_tests strided wgrad_suite" "layers dw_tests dw fused_fp32"
# Steps:
#   strided_tests  Gluon stride-s forward GPU tests (tests/test_gluon_conv_strided.py)
#   strided_dgrad_tests  the Gluon phase backward data forced through ALGO_1 (test_gluon_integration)
#   turn_tests     filter_turn's kernel on the GPU (tests/test_filter_turn.py)
#   strided_api    the strided configs forced through IMPLICIT_GEMM forward (test_gluon_integration)
#   strided        sweep_gluon_conv --strided: res3/4/5_3x3s2 and _ds against cuDNN
#   gluon_tests    Gluon stride-1 conv kernel + integration GPU tests
#   api            sweep_gluon_conv --api (forward and backward data through the public API)
#   wgrad_tests    Gluon backward-filter GPU tests (kernel + integration)
#   wgrad_int_tests  the backward-filter integration GPU tests alone (every tuner config, 250 s)
#   stream_tests   Gluon streaming reductions GPU tests (kernel + routing)
#   layers         bench_gpu_layers.py (every layer kernel against PyTorch)
#   dw_tests       depthwise strip kernel GPU tests
#   dw             sweep_depthwise_fwd --passes strip
#   fwd / dgrad / wgrad_suite   ResNet-50 batch-64 suites, get's choice (SUITE_S seconds, default 190)
#   b256_fwd / b256_dgrad / b256_wgrad   the same at batch 256
#   fused_fp32     the fused, fp32-tf32, fp32-strict and fp32-default sections
#   fp32           the fp32-tf32, fp32-strict and fp32-default sections
#   tf32_tests     the Gluon tf32 (float32, TENSOR_OP) configs on the GPU (tests/test_gluon_tf32.py)
#   tf32_sweep     sweep_gluon_conv --dtype float32 (stride 1, then --strided) against cuDNN tf32
#   fp32_gluon     the fp32-tf32 suite with the Gluon tf32 configs offered (TRIDNN_GLUON_TF32=1)
#   fused_dgrad_tests  gluon_dgrad_fused (all stride phases in one launch) on the GPU
#   fused_dgrad_sweep  sweep_gluon_conv --dgrad-phases: fused vs a launch a phase vs cuDNN
#   dgrad_fused    the backward data suite with the fused launch on (TRIDNN_GLUON_FUSED_PHASES=1)
#   diag           diag_gluon_route.py (does NHWC global average pooling reach gluon_stream)
#   dws            the MobileNetV2 depthwise suites (dw-fwd, dw-bwd_data, dw-bwd_filter)
#   host           bench_gpu_host_time.py (host us a call on real layers, against torch)
#   records_tests  the launch-record GPU tests (forward, backward data, backward filter)
#   replay_tests   the API fast path's replays of launch records on the GPU (tests/test_conv_replay.py)
#   dry_tests      dry-run launch records (tests/test_launch_record.py, every algorithm replayed against float64)
#                  and test_conv_replay.py on the GPU; lists which algorithm and case replays, or why not
#   dry_par        the same, each GPU case in its own pytest process at once (a cold Triton cache compiles in parallel)
#   wino_grouped   the fused WINOGRAD forward config by config on grouped half-precision problems (fuzz seed 1's failure)
#   mma_audit      audit_mma_layouts.py over the Triton cache: compiled dots whose warps repeat other warps' work
#                  (run after fuzz or a test step, which fill the cache)
#   s2d_tests      conv_s2d (stride-2 first layers as block convolutions) on the GPU
#   fp32_tf32      the fp32-tf32 section alone
#   wgrad_s2d      the backward filter suite with conv1 through conv_s2d's blocks (TRIDNN_S2D_WGRAD=1)
#   flat_tests     the one-row (FLAT) backward-filter configs on 1x1 layers against float64
#   flat_sweep     sweep_gluon_wgrad on the 1x1 layers: image boxes against the FLAT configs
#   layers_tests   the layer kernels' tests on the GPU (pooling, norms, dropout, LRN, tensor ops), 200 s
#   layers_tests2  the same from the split row reductions on (layers_tests stops after ~290 tests), 300 s
#   dw_profile     profile_gpu_conv_kernels.py: the kernels of depthwise backward filter calls and cuDNN's
#   pool_diag      diag_avg_pool_backward.py (channels-last average pooling dx: tridnn against torch and NumPy)
#   f64_tests      float64 layers with non-float32 alpha/beta (test_cuda_float64_scalars, test_cuda_float64)
#   layers_tests3  the layer test files session 11 did not reach (tensor ops, LRN, resident group norm), 120 s
#   flat_sweep2    sweep_gluon_wgrad on the 1x1 layers over cuDNN: the narrow FLAT tiles and schedule variants
#   res5_sweep     sweep_gluon_wgrad on res5_3x3, res5_3x3s2, res5_ds: 7x7 boxes, schedule variants
#   tf32_strided   sweep_gluon_conv --dtype float32 --strided (the tf32 stride-2 layers against cuDNN tf32)
#   layers_tests4  the LRN and resident group norm test files (layers_tests3 stops in the LRN file), 150 s
#   fma_tests      the Gluon FMA (float32, FMA math) configs on the GPU (tests/test_gluon_fma.py)
#   fma_sweep      sweep_gluon_conv --dtype fma: the FMA configs on the 3x3 and 1x1 layers against cuDNN strict
#   fma_strided    sweep_gluon_conv --dtype fma --strided (the stride-2 layers)
#   fma_api        sweep_gluon_conv --dtype fma --api: the tuner's FMA picks through the public API
#   fp32_strict    the fp32-strict section alone (FMA math against cuDNN with tf32 off)
#   fp32_default_wgrad  the fp32-default-bwd_filter section alone (23 layers, get's choice)
#   dw_fwd         the MobileNetV2 depthwise forward suite alone (dw_dgrad: backward data alone)
#   dw_gluon_tests conv_depthwise_gluon (the Gluon depthwise walker) on the GPU
#   dilated        the DeepLab ASPP dilated suites (dil-fwd, dil-bwd_data, dil-bwd_filter; batch 16)
#   wino_profile   kernel times of the strict float32 3x3 layers (get's WINOGRAD_NONFUSED) and cuDNN's
#   f4_tests       WINOGRAD_NONFUSED's F(4x4,3x3) kernels (float32, FMA and DEFAULT math) against float64
#   new_algo_tests session 14's algorithms on the GPU: F(4x4) and FFT_TILING forward, backward data FFT / WINOGRAD /
#                  WINOGRAD_NONFUSED (forward methods on dy), backward filter ALGO_3, FFT, FFT_TILING, WINOGRAD_NONFUSED
#   fp32_bwd       every algorithm on the 3x3 layers, float32 backward data and filter, FMA and DEFAULT math
#                  (where get picks session 14's transform methods) against cuDNN with tf32 off
#   conv1_fwd_all  every forward algorithm on conv1, bf16 and float32 tf32 (GEMM with the spill-free tiles)
#   large          gpu_large_tensors.py (tensors past 2^31 elements, every algorithm; LARGE_S seconds)
#   fuzz           fuzz_gpu.py (random problems through the public API against float64; FUZZ_S seconds,
#                  FUZZ_ARGS more arguments, e.g. "--seed 5 --repeats 3")
#   new_tests_par  new_algo_tests without the F(4x4) file, four pytest processes at once (TESTS_S each)
#   fft_bench      every algorithm on res3_3x3 and res5_3x3, float32 strict/DEFAULT backward data and filter,
#                  and the dilated aspp_d12 backward filter (the spectral GEMM's FFT against the rest)
#   new_algos      every algorithm (find's view) on the 3x3 stride-1 layers, backward data and filter, bf16
#   dw_wgrad_tests conv_depthwise_gluon_wgrad (the Gluon depthwise filter-gradient walker) on the GPU
#   dw_wgrad       the MobileNetV2 depthwise backward filter suite alone
#   dw_kinds       profile_gpu_conv_kernels on four small depthwise layers, ALGO_1 then ALGO_0 (DW_ALGOS) tuned
#                  over one kernel family at a time (tiles, pointer): its kernels and times beside cuDNN's
#   dw_tiles       the depthwise backward filter layers of <= 28x28 outputs without, then with, the pixel-tile
#                  kernel (conv_depthwise_wgrad_tiles) among the tuner's candidates (SUITE_S seconds each)
#   dw_wgrad_sweep sweep_depthwise_wgrad.py on the stride-1 layers: the Gluon walker's configs alone against the
#                  row walker's, the tuner's pick and cuDNN (SWEEP_S seconds)
#   nan_pool_probe probe_cudnn_nan_pool.py: cuDNN's max pooling on an all-NaN window, NaN not propagated,
#                  beside tridnn's Triton kernels and the reference (a decision pending, docs/reliability.md)
#   conv1          conv1 alone: forward, backward data, fused and backward filter with the blocks'
#                  backward filter on, then backward filter with it off
set -u
cd /tmp/base
export PYTHONPATH=/tmp/base/src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
LAYER_TESTS="tests/test_cuda_layers.py tests/test_cuda_norms_dropout_fast.py tests/test_cuda_tensor_ops_fast.py
             tests/test_cuda_lrn_fast.py tests/test_cuda_group_norm_resident.py"
LAYER_TESTS_REST="not test_cuda_layers or reduce_split or adaptive_average_pool_to_1x1 or reduce_max_nan or bad_inputs"
LAYER_TESTS_REST="$LAYER_TESTS_REST or public_api or gpu_"
gpu_tests() { TRIDNN_GPU_TESTS=1 timeout "$1" python3 -m pytest -q -x -p no:cacheprovider --gpu ${MARK--m gpu} "${@:3}" > "$R/$2.log" 2>&1; echo "$2 rc=$?"; tail -3 "$R/$2.log" | cut -c1-200; }
suite() {  # suite NAME SECONDS SECTIONS [extra args]
    timeout "$2" python3 benchmarks/bench_gpu_conv.py --out "$R/$1" --sections "$3" --algos get --budget-s $(( $2 - 22 )) "${@:4}" > "$R/$1.log" 2>&1
    echo "$1 rc=$?"; grep -hE "^\| (rn50|dw|dil|fp32|fused|section)|^dil-|^dw-|skipped|geomean" "$R/$1.log" | cut -c1-140
}
step() {
  case $1 in
    strided_tests) gpu_tests 120 strided_tests tests/test_gluon_conv_strided.py ;;
    strided) timeout 170 python3 benchmarks/sweep_gluon_conv.py --strided --budget-s 140 --out "$R/strided" > "$R/strided.log" 2>&1
             echo "strided rc=$?"; tail -45 "$R/strided.log" | cut -c1-140 ;;
    gluon_tests) gpu_tests 200 gluon_tests tests/test_gluon_conv.py tests/test_gluon_integration.py ;;
    api) timeout 150 python3 benchmarks/sweep_gluon_conv.py --api --directions fwd,bwd_data --budget-s 120 --out "$R/api" > "$R/api.log" 2>&1
         echo "api rc=$?"; tail -40 "$R/api.log" | cut -c1-140 ;;
    wgrad_tests) gpu_tests 100 wgrad_tests tests/test_gluon_wgrad.py tests/test_gluon_wgrad_integration.py ;;
    wgrad_int_tests) gpu_tests 250 wgrad_int_tests tests/test_gluon_wgrad_integration.py ;;
    stream_tests) gpu_tests 80 stream_tests tests/test_gluon_stream.py tests/test_gluon_stream_routing.py ;;
    layers) timeout 150 python3 benchmarks/bench_gpu_layers.py --out "$R/layers.json" --budget-s 120 > "$R/layers.log" 2>&1
            echo "layers rc=$?"; sed -n '/ copy /,$p' "$R/layers.log" | grep -v "\[" | cut -c1-110 ;;
    dw_tests) MARK= gpu_tests 90 dw_tests tests/test_cuda_depthwise_strip.py ;;  # (TRIDNN_GPU_TESTS moves them to the GPU)
    strided_dgrad_tests) gpu_tests 150 strided_dgrad_tests tests/test_gluon_integration.py -k "strided_backward or tuner_with" ;;
    turn_tests) MARK= gpu_tests 60 turn_tests tests/test_filter_turn.py ;;
    strided_api) gpu_tests 150 strided_api tests/test_gluon_integration.py -k "strided or tuner_with" ;;
    dw) timeout 100 python3 benchmarks/sweep_depthwise_fwd.py --budget-s 70 --passes strip --out "$R/dwf" > "$R/dwf.log" 2>&1
        echo "dw rc=$?"; grep -E "^  dw|geomean" "$R/dwf.log" | cut -c1-140 ;;
    fwd) suite fwd "${SUITE_S:-190}" rn50-fwd ;;
    dgrad) suite dgrad "${SUITE_S:-190}" rn50-bwd_data ;;
    wgrad_suite) suite wgrad_suite "${SUITE_S:-190}" rn50-bwd_filter ;;
    b256_fwd) suite b256_fwd "${SUITE_S:-190}" rn50-fwd --batch 256 ;;
    b256_dgrad) suite b256_dgrad "${SUITE_S:-190}" rn50-bwd_data --batch 256 ;;
    b256_wgrad) suite b256_wgrad "${SUITE_S:-190}" rn50-bwd_filter --batch 256 ;;
    fused_fp32) suite fused_fp32 "${SUITE_S:-190}" fused,fp32-tf32,fp32-strict,fp32-default ;;
    fp32) suite fp32 "${SUITE_S:-190}" fp32-tf32,fp32-strict,fp32-default ;;
    tf32_tests) gpu_tests 240 tf32_tests tests/test_gluon_tf32.py ;;
    tf32_sweep) timeout 200 python3 benchmarks/sweep_gluon_conv.py --dtype float32 --budget-s 80 --out "$R/tf32" > "$R/tf32.log" 2>&1
                echo "tf32 rc=$?"; tail -30 "$R/tf32.log" | cut -c1-140
                timeout 120 python3 benchmarks/sweep_gluon_conv.py --dtype float32 --strided --budget-s 80 --out "$R/tf32s" > "$R/tf32s.log" 2>&1
                echo "tf32 strided rc=$?"; tail -30 "$R/tf32s.log" | cut -c1-140 ;;
    fused_dgrad_tests) gpu_tests 240 fused_dgrad_tests tests/test_gluon_dgrad_fused.py ;;
    fused_dgrad_sweep) timeout 200 python3 benchmarks/sweep_gluon_conv.py --dgrad-phases --budget-s 150 --out "$R/fdg" > "$R/fdg.log" 2>&1
                       echo "fused dgrad rc=$?"; tail -40 "$R/fdg.log" | cut -c1-140 ;;
    dgrad_fused) TRIDNN_GLUON_FUSED_PHASES=1 suite dgrad_fused "${SUITE_S:-190}" rn50-bwd_data ;;
    fp32_gluon) TRIDNN_GLUON_TF32=1 suite fp32_gluon "${SUITE_S:-190}" fp32-tf32 ;;
    diag) timeout 60 python3 benchmarks/diag_gluon_route.py > "$R/diag.log" 2>&1; echo "diag rc=$?"; cat "$R/diag.log" | cut -c1-160 ;;
    dws) suite dws "${SUITE_S:-190}" dw-fwd,dw-bwd_data,dw-bwd_filter ;;
    s2d_tests) MARK= gpu_tests 150 s2d_tests tests/test_cuda_conv_s2d.py ;;
    wgrad_s2d) TRIDNN_S2D_WGRAD=1 suite wgrad_s2d "${SUITE_S:-190}" rn50-bwd_filter ;;
    flat_tests) gpu_tests 150 flat_tests tests/test_gluon_wgrad.py tests/test_gluon_wgrad_integration.py -k "flat" ;;
    flat_sweep) timeout 200 python3 benchmarks/sweep_gluon_wgrad.py --no-canary --model-only --no-tridnn \
                    --configs 1,2,3,8,10,12,21,22,23 --layers res3_1x1c,res4_1x1c,res4_1x1r,res5_1x1a,res5_1x1c,res5_1x1r --budget-s 150 \
                    --out "$R/flat" > "$R/flat.log" 2>&1
                echo "flat_sweep rc=$?"; grep -E "cudnn|flat|^res" "$R/flat.log" | grep -v "^ " | cut -c1-120 | tail -60 ;;
    layers_tests) MARK= gpu_tests 200 layers_tests $LAYER_TESTS ;;
    f64_tests) MARK= gpu_tests 120 f64_tests tests/test_cuda_float64_scalars.py tests/test_cuda_float64.py ;;
    layers_tests3) MARK= gpu_tests 120 layers_tests3 tests/test_cuda_tensor_ops_fast.py tests/test_cuda_lrn_fast.py \
                       tests/test_cuda_group_norm_resident.py ;;
    flat_sweep2) timeout 180 python3 benchmarks/sweep_gluon_wgrad.py --no-canary --no-tridnn --narrow --configs 21,24,25,26 \
                     --layers res3_1x1c,res3_1x1r,res4_1x1c,res5_1x1r --budget-s 150 --out "$R/flat2" > "$R/flat2.log" 2>&1
                 echo "flat_sweep2 rc=$?"; grep -E "cudnn|flat|^res" "$R/flat2.log" | grep -v "^ " | cut -c1-120 | tail -70 ;;
    res5_sweep) timeout 180 python3 benchmarks/sweep_gluon_wgrad.py --no-canary --no-tridnn --configs 3,4,11,12 \
                    --layers res5_3x3,res5_3x3s2,res5_ds --budget-s 150 --out "$R/res5" > "$R/res5.log" 2>&1
                echo "res5_sweep rc=$?"; grep -E "cudnn|^res|x" "$R/res5.log" | grep -v "^ " | cut -c1-120 | tail -70 ;;
    tf32_strided) timeout 130 python3 benchmarks/sweep_gluon_conv.py --dtype float32 --strided --budget-s 90 \
                      --out "$R/tf32s" > "$R/tf32s.log" 2>&1
                  echo "tf32_strided rc=$?"; tail -40 "$R/tf32s.log" | cut -c1-140 ;;
    layers_tests4) MARK= gpu_tests 150 layers_tests4 tests/test_cuda_group_norm_resident.py tests/test_cuda_lrn_fast.py ;;
    layers_tests2) MARK= gpu_tests 300 layers_tests2 $LAYER_TESTS -k "$LAYER_TESTS_REST" ;;
    dw_profile) timeout 150 python3 benchmarks/profile_gpu_conv_kernels.py --direction bwd_filter \
                    --layers dw32_112,dw192_28,dw384_14,dw576_14s2,dw960_7 > "$R/dw_profile.log" 2>&1
                echo "dw_profile rc=$?"; cut -c1-120 "$R/dw_profile.log" | tail -80 ;;
    pool_diag) timeout 120 python3 benchmarks/diag_avg_pool_backward.py > "$R/pool_diag.log" 2>&1
               echo "pool_diag rc=$?"; cut -c1-400 "$R/pool_diag.log" | tail -40 ;;
    conv1) TRIDNN_S2D_WGRAD=1 suite conv1_s2d 100 rn50-fwd,rn50-bwd_data,rn50-bwd_filter,fused --layers conv1
           TRIDNN_S2D_WGRAD=0 suite conv1_plain 60 rn50-bwd_filter --layers conv1 ;;
    fp32_tf32) suite fp32_tf32 "${SUITE_S:-190}" fp32-tf32 ;;
    fp32_strict) suite fp32_strict "${SUITE_S:-190}" fp32-strict ;;
    fp32_default_wgrad) suite fp32_default_wgrad "${SUITE_S:-190}" fp32-default-bwd_filter ;;
    dw_fwd) suite dw_fwd "${SUITE_S:-190}" dw-fwd ;;
    dw_dgrad) suite dw_dgrad "${SUITE_S:-190}" dw-bwd_data ;;
    dw_gluon_tests) gpu_tests "${TESTS_S:-150}" dw_gluon_tests tests/test_conv_depthwise_gluon.py ;;
    dw_wgrad_tests) gpu_tests "${TESTS_S:-150}" dw_wgrad_tests tests/test_conv_depthwise_gluon_wgrad.py ;;
    dw_wgrad) suite dw_wgrad "${SUITE_S:-190}" dw-bwd_filter ;;
    dw_kinds) for a in ${DW_ALGOS:-ALGO_1 ALGO_0}; do for k in tiles pointer; do  # each kernel family's own times
                timeout 100 python3 benchmarks/profile_gpu_conv_kernels.py --direction bwd_filter --algo $a \
                    --layers dw192_28s2,dw384_14,dw576_14s2,dw960_7 --calls 10 --dw-wgrad-kind $k > "$R/dw_kinds_${a}_$k.log" 2>&1
                echo "dw_kinds $a $k rc=$?"; grep -E "^dw|tridnn:|cuDNN:|^    " "$R/dw_kinds_${a}_$k.log" | cut -c1-110
              done; done ;;  # (the rows kind is not offered on these small maps)
    dw_tiles) L=dw144_56s2,dw192_28,dw192_28s2,dw384_14,dw576_14,dw576_14s2,dw960_7
              TRIDNN_DW_WGRAD_TILES_MAX_PIXELS=0 suite dw_tiles_off "${SUITE_S:-120}" dw-bwd_filter --layers $L
              suite dw_tiles_on "${SUITE_S:-120}" dw-bwd_filter --layers $L ;;
    nan_pool_probe) timeout 120 python3 benchmarks/probe_cudnn_nan_pool.py > "$R/nan_pool_probe.log" 2>&1
                    echo "nan_pool_probe rc=$?"; tail -20 "$R/nan_pool_probe.log" | cut -c1-160 ;;
    dw_wgrad_sweep) timeout "${SWEEP_S:-200}" python3 benchmarks/sweep_depthwise_wgrad.py --out "$R/dw_wgrad_sweep" \
                        --layers dw32_112,dw144_56,dw192_28,dw384_14,dw576_14,dw960_7 --budget-s $(( ${SWEEP_S:-200} - 40 )) \
                        > "$R/dw_wgrad_sweep.log" 2>&1
                    echo "dw_wgrad_sweep rc=$?"; sed -n '/^layer  *floor/,$p' "$R/dw_wgrad_sweep.log" | cut -c1-160
                    grep -E "^dw[0-9_]+ +(gluon|cuDNN)" "$R/dw_wgrad_sweep.log" | cut -c1-110 ;;
    dilated) suite dilated "${SUITE_S:-190}" dil-fwd,dil-bwd_data,dil-bwd_filter ;;
    wino_profile) timeout 120 python3 benchmarks/profile_gpu_conv_kernels.py --suite resnet50 --direction fwd --dtype float32 --math FMA --layers res3_3x3,res4_3x3,res5_3x3 --calls 10 > "$R/wino_profile.log" 2>&1
                  echo "wino_profile rc=$?"; cut -c1-150 "$R/wino_profile.log" | tail -60 ;;
    new_algo_tests) gpu_tests "${TESTS_S:-240}" new_algo_tests tests/test_cuda_winograd_f4.py \
                        tests/test_cuda_bwd_data_as_forward.py tests/test_cuda_bwd_filter_fft.py \
                        tests/test_cuda_bwd_filter_winograd.py tests/test_cuda_fft_tiling.py \
                        tests/test_cuda_bwd_filter_gemm.py ;;
    new_algos) timeout 300 python3 benchmarks/bench_gpu_conv.py --out "$R/new_algos" --sections rn50-bwd_data,rn50-bwd_filter \
                   --layers res2_3x3,res3_3x3,res4_3x3,res5_3x3 --algos all --budget-s 270 > "$R/new_algos.log" 2>&1
               echo "new_algos rc=$?"; tail -40 "$R/new_algos.log" | cut -c1-150 ;;
    fp32_bwd) timeout "${SUITE_S:-250}" python3 benchmarks/bench_gpu_conv.py --out "$R/fp32_bwd" \
                  --sections fp32-strict-bwd_data,fp32-strict-bwd_filter,fp32-default-bwd_data,fp32-default-bwd_filter \
                  --layers res2_3x3,res3_3x3,res4_3x3,res5_3x3 --algos all --budget-s $(( ${SUITE_S:-250} - 30 )) > "$R/fp32_bwd.log" 2>&1
              echo "fp32_bwd rc=$?"; grep -E "^fp32|^\| fp32|budget" "$R/fp32_bwd.log" | cut -c1-400 ;;
    conv1_rows) timeout "${SUITE_S:-200}" python3 benchmarks/bench_gpu_conv.py --out "$R/conv1_rows" \
                  --sections fp32-default-bwd_filter,fp32-tf32-bwd_filter,rn50-bwd_filter --layers conv1 \
                  --algos all --budget-s $(( ${SUITE_S:-200} - 30 )) > "$R/conv1_rows.log" 2>&1  # ALGO_0 with the rows kernel
                echo "conv1_rows rc=$?"; grep -E "conv1|budget" "$R/conv1_rows.log" | cut -c1-400 ;;
    conv1_fwd_all) timeout "${SUITE_S:-150}" python3 benchmarks/bench_gpu_conv.py --out "$R/conv1_fwd_all" \
                  --sections rn50-fwd,fp32-tf32-fwd --layers conv1 --algos all --budget-s $(( ${SUITE_S:-150} - 30 )) \
                  > "$R/conv1_fwd_all.log" 2>&1  # GEMM's matmul with the spill-free tiles
                   echo "conv1_fwd_all rc=$?"; grep -E "conv1|budget" "$R/conv1_fwd_all.log" | cut -c1-400 ;;
    large) timeout "${LARGE_S:-300}" python3 benchmarks/gpu_large_tensors.py --out "$R/large" --time-budget-s $(( ${LARGE_S:-300} - 30 )) > "$R/large.log" 2>&1
           echo "large rc=$?"; tail -25 "$R/large.log" | cut -c1-160 ;;
    large_fft) timeout "${LARGE_S:-150}" python3 benchmarks/gpu_large_tensors.py --out "$R/large_fft" --only FFT \
                 --time-budget-s $(( ${LARGE_S:-150} - 20 )) > "$R/large_fft.log" 2>&1  # the FFT methods only (H200: their workspaces)
               echo "large_fft rc=$?"; grep -E "^  conv|checks," "$R/large_fft.log" | cut -c1-160 ;;
    fuzz) timeout "${FUZZ_S:-300}" python3 benchmarks/fuzz_gpu.py --out "$R/fuzz" --workers 4 --time-budget-s $(( ${FUZZ_S:-300} - 40 )) ${FUZZ_ARGS:-} > "$R/fuzz.log" 2>&1
          echo "fuzz rc=$?"; tail -25 "$R/fuzz.log" | cut -c1-160 ;;
    new_tests_par) T="${TESTS_S:-240}"  # new_algo_tests but f4, in four parallel pytest processes
                   gpu_tests "$T" nt_data tests/test_cuda_bwd_data_as_forward.py > "$R/nt_data.txt" 2>&1 &
                   gpu_tests "$T" nt_fft tests/test_cuda_bwd_filter_fft.py > "$R/nt_fft.txt" 2>&1 &
                   gpu_tests "$T" nt_tiling tests/test_cuda_fft_tiling.py > "$R/nt_tiling.txt" 2>&1 &
                   gpu_tests "$T" nt_wino_gemm tests/test_cuda_bwd_filter_winograd.py tests/test_cuda_bwd_filter_gemm.py \
                       > "$R/nt_wino_gemm.txt" 2>&1 &
                   wait; cat "$R"/nt_*.txt ;;
    fft_bench) timeout "${SUITE_S:-200}" python3 benchmarks/bench_gpu_conv.py --out "$R/fft_bench" \
                   --sections fp32-strict-bwd_filter,dil-bwd_filter,fp32-strict-bwd_data,fp32-default-bwd_filter,fp32-default-bwd_data \
                   --layers res3_3x3,res5_3x3,aspp_d12 --algos all --budget-s $(( ${SUITE_S:-200} - 30 )) > "$R/fft_bench.log" 2>&1
               echo "fft_bench rc=$?"; grep -E "^fp32|^dil|^\| |budget" "$R/fft_bench.log" | cut -c1-400 ;;
    f4_tests) gpu_tests "${TESTS_S:-120}" f4_tests tests/test_cuda_winograd_f4.py ;;
    fma_tests) gpu_tests "${TESTS_S:-200}" fma_tests tests/test_gluon_fma.py ;;
    fma_sweep) timeout "${SWEEP_S:-170}" python3 benchmarks/sweep_gluon_conv.py --dtype fma --budget-s $(( ${SWEEP_S:-170} - 30 )) --out "$R/fma_sweep" > "$R/fma_sweep.log" 2>&1
               echo "fma_sweep rc=$?"; sed -n '/^layer /,$p' "$R/fma_sweep.log" | cut -c1-110 ;;
    fma_strided) timeout "${SWEEP_S:-170}" python3 benchmarks/sweep_gluon_conv.py --dtype fma --strided --budget-s $(( ${SWEEP_S:-170} - 30 )) --out "$R/fma_strided" > "$R/fma_strided.log" 2>&1
                 echo "fma_strided rc=$?"; sed -n '/^layer /,$p' "$R/fma_strided.log" | cut -c1-110 ;;
    fma_api) timeout "${SWEEP_S:-170}" python3 benchmarks/sweep_gluon_conv.py --dtype fma --api --directions fwd,bwd_data --budget-s $(( ${SWEEP_S:-170} - 30 )) --out "$R/fma_api" > "$R/fma_api.log" 2>&1
             echo "fma_api rc=$?"; sed -n '/^layer /,$p' "$R/fma_api.log" | cut -c1-140 ;;
    records_tests) gpu_tests 150 records_tests tests/test_gluon_integration.py tests/test_gluon_wgrad_integration.py -k "record" ;;
    replay_tests) gpu_tests "${TESTS_S:-120}" replay_tests tests/test_conv_replay.py ;;
    dry_tests) gpu_tests "${TESTS_S:-300}" dry_tests -rP tests/test_launch_record.py tests/test_conv_replay.py
               grep -E "^\('" "$R/dry_tests.log" | sort -u | cut -c1-150 ;;
    dry_par) T="${TESTS_S:-240}"  # dry_tests, each GPU case in its own pytest process (their compiles overlap)
             for d in fwd bwd_data bwd_filter; do for c in bf16-nhwc fp32-nchw bf16-nhwc-depthwise; do
               gpu_tests "$T" "dry_${d}_$c" -rP "tests/test_launch_record.py::test_gpu_replays_follow_new_data[$d-$c]" \
                   > "$R/dry_${d}_$c.txt" 2>&1 &
             done; done
             gpu_tests "$T" dry_replay tests/test_conv_replay.py > "$R/dry_replay.txt" 2>&1 &
             wait; cat "$R"/dry_*.txt; grep -hE "^\('" "$R"/dry_*.log | sort -u | cut -c1-150 ;;
    wino_grouped) TRIDNN_GPU_TESTS=1 timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider --gpu -m gpu -rf \
                      tests/test_cuda_winograd_grouped.py > "$R/wino_grouped.log" 2>&1  # every case, no -x: which factor fails
                  echo "wino_grouped rc=$?"; grep -E "^FAILED|passed|failed" "$R/wino_grouped.log" | cut -c1-160 ;;
    mma_audit) python3 benchmarks/audit_mma_layouts.py "$TRITON_CACHE_DIR" > "$R/mma_audit.log" 2>&1
               echo "mma_audit rc=$?"; head -30 "$R/mma_audit.log" | cut -c1-160; tail -1 "$R/mma_audit.log" ;;
    host) timeout 150 python3 benchmarks/bench_gpu_host_time.py --out "$R/host" > "$R/host.log" 2>&1
          echo "host rc=$?"; tail -12 "$R/host.log" | cut -c1-140 ;;
    *) echo "unknown step $1" ;;
  esac
}
lane() {  # lane GPU "steps": its output goes to its own log, printed after both lanes end
    export CUDA_VISIBLE_DEVICES=$1 R="$OUT/r$1"
    mkdir -p "$R"
    for s in $2; do step "$s"; done > "$R/lane.txt" 2>&1
}
if [ $# -ge 2 ]; then lane 0 "$1" & lane 1 "$2" & wait; else lane 0 "$1"; fi
for f in "$OUT"/r*/lane.txt; do echo "=== $f"; cat "$f"; done
cd "$OUT" && tar czf /tmp/all.tgz r* && rm -rf "$OUT"/r* && mv /tmp/all.tgz "$OUT/all.tgz"
