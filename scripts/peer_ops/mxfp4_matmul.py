"""Peer for mxfp4_matmul (docs/SEMANTICS.md section 4): cuBLAS bf16 through torch on unquantized bf16 weights of the same shape —
torch.nn.functional.linear for a dense product, torch.bmm for equal-sized expert groups (the 28-expert decode),
torch._grouped_mm for ragged groups; plus torch's elementwise GLU epilogue and routing weight when the problem
has them (unfused). Second peer (rank 1): `torch._scaled_mm` on FP8 E4M3 operands with rowwise f32 scales (one per
activation row, one per weight row), the FP8 path a torch user has on Hopper; `torch._scaled_grouped_mm` for the
grouped problems where this torch has it. Scales are per row, not per 32 (a coarser, cheaper problem than MX's)."""
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


def _fp8_rowwise(x):
    """x [R, K] bf16 -> (E4M3 codes [R, K], f32 scales [R, 1]) with x ~ codes * scales."""
    amax = x.abs().float().amax(dim=1, keepdim=True).clamp(min=1e-12)
    s = amax / 448.0
    return (x.float() / s).to(torch.float8_e4m3fn), s


def peer_scaled_mm(pb):
    counts = pb["counts"]; K = pb["K"]; N = pb["N"]; M = pb["M"]
    G = len(counts)
    X = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    W = torch.randn(G, N, K, device=dev, dtype=torch.bfloat16) * K ** -0.5
    xq, xs = _fp8_rowwise(X)
    if not pb["grouped"]:
        wq, ws = _fp8_rowwise(W[0])
        mm = lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t(), out_dtype=torch.bfloat16)
        name = "torch._scaled_mm fp8 rowwise"
    else:
        if not hasattr(torch, "_scaled_grouped_mm"):
            raise RuntimeError(f"torch {torch.__version__} has no _scaled_grouped_mm")
        wq, ws = _fp8_rowwise(W.reshape(G * N, K))
        wq = wq.view(G, N, K).transpose(-2, -1)
        ws = ws.view(G, N)
        offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
        mm = lambda: torch._scaled_grouped_mm(xq, wq, xs.view(M), ws, offs=offs, out_dtype=torch.bfloat16)
        name = "torch._scaled_grouped_mm fp8 rowwise"
    if pb["epilogue"] == "none" and not pb["p"]:
        return name, bench(mm)
    raise RuntimeError("the FP8 peer runs the plain product only (no epilogue)")


peer_scaled_mm.peer = "torch._scaled_mm fp8 rowwise"
PEERS = {"mxfp4_matmul": [peer_mxfp4_matmul, peer_scaled_mm]}
