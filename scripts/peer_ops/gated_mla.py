"""Peers for gated MLA (docs/SEMANTICS.md section 4), timed as the project's first H200 anchor measurements timed them:
- gated_mla.prefill: torch SDPA on [1, H, T, 192] q/k and [1, H, S, 128] v (is_causal=True when S == T, the
  bottom-right causal mask of torch.nn.attention.bias otherwise; varlen: one SDPA per sequence), times
  sigmoid(z) when gated.
- gated_mla.decode: the absorbed decode path of torch: bmm(q, cache^T) * tau, softmax in f32, bmm with the first
  512 columns, on a contiguous cache [B, S, 576] of the same lengths (padded to the longest and masked when the
  lengths differ or s_q > 1).
- gated_mla.gate: per-head bmm of the latent output with W_UV^T, times sigmoid(z) when gated."""
import torch
import torch.nn.functional as F
from timing import bench

dev = "cuda"


def peer_prefill(pb):
    H, dqk, dv, scale = pb["H"], pb["dqk"], pb["dv"], pb["scale"]
    cu_q, cu_k = pb["cu_seqlens_q"], pb["cu_seqlens_k"]
    causal, gate = pb["causal"], pb["gate"]
    seqs = []
    for n in range(len(cu_q) - 1):
        T, S = cu_q[n + 1] - cu_q[n], cu_k[n + 1] - cu_k[n]
        if T == 0:
            continue
        q = torch.randn(1, H, T, dqk, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, H, S, dqk, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, H, S, dv, device=dev, dtype=torch.bfloat16)
        z = torch.randn(1, H, T, dv, device=dev, dtype=torch.bfloat16) * 2 if gate else None
        mask = None
        if causal and S != T:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(T, S)
        seqs.append((q, k, v, z, causal and S == T, mask))

    def fn():
        outs = []
        for q, k, v, z, is_causal, mask in seqs:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
            outs.append(o * torch.sigmoid(z) if z is not None else o)
        return outs

    name = "torch SDPA" + (" + sigmoid gate" if gate else "") + (" (per sequence)" if len(cu_q) > 2 else "")
    return name, bench(fn)


def peer_decode(pb):
    B, SQ, H, D, Dv, scale = pb["B"], pb["SQ"], pb["H"], pb["d"], pb["dv"], pb["scale"]
    lens = pb["cache_seqlens"]
    S = max(lens)
    qd = torch.randn(B, SQ * H, D, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(B, S, D, device=dev, dtype=torch.bfloat16) * 0.5
    mask = None
    if SQ > 1 or any(l != S for l in lens):
        # Row r = query r // H sees keys [0, len - SQ + r // H] of its request.
        key = torch.arange(S, device=dev)
        last = torch.tensor(lens, device=dev)[:, None] - SQ + torch.arange(SQ * H, device=dev)[None, :] // H
        mask = torch.where(key[None, None, :] <= last[:, :, None], 0.0, float("-inf"))

    def dec():
        s = torch.bmm(qd, kv.transpose(1, 2)) * scale
        s = s.float() if mask is None else s.float() + mask
        return torch.bmm(torch.softmax(s, -1).to(torch.bfloat16), kv[..., :Dv])

    return "torch bmm+softmax+bmm" + (" (masked)" if mask is not None else ""), bench(dec)


def peer_gate(pb):
    T, H, dl, dv, gate = pb["T"], pb["H"], pb["dl"], pb["dv"], pb["gate"]
    ol = torch.randn(T, H, dl, device=dev, dtype=torch.bfloat16)
    w = torch.randn(H, dv, dl, device=dev, dtype=torch.bfloat16) * dl ** -0.5
    z = torch.randn(T, H, dv, device=dev, dtype=torch.bfloat16) * 2 if gate else None
    wt = w.transpose(1, 2)

    def fn():
        y = torch.bmm(ol.transpose(0, 1), wt).transpose(0, 1)
        return y * torch.sigmoid(z) if z is not None else y.contiguous()

    return "torch bmm" + (" + sigmoid gate" if gate else ""), bench(fn)


PEERS = {"gated_mla.prefill": peer_prefill, "gated_mla.decode": peer_decode, "gated_mla.gate": peer_gate}
