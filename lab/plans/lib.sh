# Shared helpers of the device-call plans (sourced; from session 14 on). Set W (work folder) before sourcing;
# BUDGET_S bounds the call. Defines K (the carried binary), OUT, L (the log), left(), pack(), op() and variants().
# At most 8 files come back from $OUT (device README, Limits): op() writes log.txt, bench.txt, peers.txt,
# bench.tgz and results.tgz; a plan adds at most three more (tar the rest into one).
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; rm -rf "$W"; mkdir -p "$W" "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
# Everything under $W/b (reports) and $W/results (tuned records), packed after each step.
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; [ -d $W/results ] && tar czf $OUT/results.tgz -C $W results 2>/dev/null; }
# op NAME BENCH_S PEERS_S [bench args...]: bench the operator's presets (records of $W/results where present, else
# the defaults), then its peers in the same call, merged into the reports of $W/b/NAME.
op() { local name=$1 bt=$2 pt=$3; shift 3; local dir=$W/b/$name
  [ "$(left)" -lt 40 ] && { echo "no time for $name" >> $L; return; }
  local res=$W/results; [ -d $res ] || res=/nonexistent
  timeout $bt $K bench --op $name --results $res --out $dir "$@" >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
# variants DIR KEY...: every knob set a `k3k bench --knobs "A;B"` run under DIR timed, per preset: its ms (or
# "failed") and the values of the named knobs (from session 18 on).
variants() { python3 - "$@" <<'PY'
import json, glob, sys
keys = set(sys.argv[2:])
for f in sorted(glob.glob(sys.argv[1] + "/**/*.json", recursive=True)):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30])
        for kn, ms in r.get("variants", []):
            print("  %s" % ("%.4f" % ms if ms is not None else "failed"), ",".join(f"{k}={v}" for k, v in kn.items() if k in keys))
PY
}
# xp EXPERIMENT TAG PRESET [KNOBS]: one `k3k bench` of mxfp4_matmul (under K3K_EXPERIMENT=EXPERIMENT when it is not
# empty) into $W/xp/EXPERIMENT-TAG; its rows (the preset's name up to its first 40 characters) go to $W/xp.txt
# (from session 27 on; sessions 22-26 defined their own copies).
xp() { mkdir -p $W/xp; timeout ${XP_S:-50} env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$3" \
  --results /nonexistent --out $W/xp/${1:-base}-$2 ${4:+--knobs "$4"} > $W/xp.log 2>&1
  echo "xp ${1:-base} $2 rc=$? $(date -u +%T)" >> $W/xp.txt; grep -F -- "${3:0:40}" $W/xp.log | cut -c1-170 >> $W/xp.txt; }
# ncu_mxfp4 PRESET KNOBS: ncu of one launch of the mxfp4 kernel at those knobs, appended to $OUT/ncu.txt.
ncu_mxfp4() { echo "== ncu $2" >> $OUT/ncu.txt
  timeout ${NCU_S:-60} ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats \
    $K bench --op mxfp4_matmul --preset "$1" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb \
    >> $OUT/ncu.txt 2>&1; echo "ncu $2 rc=$? $(date -u +%T)" >> $L; }
# checks_mxfp4: 10 random GPU cases of mxfp4_matmul into $OUT/check.txt, then 2 cases each of the tile-major and the
# SiTU-GLU + p 28 x 4 problems; the last line of each goes to the log (from session 27 on).
checks_mxfp4() { timeout 80 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
  echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
  for d in "G=28,per=4,N=6144,K=3584,tiles=1" "G=28,per=4,N=6144,K=3584,packed=1,epilogue=1,p=1"; do
    timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "$d" --cases 2 2>&1 | tail -1 | sed "s/^/[$d] /" >> $L
  done; }
# tune_rest PRESET: `k3k tune` of mxfp4_matmul's PRESET (at most 64 candidates) into $W/results with the budget left
# less 20 s, if that is over 60 s; its table row goes to the log.
tune_rest() { local t=$(( $(left) - 20 )); [ $t -gt 60 ] || return 0
  timeout $(( t + 10 )) $K tune --op mxfp4_matmul --preset "$1" --budget ${t}s --max-candidates 64 \
    --results $W/results > $W/tune.log 2>&1; echo "tune rc=$? $(date -u +%T)" >> $L
  grep -E "^mxfp4_matmul " $W/tune.log | cut -c1-220 >> $L; pack; }
# summary: a call's last output: the log, the timed bench rows and the ncu figures that matter for the decode.
summary() { echo "end $(date -u +%T)" >> $L; cut -c1-220 $L
  grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-200 | tail -20
  grep -iE "^== ncu|DRAM Throughput|L2 Cache Throughput|Duration|L2 Hit Rate|Warp Cycles Per Issued|No Eligible" \
    $OUT/ncu.txt | head -16; }
# ncu_rate TAG CACHE SEL WHAT KNOBS [EXPERIMENT]: ncu's rate metrics (duration, SM clock, instructions, issue slots,
# eligible warps, L2 hit rate and bytes, DRAM bytes) of the 5th launch of the mxfp4 kernel in a `k3k bench` of
# `--SEL WHAT` (SEL preset or dims) at KNOBS (under K3K_EXPERIMENT=EXPERIMENT when given), appended to
# $OUT/ncu-rate.txt (ncu's CSV lines; lab/plans/session28-rates.py tabulates them). CACHE: `all` (ncu flushes
# the caches before the launch, as k3k bench does) or `none` (the L2 keeps what the launches before it read; with
# NCU_X="--replay-mode application" no save and restore of memory between passes evicts it, so operands that fit in
# L2 are read from there). NCU_X: more ncu arguments. From session 28 on.
NCU_M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,smsp__inst_executed.sum,\
smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,\
smsp__warps_active.avg.per_cycle_active,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,dram__bytes_read.sum,\
dram__bytes_write.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
ncu_rate() { echo "== $1 cache=$2 $3=$4 knobs=$5 exp=${6:-none}" >> $OUT/ncu-rate.txt
  timeout ${NCU_S:-60} env ${6:+K3K_EXPERIMENT=$6} ncu --clock-control none --cache-control $2 \
    --kernel-name "regex:mxfp4_mm" --launch-skip 4 --launch-count 1 --metrics $NCU_M --csv --print-units base \
    ${NCU_X:-} \
    $K bench --op mxfp4_matmul --$3 "$4" --knobs "$5" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb \
    >> $OUT/ncu-rate.txt 2>&1; echo "ncu $1 rc=$? $(date -u +%T)" >> $L; }
# mps_start / mps_stop: an MPS daemon (pipe and log under /tmp), so that `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=P` gives
# each process run under it about P% of the SMs (torch then sees that many). mps_stop unsets the percentage and
# quits the daemon. From session 28 on.
mps_start() { export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d >> $L 2>&1; echo "mps daemon rc=$? $(date -u +%T)" >> $L; }
mps_stop() { unset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; echo quit | nvidia-cuda-mps-control >> $L 2>&1; }
# size_sweep [KNOBS [NOREAD]]: the tile-major decode (N=6144 K=3584, 4 tokens per expert) at 14 / 28 / 56 / 112
# experts at KNOBS (default: auto and BN=32 BK=128 MINB=6) and, unless NOREAD is given, the read floor of the same
# bytes, into the log. The differences between sizes give each kernel's steady rate without its fixed costs (launch,
# ramp, tail). From session 28 on.
size_sweep() { local d="" g kn=${1:-PATH=auto;BN=32,BK=128,MINB=6}; for g in 14 28 56 112; do
    d="$d;G=$g,per=4,N=6144,K=3584,tiles=1"; done
  [ -z "${2:-}" ] && { timeout 100 python3 lab/plans/session28-read-328.py 14 28 56 112 >> $L 2>&1 \
    || echo "read rc=$?" >> $L; }
  timeout 200 $K bench --op mxfp4_matmul --dims "${d#;}" --knobs "$kn" --results /nonexistent --out $W/b/sizes \
    > $W/sizes.txt 2>&1; echo "bench sizes rc=$? $(date -u +%T)" >> $L
  grep -E "^  .*ms rel" $W/sizes.txt | cut -c1-110 >> $L; cat $W/sizes.txt >> $OUT/bench.txt; }
# pm_sample TAG PRESET KNOBS: ncu's PM samples (`--section PmSampling`, caches flushed, clocks left alone) of the 5th
# mxfp4 launch of a `k3k bench` of PRESET at KNOBS; the series (DRAM read, CTAs launched, SM cycles, instructions)
# into $OUT/pm-TAG.txt, its lost-DRAM-time split into the log, the report in $W/TAG.ncu-rep. From session 29 on
# (session29-call1.sh has its own copy, as run).
pm_sample() { local tag=$1 preset=$2 kn=$3
  timeout 60 ncu --section PmSampling --clock-control none --cache-control all --kernel-name "regex:mxfp4_mm" \
    --launch-skip 4 --launch-count 1 -o $W/$tag $K bench --op mxfp4_matmul --preset "$preset" --knobs "$kn" \
    --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/$tag.log 2>&1; echo "ncu $tag rc=$? $(date -u +%T)" >> $L
  timeout 30 python3 lab/plans/session29-pm-raw.py $W/$tag.ncu-rep TriageCompute.dramc__read_throughput \
    gr__ctas_launched sm__cycles_active.avg sm__inst_executed_realtime.avg.pct > $OUT/pm-$tag.txt 2>&1
  echo "dump $tag rc=$? $(wc -l < $OUT/pm-$tag.txt) lines" >> $L
  python3 lab/plans/session29-pm-loss.py $OUT/pm-$tag.txt >> $L 2>&1; }
