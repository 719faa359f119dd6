"""The table of lab/2026-12-07/mx-fp8-pp/run.sh: one row per (variant, problem) from `k3k bench`'s per-knob-set
lines ("  custom DIMS  T ms rel E ok [knobs]", or "FAILED to run"), the problem's FLOPs from the bench reports,
and the peers of the same run and problems from the peers files (cuBLAS bf16 / torch._grouped_mm bf16, and
torch._scaled_mm / _scaled_grouped_mm FP8 rowwise). Usage: python3 table.py WORK (bench*.txt, peers*.json and the
reports under it)"""
import glob, json, os, re, sys

w = sys.argv[1]
flops, peers = {}, {}
for f in glob.glob(os.path.join(w, "**", "mxfp4_matmul.json"), recursive=True):
    try:
        for r in json.load(open(f)).get("rows", []):
            flops[r["preset"]] = r.get("flops")
    except Exception as e:  # a report cut short: say so, keep going
        print(f"(unreadable {f}: {e})")
for f in sorted(glob.glob(os.path.join(w, "peers*.json"))):
    try:
        for r in json.load(open(f)).get("rows", []):
            if r.get("ms"):
                peers[(r["preset"], "fp8" if "scaled" in r["peer"] else "bf16")] = (r["peer"], r["ms"])
    except Exception as e:  # no peers (a call cut short, or no torch): the k3k rows alone
        print(f"(no peers in {f}: {e})")


def variant(kn):
    k = dict(p.split("=", 1) for p in kn.split(",") if "=" in p)
    if k.get("MMA") != "fp8":
        return "default"
    v = f"fp8 F8V={k.get('F8V', '0')}"
    for a in ["BM", "BN", "STAGES", "CPS", "TURN"]:
        if k.get(a, "0") != "0":
            v += f" {a}={k[a]}"
    return v


def short(preset):
    g = re.search(r"G=(\d+),mean=(\d+)", preset)
    s = f"G{g.group(1)}x{g.group(2)}" if g else "M" + re.search(r"M=(\d+)", preset).group(1)
    # The GLU epilogue and routing weight (the MoE's first GEMM): its own rows.
    return s + ("+glu" if re.search(r"epilogue=[12]", preset) else "") + ("+p" if re.search(r"\bp=1", preset) else "")


print("(x bf16 = the bf16 peer's ms / k3k ms: cuBLAS dense, torch._grouped_mm grouped; x fp8 = torch._scaled_mm")
print(" or _scaled_grouped_mm FP8 rowwise; both peers timed in this run on the same problems)")
print(f"{'variant':<36} {'problem':>15} {'ms':>8} {'TFLOP/s':>8} {'x bf16':>7} {'x fp8':>6}  check")
rows = []
for f in sorted(glob.glob(os.path.join(w, "bench*.txt"))):
    for ln in open(f).read().splitlines():
        m = re.match(r"^  (custom \S+)\s+(\S+) ms rel (\S+) (ok|CHECK FAILED) \[(.*)\]", ln)
        e = re.match(r"^  (custom \S+)\s+FAILED to run \[(.*?)\]", ln)
        if not (m or e):
            continue
        preset = (m or e).group(1)
        if e:
            rows.append(f"{variant(e.group(2)):<36} {short(preset):>15} {'-':>8} {'-':>8} {'-':>7} {'-':>6}  FAILED to run")
            continue
        ms = float(m.group(2))
        fl = flops.get(preset)
        tf = f"{fl / (ms * 1e-3) / 1e12:8.1f}" if fl else "       -"
        cb, sm = peers.get((preset, "bf16")), peers.get((preset, "fp8"))
        x = lambda p: f"{p[1] / ms:7.2f}" if p else "      -"
        rows.append(f"{variant(m.group(5)):<36} {short(preset):>15} {ms:8.4f} {tf} {x(cb)} {x(sm)[1:]}  {m.group(3)} {m.group(4)}")
for r in rows:
    print(r)
for (preset, _), (name, ms) in sorted(peers.items()):
    fl = flops.get(preset)
    tf = f"{fl / (ms * 1e-3) / 1e12:8.1f}" if fl else "       -"
    print(f"{'peer ' + name[:25]:<36} {short(preset):>15} {ms:8.4f} {tf}")
