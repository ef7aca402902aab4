#!/usr/bin/env bash
# Call 2: choose the long-memory weights, then (side by side, not timed) their memory measurements,
# the KL report (prefill 1024, 4096 tokens, 16 docs) and the downstream report.
set -uo pipefail
O=$OUT
source scripts/gpu/setup.sh
python3 .gpu/calls/select.py > $O/chosen.txt 2>&1
cat $O/chosen.txt
mkdir -p /tmp/c2
LONGMEM_LIMIT=520 bash scripts/gpu/longmem_report.sh --out /tmp/c2/measure gdn-long mamba2-long > /tmp/c2/measure.sh.log 2>&1 &
p1=$!
timeout 530 bash scripts/gpu/kl.sh --out /tmp/c2 --model gdn-long mamba2-long --parallel --docs 16 \
   --state nvfp4/int8+sr --state nvfp4/e4m3+sr > /tmp/c2/kl.sh.log 2>&1 &
p2=$!
DOWNSTREAM_LONG_LIMIT=520 bash scripts/gpu/downstream_long.sh --out /tmp/c2 > /tmp/c2/dsl.sh.log 2>&1 &
p3=$!
wait $p1; echo "measure exit $?" >> $O/chosen.txt
wait $p2; echo "kl exit $?" >> $O/chosen.txt
wait $p3; echo "dsl exit $?" >> $O/chosen.txt
tar -cf $O/measure.tar -C /tmp/c2 measure measure.sh.log
tar -cf $O/kl.tar --exclude=records -C /tmp/c2 kl kl.sh.log
tar -cf $O/dsl.tar -C /tmp/c2 downstream_long dsl.sh.log $(cd /tmp/c2 && ls downstream_long_*.log 2>/dev/null)
ls -la $O
