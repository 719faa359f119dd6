"""The table of lab/2026-12-07/mx-fp8-3/run.sh: one row per (variant, M) from `k3k bench`'s per-knob-set lines
("  custom DIMS  T ms rel E ok [knobs]", or "FAILED to run"), with cuBLAS bf16 and torch._scaled_mm FP8 rowwise
from peers.json (same run, same problems). Usage: python3 table.py bench.txt [peers.json]"""
import json, re, sys

lines = open(sys.argv[1]).read().splitlines()
peers = {}
try:
    for r in json.load(open(sys.argv[2])).get("rows", []):
        peers[(r["preset"], "fp8" if "scaled" in r["peer"] else "bf16")] = r["ms"]
except Exception as e:  # no peers (a call cut short, or no torch): the k3k rows alone
    print(f"(no peers: {e})")


def variant(kn):
    k = dict(p.split("=", 1) for p in kn.split(",") if "=" in p)
    if k.get("MMA") != "fp8":
        return "default"
    v = f"fp8 F8V={k.get('F8V', '0')}"
    for a in ["BM", "BN", "STAGES", "CPS"]:
        if k.get(a, "0") != "0":
            v += f" {a}={k[a]}"
    return v


print(f"{'variant':<34} {'M':>5} {'ms':>8} {'TFLOP/s':>8} {'xcuBLAS':>7} {'x_smm':>6}  check")
rows = []
for ln in lines:
    m = re.match(r"^  (custom \S+)\s+(\S+) ms rel (\S+) (ok|CHECK FAILED) \[(.*)\]", ln)
    f = re.match(r"^  (custom \S+)\s+FAILED to run \[(.*?)\]", ln)
    if not (m or f):
        continue
    preset = (m or f).group(1)
    mm = int(re.search(r"M=(\d+)", preset).group(1))
    n = int(re.search(r"N=(\d+)", preset).group(1))
    k = int(re.search(r"K=(\d+)", preset).group(1))
    if f:
        rows.append((mm, f"{variant(f.group(2)):<34} {mm:>5} {'-':>8} {'-':>8} {'-':>7} {'-':>6}  FAILED to run"))
        continue
    ms = float(m.group(2))
    tf = 2 * mm * n * k / (ms * 1e-3) / 1e12
    cb, sm = peers.get((preset, "bf16")), peers.get((preset, "fp8"))
    x = lambda p: f"{p / ms:7.2f}" if p else "      -"
    rows.append((mm, f"{variant(m.group(5)):<34} {mm:>5} {ms:8.4f} {tf:8.1f} {x(cb)} {x(sm)[1:]}  {m.group(3)} {m.group(4)}"))
for _, r in sorted(rows, key=lambda r: r[0]):
    print(r)
for (preset, kind), ms in sorted(peers.items()):
    mm, n, k = (int(re.search(rf"{d}=(\d+)", preset).group(1)) for d in "MNK")
    name = "cuBLAS bf16" if kind == "bf16" else "torch._scaled_mm fp8 rowwise"
    print(f"{'peer ' + name:<34} {mm:>5} {ms:8.4f} {2 * mm * n * k / (ms * 1e-3) / 1e12:8.1f}")
