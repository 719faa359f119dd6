"""Peers of lab/2026-12-06/mx-fp8/run.sh and the closing table: cuBLAS bf16 (torch.matmul on bf16 weights of the
dequantized shape), torch._scaled_mm with FP8 E4M3 operands and rowwise f32 scales (where torch supports it on this
GPU), torch._grouped_mm bf16 for the grouped row; k3k's rows read from the bench reports under OUT (every row
there passed its f64 check, or it has no time). Usage: python3 peers.py OUT"""
import glob, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "peer_ops"))
import torch
from timing import bench

dev = "cuda"
out = sys.argv[1]


def rows(sub):
    res = {}
    for f in glob.glob(os.path.join(out, sub, "*", "mxfp4_matmul.json")):
        for r in json.load(open(f))["rows"]:
            p = r["problem"]
            key = (p.get("M"), len(p.get("counts", [1])))
            variants = {str(k): v for k, v in r.get("variants", [])}
            res[key] = (r["k3k_ms"] if r.get("k3k_ms") else None, r.get("floor_ms"), r.get("max_rel_err"), variants)
    return res


def cublas(M, N, K):
    X = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    W = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * K ** -0.5
    return bench(lambda: torch.matmul(X, W.t()))


def scaled_mm(M, N, K):
    try:
        A = torch.randn(M, K, device=dev).to(torch.float8_e4m3fn)
        Bm = torch.randn(N, K, device=dev).to(torch.float8_e4m3fn)
        sa = torch.rand(M, 1, device=dev, dtype=torch.float32) + 0.5
        sb = torch.rand(1, N, device=dev, dtype=torch.float32) + 0.5
        f = lambda: torch._scaled_mm(A, Bm.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        f()
        return bench(f)
    except Exception as e:  # rowwise scaling needs a recent torch on sm_90
        print("scaled_mm:", type(e).__name__, str(e)[:120])
        return None


def grouped(counts, N, K):
    M = sum(counts)
    X = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    W = torch.randn(len(counts), N, K, device=dev, dtype=torch.bfloat16) * K ** -0.5
    offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
    Wt = W.transpose(-2, -1)
    return bench(lambda: torch._grouped_mm(X, Wt, offs=offs, out_dtype=torch.bfloat16))


fp8, dflt, dpk, grp = rows("fp8"), rows("default"), rows("default_packed"), rows("grouped")
N, K = 6144, 3584
f = lambda v: "-" if v is None else f"{v:.4f}"
r = lambda a, b: "-" if (a is None or b is None) else f"{b / a:.2f}x"
print(f"{'M':>5} {'fp8 ms':>8} {'dflt ms':>8} {'dpk ms':>8} {'cuBLAS':>8} {'scaledmm':>8} {'floor':>8} "
      f"{'fp8/cuB':>8} {'dpk/cuB':>8} {'fp8/smm':>8} {'fp8/floor':>9} {'fp8 err':>8}")
for M in [8, 16, 32, 64, 128, 256, 4096]:
    a = fp8.get((M, 1), (None, None, None, {}))
    d = dflt.get((M, 1), (None,) * 4)
    p = dpk.get((M, 1), (None,) * 4)
    cb, sm = cublas(M, N, K), scaled_mm(M, N, K)
    floor = a[1] or p[1]
    print(f"{M:>5} {f(a[0]):>8} {f(d[0]):>8} {f(p[0]):>8} {f(cb):>8} {f(sm):>8} {f(floor):>8} "
          f"{r(a[0], cb):>8} {r(p[0], cb):>8} {r(a[0], sm):>8} {(f'{a[0] / floor:.2f}x' if a[0] and floor else '-'):>9} "
          f"{(f'{a[2]:.1e}' if a[2] is not None else '-'):>8}")
    if a[3]:
        print("       fp8 variants:", a[3])
for f_ in glob.glob(os.path.join(out, "grouped", "*", "mxfp4_matmul.json")):
    for row in json.load(open(f_))["rows"]:
        counts = row["problem"]["counts"]
        g = grouped(counts, N, K)
        print(f"28-expert prefill mean 1024 (default path; FP8 grouped not built): k3k {f(row['k3k_ms'])} ms, "
              f"torch._grouped_mm bf16 {f(g)} ms, {r(row['k3k_ms'], g)}")
