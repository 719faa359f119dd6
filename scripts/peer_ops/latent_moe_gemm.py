"""Peer for latent_moe_gemm: torch._grouped_mm (CUTLASS), plus torch's elementwise GLU epilogue when fused."""
import torch
from timing import bench

dev = "cuda"


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
