"""Session 28: print the PM-sampling series of an ncu report (ncu --section PmSampling -o REP), downsampled.

For every metric of the report's first kernel that has many instances (the sampled series), prints its name, the
instance count and 40 evenly spaced values, so the ramp, the plateau and the drain of a kernel can be read as text.
With `--full SUBSTR...`: instead, every sample from the first to the last with SM cycles active, one row per sample,
one column per metric whose name contains one of the SUBSTRs.
Usage: python3 session28-pm-dump.py REP.ncu-rep [--full SUBSTR...] (run where ncu is installed: its extras/python holds
ncu_report)"""
import glob
import os
import shutil
import sys

ncu = os.path.realpath(shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
for cand in glob.glob(os.path.join(os.path.dirname(ncu), "**", "extras", "python"), recursive=True) + glob.glob(
        "/opt/nvidia/nsight-compute/*/extras/python") + glob.glob("/usr/local/cuda*/nsight-compute*/extras/python"):
    sys.path.insert(0, cand)
import ncu_report  # noqa: E402

ctx = ncu_report.load_report(sys.argv[1])
action = ctx[0][0]
print("kernel", action.name()[:90])


def series(m):
    out = []
    for i in range(m.num_instances()):
        try:
            out.append(m.as_double(i))
        except Exception:
            out.append(float("nan"))
    return out


if "--full" in sys.argv:
    subs = sys.argv[sys.argv.index("--full") + 1:]
    names = [n for n in sorted(action.metric_names()) if any(s in n for s in subs) and action[n].num_instances() >= 8]
    cols = {n: series(action[n]) for n in names}
    active = next(v for n, v in cols.items() if "sm__cycles_active" in n)
    live = [i for i, v in enumerate(active) if v > 0]
    print("sample " + " ".join(n.split(".")[2] if n.count(".") > 2 else n for n in names))
    for i in range(live[0], live[-1] + 1):
        print(f"{i - live[0]:4d} " + " ".join(f"{cols[n][i]:.4g}" for n in names))
    sys.exit(0)
for name in sorted(action.metric_names()):
    m = action[name]
    n = m.num_instances() if hasattr(m, "num_instances") else 0
    if n < 8:
        if "duration" in name or "pmsampling" in name.lower():
            print(f"{name}: {m.as_double() if m.metric_type() != 2 else m.as_string()}")
        continue
    vals = series(m)
    step = max(1, n // 40)
    print(f"{name} [{n}]: " + " ".join(f"{v:.3g}" for v in vals[::step]))
