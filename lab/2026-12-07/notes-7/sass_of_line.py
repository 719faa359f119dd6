"""Print the SASS instructions a kernel-body line of the generated CUDA C was inlined into (lab helper on top of
scripts/sass_lines.py): python3 sass_of_line.py --op kda --preset P --kernel intra --line 2641 [--k3k BIN]"""
import argparse, os, re, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../scripts"))
import sass_lines as S

ap = argparse.ArgumentParser()
ap.add_argument("--k3k", default=os.path.join(S.ROOT, "target/release/k3k"))
ap.add_argument("--op", required=True); ap.add_argument("--preset"); ap.add_argument("--dims"); ap.add_argument("--knobs")
ap.add_argument("--kernel", required=True); ap.add_argument("--line", type=int, required=True)
a = ap.parse_args()
mods = S.split_modules(S.emit(a, "ptx", True))
with tempfile.TemporaryDirectory() as d:
    for name, ptx in mods:
        if a.kernel not in name:
            continue
        p, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        open(p, "w").write(ptx)
        subprocess.run([S.tool("ptxas"), "-arch=sm_90a", "-lineinfo", "-O3", p, "-o", cubin], check=True)
        out = subprocess.run([S.tool("nvdisasm"), "-gi", "-c", cubin], capture_output=True, text=True).stdout
        cur = []
        for line in out.split("\n"):
            if "//##" in line:
                cur = [int(x) for x in re.findall(r"line (\d+)", line)]
                continue
            if a.line in cur and re.search(r"/\*[0-9a-f]{4,}\*/", line):
                print(line.strip())
