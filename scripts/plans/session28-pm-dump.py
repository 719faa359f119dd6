"""Session 28: print the PM-sampling series of an ncu report (ncu --section PmSampling -o REP), downsampled.

For every metric of the report's first kernel that has many instances (the sampled series), prints its name, the
instance count and 40 evenly spaced values, so the ramp, the plateau and the drain of a kernel can be read as text.
Usage: python3 session28-pm-dump.py REP.ncu-rep (run where ncu is installed: its extras/python holds ncu_report)"""
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
for name in sorted(action.metric_names()):
    m = action[name]
    n = m.num_instances() if hasattr(m, "num_instances") else 0
    if n < 8:
        if "duration" in name or "pmsampling" in name.lower():
            print(f"{name}: {m.as_double() if m.metric_type() != 2 else m.as_string()}")
        continue
    vals = []
    for i in range(n):
        try:
            vals.append(m.as_double(i))
        except Exception:
            vals.append(float("nan"))
    step = max(1, n // 40)
    print(f"{name} [{n}]: " + " ".join(f"{v:.3g}" for v in vals[::step]))
