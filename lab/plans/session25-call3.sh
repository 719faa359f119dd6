#!/usr/bin/env bash
# Session 25, device call 3 (issue 4; for the H200), after call 2 on an H100 (previous binary): XA=2 (activations
# loaded two quads ahead) read 2-5% faster on every 28 x 4 preset it was timed on (tiles 0.1282 vs 0.1311, packed
# 0.1286 vs 0.1351), and 32-row tile-major CTAs of 128-column batches at MINB=6 with XA=2 fastest (0.1259). XA=2 is
# now the automatic choice (this binary), so: one bench run of the 28 x 4 presets at the defaults (XA=2), XA=1 (the
# former default) and that point (every set checked; the report keeps the fastest that passes, all sets' times in
# the JSON), then cuBLAS in the same call.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=330 bash lab/plans/session25-call3.sh  (carry [".carry"], timeout_s 360)
W=/tmp/w25c3; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 30 $K check --backend cuda --op mxfp4_matmul --dims "G=28,per=4,N=6144,K=3584,tiles=1" \
  --knobs "BN=32,BK=128,MINB=6" --cases 1 > $OUT/check.txt 2>&1; echo "check rc=$? $(date -u +%T)" >> $L
tail -1 $OUT/check.txt >> $L
op mxfp4_matmul 230 60 --preset "$P28 tiles;$P28;$P28 situ_glu+p;$P28 mxfp8-act" \
  --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-200 | tail -16
