#!/usr/bin/env bash
# Session 16, device call 9: the latent GEMM's group search guarded (once the tile's group is behind, the rest of
# the scan is a compare per group: call 8's ncu had the unguarded scan at ~830 instructions per warp per tile).
# `k3k check --backend cuda`, then a same-run A/B of two binaries at the defaults on the five presets, interleaved
# (before, after, before, after), torch._grouped_mm in the same call; a GPU fuzz with a box long enough to get past
# the precompile; the published run (committed records) with peers.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k (.carry/k3k-before: call 7's)
# Run: BUDGET_S=560 bash lab/plans/session16-call9.sh  (carry [".carry"], timeout_s 590)
W=/tmp/w16i; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 60 $K check --backend cuda --op latent_moe_gemm --cases 8 > $OUT/check.txt 2>&1; echo "check gemm rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
P="G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p"
for i in 1 2; do
  for bin in before after; do
    B=$K; [ $bin = before ] && B=.carry/k3k-before
    timeout 80 $B bench --op latent_moe_gemm --preset "$P" --results /nonexistent --out $W/ab-$bin-$i >> $OUT/ab.txt 2>&1
    echo "a/b $bin $i rc=$? $(date -u +%T)" >> $L
  done
done
tar czf $OUT/ab.tgz -C $W $(cd $W && ls -d ab-*)
op latent_moe_gemm 90 70 --preset "$P"
timeout 75 $K fuzz --backend cuda --op latent_moe_gemm --time 60s > $OUT/fuzz.txt 2>&1; echo "fuzz gemm rc=$? $(date -u +%T)" >> $L
tail -2 $OUT/fuzz.txt >> $L
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
python3 - $W <<'PY'
import json, glob, sys, collections
t = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/ab-*/*/latent_moe_gemm.json")):
    run = f.split("/")[-3]
    for r in json.load(open(f))["rows"]:
        t[r["preset"]][run] = r["k3k_ms"]
for p, v in t.items():
    print(f"{p[:34]:34} " + " | ".join(f"{k[3:]} {v[k]:.4f}" for k in sorted(v)))
PY
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
