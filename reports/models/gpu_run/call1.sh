#!/usr/bin/env bash
# Call 1: train two recipes of both long-memory models side by side (4 processes) while the GPU
# correctness tests of the speculative kernels run beside them (not timed).
set -uo pipefail
O=$OUT
source scripts/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $O/smi.txt 2>&1
git log -1 --format='commit %H %s' >> $O/smi.txt 2>/dev/null || true
date -u >> $O/smi.txt
RA="--task-fraction 0.75 --task-curriculum 0.4 --long-dt-max 1 --task-count-share 0.5"
RB="--task-fraction 0.85 --task-curriculum 0.4 --long-dt-max 1 --task-count-share 0.25"
mkdir -p /tmp/oA /tmp/oB
TRAIN_LONG_WORK=/tmp/tlA TRAIN_LONG_RECIPE="$RA" bash scripts/gpu/train_long.sh --out /tmp/oA > /tmp/oA/sh.log 2>&1 &
pa=$!
TRAIN_LONG_WORK=/tmp/tlB TRAIN_LONG_RECIPE="$RB" bash scripts/gpu/train_long.sh --out /tmp/oB --seed 1 > /tmp/oB/sh.log 2>&1 &
pb=$!
( nvidia-smi dmon -s u -d 15 -c 30 > /tmp/oA/dmon.txt 2>&1 ) &
timeout 300 python3 -m pytest -q -n 4 -p no:cacheprovider tests/kernels/test_spec_decode.py tests/kernels/test_verify_fast_decay.py tests/kernels/test_decode.py > $O/gpu_tests.txt 2>&1
echo "pytest exit $?" >> $O/gpu_tests.txt
wait $pa; echo "A exit $?" >> /tmp/oA/sh.log
wait $pb; echo "B exit $?" >> /tmp/oB/sh.log
for r in A B; do
  for a in gdn-long mamba2-long; do [ -f /tmp/o$r/$a.tar ] && cp /tmp/o$r/$a.tar $O/${a}_$r.tar; done
done
tar -cf $O/logs.tar -C /tmp oA/sh.log oA/run.txt oA/gdn-long_train.log oA/mamba2-long_train.log oA/dmon.txt oB/sh.log oB/run.txt oB/gdn-long_train.log oB/mamba2-long_train.log 2>/dev/null
ls -la $O
