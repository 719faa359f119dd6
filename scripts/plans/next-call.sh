#!/usr/bin/env bash
# Ready for the next session's first device call (written at the end of session 17, which had no device time left
# after its last code change): the MXFP4 gemv as committed (the staged ring's FAST form compiled for 8-token tiles
# only, the general form on `n % S` again; this exact build has not run on a GPU) checked with `k3k check --backend
# cuda` (random cases; the FAST form at a many-tile shape with and without SiTU-GLU; the general form on partial
# tiles with 33-byte scale rows; M16), then the bench of every mxfp4 preset with cuBLAS in the same call (publish
# it: the README's s17 rows and call 7's A/B), then a GPU fuzz. Rename it to the session's call name when it runs,
# and commit its output under results/bench/nvidia-h200/. At most 8 files under $OUT.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=330 bash scripts/plans/next-call.sh  (carry [".carry"], timeout_s 350)
W=/tmp/wnext; source scripts/plans/lib.sh
C=$OUT/check.txt
ck() { timeout $1 $K check --backend cuda --op mxfp4_matmul "${@:2}" >> $C 2>&1; echo "check ${*:2} rc=$? $(date -u +%T)" | cut -c1-200 >> $L; }
ck 60 --cases 16
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1" --cases 2
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1,epilogue=1,p=1" --cases 2
ck 30 --dims "G=3,per=4,N=200,K=1056,packed=1" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "G=3,per=3,N=256,K=1056,packed=0" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "M=16,N=200,K=2048,packed=1" --cases 3
grep -iE "fail|error|mismatch" $C | grep -v " 0 fail" | head -5 >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
op mxfp4_matmul 100 70
rm -f $OUT/results.tgz
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op mxfp4_matmul --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
