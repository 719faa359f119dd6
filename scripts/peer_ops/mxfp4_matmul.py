"""Peer for mxfp4_matmul (docs/SEMANTICS.md section 4): cuBLAS bf16 through torch on unquantized bf16 weights of the same shape —
torch.nn.functional.linear for a dense product, torch.bmm for equal-sized expert groups (the 28-expert decode),
torch._grouped_mm for ragged groups; plus torch's elementwise GLU epilogue and routing weight when the problem
has them (unfused)."""
import torch
from timing import bench

dev = "cuda"


def situ(a, b):
    return 4 * torch.tanh(a / 4) * torch.sigmoid(a) * (25 * torch.tanh(b / 25))


def peer_mxfp4_matmul(pb):
    counts = pb["counts"]; K = pb["K"]; N = pb["N"]; M = pb["M"]
    G = len(counts)
    X = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    W = torch.randn(G, N, K, device=dev, dtype=torch.bfloat16) * K ** -0.5
    p = torch.rand(M, device=dev) * 0.9 + 0.1 if pb["p"] else None
    if not pb["grouped"]:
        mm = lambda: torch.nn.functional.linear(X, W[0])
        name = "cuBLAS bf16 (torch F.linear)"
    elif len(set(counts)) == 1:
        Xb = X.view(G, counts[0], K)
        Wt = W.transpose(-2, -1)
        mm = lambda: torch.bmm(Xb, Wt).view(M, N)
        name = "cuBLAS bf16 (torch.bmm)"
    else:
        offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
        Wt = W.transpose(-2, -1)
        mm = lambda: torch._grouped_mm(X, Wt, offs=offs, out_dtype=torch.bfloat16)
        name = "torch._grouped_mm (bf16)"
    if pb["epilogue"] == "none" and p is None:
        return name, bench(mm)
    act = {"situ_glu": situ, "swiglu": lambda a, b: torch.nn.functional.silu(a) * b}.get(pb["epilogue"])

    def fn():
        y = mm().float()
        h = act(y[:, : N // 2], y[:, N // 2:]) if act else y
        if p is not None:
            h = h * p[:, None]
        return h.to(torch.bfloat16)
    return name + " + torch epilogue", bench(fn)


PEERS = {"mxfp4_matmul": peer_mxfp4_matmul}
