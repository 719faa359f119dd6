"""Peers for KDA: FLA's chunk_kda (Triton) for `kda` and fused_recurrent_kda for `kda.decode`, on exactly the
problem `k3k bench` ran (its `problem()` JSON: shapes, cu_seqlens, gate form and in-kernel options).

Needs the FLA wheels (fla-core==0.6.0 and flash-linear-attention==0.6.0) on PYTHONPATH; the import happens inside
the peer functions so that the other peer modules still load without them.
Inputs follow k3k's distributions: q, k unit rows (or raw N(0,1) with the in-kernel L2 norm), v ~ N(0,1),
beta ~ U(0,1) (or N(0,1) logits with the in-kernel sigmoid), pre-computed gates lb*sigmoid(N(0,1)) on the safe
path and log(sigmoid(N(0,1))) otherwise, h0 ~ N(0,1) f32 when the problem has one. Both k3k and FLA return the
final state (output_final_state=True), the work k3k's kernels do.
"""
import torch
import torch.nn.functional as F
from timing import bench

dev = "cuda"


def _fla(name):
    try:
        import fla.ops.kda as m
    except Exception as e:  # ImportError, or a broken install
        raise RuntimeError(
            "FLA is not importable (pip install fla-core==0.6.0 flash-linear-attention==0.6.0, or put the wheels on "
            f"PYTHONPATH): {e}"
        ) from e
    if not hasattr(m, name):
        raise RuntimeError(f"fla.ops.kda has no `{name}` (need flash-linear-attention 0.6.0)")
    return getattr(m, name)


def _inputs(pb, lead):
    """q, k, v, g, beta, gate kwargs for a problem; `lead` is the leading shape ([B, T] or [N, T])."""
    H, HV, K, V = pb["H"], pb["HV"], pb["K"], pb["V"]
    l2 = pb["l2norm"]
    def qk():
        x = torch.randn(*lead, H, K, device=dev, dtype=torch.bfloat16)
        return x if l2 else F.normalize(x.float(), dim=-1).to(torch.bfloat16)
    q, k = qk(), qk()
    v = torch.randn(*lead, HV, V, device=dev, dtype=torch.bfloat16)
    x = torch.randn(*lead, HV, K, device=dev, dtype=torch.float32)
    gate = pb["gate"]
    kw = {}
    lb = pb.get("lower_bound", -5.0)
    if gate == "pre":
        g = lb * torch.sigmoid(x) if pb.get("safe", False) else F.logsigmoid(x)
    else:
        g = x
        kw["use_gate_in_kernel"] = True
        if pb.get("gate_bias"):
            kw["dt_bias"] = 0.5 * torch.randn(HV * K, device=dev, dtype=torch.float32)
        if gate.startswith("lbsig"):
            kw["lower_bound"] = lb
        else:
            kw["A_log"] = torch.empty(HV, device=dev, dtype=torch.float32).uniform_(-1, 1)
    if pb["beta_sigmoid"]:
        beta = torch.randn(*lead, HV, device=dev, dtype=torch.bfloat16)
        kw["use_beta_sigmoid_in_kernel"] = True
    else:
        beta = torch.rand(*lead, HV, device=dev, dtype=torch.bfloat16)
    if l2:
        kw["use_qk_l2norm_in_kernel"] = True
    return q, k, v, g, beta, kw


def peer_kda(pb):
    chunk_kda = _fla("chunk_kda")
    B, T = pb["B"], pb["T"]
    q, k, v, g, beta, kw = _inputs(pb, (B, T))
    cu = pb.get("cu_seqlens")
    n = len(cu) - 1 if cu is not None else B
    cu_t = torch.tensor(cu, device=dev, dtype=torch.long) if cu is not None else None
    h0 = torch.randn(n, pb["HV"], pb["K"], pb["V"], device=dev, dtype=torch.float32) if pb["h0"] else None
    if pb["safe"]:
        kw["safe_gate"] = True
        kw["lower_bound"] = pb.get("lower_bound", -5.0)
    fn = lambda: chunk_kda(q, k, v, g, beta, scale=pb["scale"], initial_state=h0, output_final_state=True,
                           cu_seqlens=cu_t, **kw)
    return "FLA chunk_kda (Triton)" + (" safe_gate" if pb["safe"] else ""), bench(fn)


def peer_kda_decode(pb):
    fused_recurrent_kda = _fla("fused_recurrent_kda")
    N, T = pb["N"], pb["T"]
    q, k, v, g, beta, kw = _inputs(pb, (N, T))
    h0 = torch.randn(N, pb["HV"], pb["K"], pb["V"], device=dev, dtype=torch.float32)
    fn = lambda: fused_recurrent_kda(q, k, v, g, beta, scale=pb["scale"], initial_state=h0,
                                     output_final_state=True, **kw)
    return "FLA fused_recurrent_kda (Triton)", bench(fn)


PEERS = {"kda": peer_kda, "kda.decode": peer_kda_decode}
