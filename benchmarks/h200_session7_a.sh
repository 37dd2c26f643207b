# Session 7 round A (2026-11-30 17:10 UTC, nvidia-h200-x2): stream-K sweep on GPU 0; Gluon conv sweep, its GPU tests and the depthwise forward sweep on GPU 1.
# Run from a snapshot: mkdir -p /tmp/base && tar xf build/base.tar -C /tmp/base && bash benchmarks/h200_session7_a.sh
ROOT=$PWD; cd /tmp/base
mkdir -p $OUT/g0 $OUT/g1
export PYTHONPATH=/tmp/base/src
(
 export CUDA_VISIBLE_DEVICES=0
 timeout 175 python3 benchmarks/sweep_conv_streamk.py --out $OUT/g0/sk1 > $OUT/g0/sk1.log 2>&1
 timeout 150 python3 benchmarks/sweep_conv_streamk.py --budget-s 100 --layers bwd_data:res5_1x1c,fwd:res5_3x3s2,fwd:res5_1x1c,fwd:res5_1x1a --out $OUT/g0/sk2 > $OUT/g0/sk2.log 2>&1
) &
(
 export CUDA_VISIBLE_DEVICES=1
 timeout 170 python3 benchmarks/sweep_gluon_conv.py --budget-s 130 --out $OUT/g1/gluon > $OUT/g1/gluon.log 2>&1
 TRIDNN_GPU_TESTS=1 timeout 100 python3 -m pytest -q -x -p no:cacheprovider --gpu tests/test_gluon_conv.py > $OUT/g1/gluon_tests.log 2>&1
 timeout 120 python3 benchmarks/sweep_depthwise_fwd.py --budget-s 80 --out $OUT/g1/dwf > $OUT/g1/dwf.log 2>&1
) &
wait
cd $OUT && tar czf all.tgz g0 g1 && rm -rf g0 g1/gluon g1/dwf g0
echo "== sk1"; tar xzf all.tgz -O g0/sk1.log | tail -40
echo "== sk2"; tar xzf all.tgz -O g0/sk2.log | tail -25
echo "== gluon"; tar xzf all.tgz -O g1/gluon.log | tail -60
echo "== gluon tests"; tar xzf all.tgz -O g1/gluon_tests.log | tail -8
echo "== dwf"; tar xzf all.tgz -O g1/dwf.log | tail -30
