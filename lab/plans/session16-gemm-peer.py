"""Run torch._grouped_mm on one latent GEMM problem (from session16-gemm-problems.json, the exact ragged counts
`k3k bench` drew) `reps` times, for ncu to profile the peer's kernel next to ours.
Usage: python3 session16-gemm-peer.py "<preset>" [reps]"""
import json, os, sys
import torch

preset = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
pb = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "session16-gemm-problems.json")))[preset]
K, N, M, counts = pb["K"], pb["N"], pb["M"], pb["counts"]
X = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
W = torch.randn(len(counts), N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
for _ in range(reps):
    y = torch._grouped_mm(X, W.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
print(preset, tuple(y.shape), float(y.float().abs().mean()))
