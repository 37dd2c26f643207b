#!/usr/bin/env bash
# Host time of repeated convolution calls (launches stubbed), this tree against another,
# in alternating processes: the 2-core CI machine's speed drifts by up to 2x within minutes
# (the same code, the "key" row, ran 6.7-13.4 us), so one run of each tree compares noise.
# Each process prints the min over 7 x 1000 calls per case; take the min per tree over rounds.
#
#   git archive <commit> | tar x -C /tmp/old
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bash benchmarks/ab_conv_host_overhead.sh /tmp/old [rounds]
set -u
OLD=$1
ROUNDS=${2:-6}
cd "$(dirname "$0")/.."
for _ in $(seq "$ROUNDS"); do
  for tree in "$PWD" "$OLD"; do
    TRITON_INTERPRET=1 PYTHONPATH="$tree/src" python -c "
import sys; sys.path.insert(0, '$tree/benchmarks')
import bench_conv_host_overhead as b
full, _ = b.launch_key_case()
cases = {'fwd': b.triton_case(), 'dgrad1': b.triton_backward_case('bwd_data', 'ALGO_1'),
         'wgrad1': b.triton_backward_case('bwd_filter', 'ALGO_1'), 'wgrad0': b.triton_backward_case('bwd_filter', 'ALGO_0'),
         'dwfwd': b.depthwise_case('fwd', 'DIRECT'), 'dwdgrad1': b.depthwise_case('bwd_data', 'ALGO_1'),
         'dwwgrad1': b.depthwise_case('bwd_filter', 'ALGO_1'), 'dwwgrad0': b.depthwise_case('bwd_filter', 'ALGO_0'),
         'key': full}  # key: the same code in both trees (the machine's speed)
for f in cases.values():
    for _ in range(4):  # the full path, the first repeat, the record
        f()
print('$tree', ' '.join(f'{n}={min(b.per_call_us(f, 1000) for _ in range(7)):.2f}' for n, f in cases.items()), flush=True)
"
  done
done
