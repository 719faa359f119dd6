"""ncu target: FLA fused_recurrent_kda at kda.decode's bench presets (the peer of kda.decode), a few launches."""
import sys, torch
sys.path.insert(0, "scripts/peer_ops")
from kda import _fla
fused = _fla("fused_recurrent_kda")
dev = "cuda"
for (N, H) in [(64, 96), (256, 32)]:
    K = V = 128
    q = torch.randn(N, 1, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(N, 1, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(N, 1, H, V, device=dev, dtype=torch.bfloat16)
    g = -torch.rand(N, 1, H, K, device=dev, dtype=torch.float32) * 0.1
    beta = torch.rand(N, 1, H, device=dev, dtype=torch.bfloat16)
    h0 = torch.randn(N, H, K, V, device=dev, dtype=torch.float32)
    for _ in range(3):
        o, ht = fused(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0, output_final_state=True)
    torch.cuda.synchronize()
    print(N, H, o.shape, ht.shape, ht.dtype)
