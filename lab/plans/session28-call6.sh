#!/usr/bin/env bash
# RAN as session 28's call 7, on an H100 (lab/2026-12-05/1937-h100-run/). Its summary labels are
# shifted: each tag's figures are under the "mxfp4_matmul on ..." line that k3k bench printed after it.
# Session 28, call 6 (issue 4): is the decode heavier on the L2 than a pure read of the same bytes? On the H100 in
# session 26 the decode's L2 throughput (79.9% of peak) followed its DRAM throughput (83.4%). The H200 has the same
# L2 design and clock and 1.43x the DRAM bandwidth: a kernel whose L2 load per DRAM byte is near the H100's L2 limit
# would hit the L2's limit on the H200 first, at about 1.25x the H100's rate, which is about where session 24's H200
# decode stopped (3.15 TB/s against the H100's 2.62). The pure read reaches 3.87 TB/s there. ncu's breakdown of the
# L2 and DRAM throughput (every sub-metric as a % of its peak) for the decode (auto, BN=32, BN=128, packed) and for
# session 10's Triton read of the same 327.5 MB (its 21st launch) says which L2 unit each one loads how much.
# On an H200: session28-call3.sh (the H200 plan) instead.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session28-call6.sh  (carry [".carry"], timeout_s 330, kind nvidia-h200)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  exec bash lab/plans/session28-call3.sh
fi
W=/tmp/w28c6; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
M=breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,gpu__time_duration.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_ltcfabric.sum
M=$M,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second
# l2 TAG KERNEL_REGEX SKIP CMD...: one profiled launch, CSV into $OUT/l2.txt.
l2() { local tag=$1 re=$2 skip=$3; shift 3; echo "== $tag" >> $OUT/l2.txt
  timeout 90 ncu --clock-control none --cache-control all --kernel-name "regex:$re" --launch-skip $skip \
    --launch-count 1 --metrics $M --csv --print-units base "$@" >> $OUT/l2.txt 2>&1
  echo "ncu $tag rc=$? $(date -u +%T)" >> $L; }
l2 read-floor read_sum 20 python3 lab/plans/session28-read-328.py
for kn in PATH=auto "BN=32,BK=128,MINB=6" "BN=128,BK=128,MINB=2"; do [ "$(left)" -gt 60 ] || break
  l2 "tiles $kn" mxfp4_mm 4 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$kn" --reps 1 --window-ms 0 \
    --results /nonexistent --out $W/pb
done
[ "$(left)" -gt 40 ] && l2 "packed auto" mxfp4_mm 4 $K bench --op mxfp4_matmul --preset "$P28" --knobs PATH=auto \
  --reps 1 --window-ms 0 --results /nonexistent --out $W/pb
python3 - $OUT/l2.txt <<'PY' | tee -a $L
import csv, sys
blocks, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("== ") and " on NVIDIA" not in line:
        cur = (line[3:].strip(), {}); blocks.append(cur)
    elif line.startswith('"') and cur:
        r = next(csv.reader([line]))
        if r[-3] != "Metric Name":
            try: cur[1][r[-3]] = float(r[-1].replace(",", ""))
            except ValueError: pass
for tag, m in blocks:
    b = 28 * 6144 * (1792 + 112)  # weights + scales: the read floor's bytes
    print("== %s: %.1f us, L2 bytes %.2fx, from SMs %.2fx, over the fabric %.2fx, DRAM read %.2fx, hit %.1f%%" % (
        tag, m.get("gpu__time_duration.sum", 0) / 1e3, m.get("lts__t_bytes.sum", 0) / b,
        m.get("lts__t_sectors_srcunit_tex.sum", 0) * 32 / b, m.get("lts__t_sectors_srcunit_ltcfabric.sum", 0) * 32 / b,
        m.get("dram__bytes_read.sum", 0) / b, m.get("lts__t_sector_hit_rate.pct", 0)))
    for k, v in sorted(((k, v) for k, v in m.items() if "pct_of_peak" in k), key=lambda kv: -kv[1])[:8]:
        print("   %6.1f%%  %s" % (v, k))
PY
echo "end $(date -u +%T)" >> $L; cat $L
