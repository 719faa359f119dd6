"""Time the peers a user would otherwise pick (torch, FLA) on exactly the problems `k3k bench` ran, in the same
device call, and measure the ceilings (HBM copy bandwidth, cuBLAS bf16 rate) of this GPU in the same run.

Usage: python3 scripts/peers.py results/bench/<gpu-slug> [--out peers.json]
Reads every <op>.json written by `k3k bench` (each row carries its exact `problem`), writes
{"ceilings": {...}, "rows": [{"op", "preset", "peer", "ms"}]} for `k3k bench --merge-peers`.
Inputs are drawn from the same distributions as k3k's (never zeros); shapes and ragged group sizes are identical.
Needs torch + triton (and FLA wheels on PYTHONPATH for KDA)."""
import json, math, os, sys, glob, traceback
import torch
import triton.testing as tt

dev = "cuda"
torch.manual_seed(0)


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return tt.do_bench(fn, warmup=25, rep=200, return_mode="median")


def ceilings():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    b = torch.empty_like(a)
    copy_ms = bench(lambda: b.copy_(a))
    del a, b
    A = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    B = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    mm_ms = bench(lambda: A @ B)
    del A, B
    torch.cuda.empty_cache()
    return {"hbm_gbps": 2 * 4 * n / copy_ms / 1e6, "bf16_tflops": 2 * 8192**3 / mm_ms / 1e9,
            "source": f"measured in this run on {torch.cuda.get_device_name()}: 4 GiB d2d copy, cuBLAS bf16 8192^3"}


def situ(a, b):
    return 4 * torch.tanh(a / 4) * torch.sigmoid(a) * (25 * torch.tanh(b / 25))


def peer_latent_moe_gemm(pb):
    counts = pb["counts"]; K = pb["K"]; N = pb["N"]; M = pb["M"]
    G = len(counts)
    X = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    W = torch.randn(G, N, K, device=dev, dtype=torch.bfloat16) * K ** -0.5
    offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
    Wt = W.transpose(-2, -1)
    p = torch.rand(M, device=dev) * 0.9 + 0.1 if pb["p"] else None
    if pb["epilogue"] == "none":
        fn = lambda: torch._grouped_mm(X, Wt, offs=offs, out_dtype=torch.bfloat16)
        name = "torch._grouped_mm"
    else:
        act = situ if pb["epilogue"] == "situ_glu" else (lambda a, b: torch.nn.functional.silu(a) * b)
        def fn():
            y = torch._grouped_mm(X, Wt, offs=offs, out_dtype=torch.bfloat16).float()
            h = act(y[:, : N // 2], y[:, N // 2:])
            if p is not None:
                h = h * p[:, None]
            return h.to(torch.bfloat16)
        name = "torch._grouped_mm + torch GLU epilogue"
    return name, bench(fn)


PEERS = {"latent_moe_gemm": peer_latent_moe_gemm}


def main():
    folder = sys.argv[1]
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.join(folder, "peers.json")
    res = {"ceilings": ceilings(), "rows": []}
    print("ceilings:", res["ceilings"], flush=True)
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        if f.endswith("peers.json"):
            continue
        rep = json.load(open(f))
        op = rep["op"]
        fam = op.split(".")[0]
        for row in rep["rows"]:
            r = {"op": op, "preset": row["preset"], "peer": "none", "ms": None}
            try:
                fn = PEERS.get(op) or PEERS.get(fam)
                if fn is None:
                    r["error"] = "no peer for this op"
                else:
                    r["peer"], r["ms"] = fn(row["problem"])
            except Exception as e:
                r["error"] = repr(e)[:300]
                traceback.print_exc()
            torch.cuda.empty_cache()
            res["rows"].append(r)
            print(json.dumps(r), flush=True)
    json.dump(res, open(out, "w"), indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
