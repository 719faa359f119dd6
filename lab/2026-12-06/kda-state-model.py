"""The state pass of kda's defaults at the six FlashKDA presets (issue 42), on paper: what Launch::resolve picks (BV,
W2, STAGES, TSPLIT), blocks per SM from the registers ptxas reported here (`k3k emit --emit resources`, 2026-12-06)
and shared memory, waves, and how many times the intra kernel's scratch is read from DRAM when a pair's value
blocks run in different waves (grid order N x HV x V/BV, or V/BV x N x HV with SGRID=vb). No GPU: a model to be
checked against ncu's dram__bytes_read of the device call. Run: python3 lab/2026-12-06/kda-state-model.py"""
import math
SMS=132; K=V=128; C=32
def state_smem(bv, stages, dk=128, c=32): return stages*(2*c*(3*dk+bv+c)+4*dk)+2*(dk+c)*bv
def regs_of(bv,w2,stages):  # ptxas sm_90a, measured here (k3k emit --emit resources)
    return {(32,4,1):128,(32,4,2):153,(32,4,3):155,(64,8,1):126,(64,8,2):128,(64,8,3):154,(128,16,1):123,(128,16,3):128}[(bv,w2,stages)]
def blocks_per_sm(regs, threads, smem):
    per_warp = math.ceil(regs*32/256)*256
    by_regs = 65536 // (per_warp*threads//32)
    by_smem = 233472 // (smem+1024)
    return min(by_regs, by_smem, 32), by_regs, by_smem
def auto(pairs, bv=0, w2=0, stages=0):
    if bv==0: bv = 16 if 2*pairs*V/32 < SMS else 32
    if w2==0: w2 = 8 if bv>32 else 4
    if stages==0:
        blocks = pairs*V//bv
        want = max(1, min(math.ceil(blocks/SMS), 65536//(128*32*w2)))
        stages = next((s for s in (3,2) if want*(state_smem(bv,s)+1024) <= 233472), 1)
    return bv,w2,stages
def scratch_bytes(hv, nch): return hv*nch*(C*(K+V)*2 + 2*C*K*2 + C*C*2 + K*4)
def dram_mult(N, HV, nvb, slots, order):
    P=N*HV
    idx = []
    for vb in range(nvb):
        for h in range(HV):
            for s in range(N):
                pair=(s,h)
                lin = (s + N*h + P*vb) if order=="seqs" else (vb + nvb*(s + N*h))
                idx.append((lin,pair))
    idx.sort()
    seen=set()
    for lin,pair in idx:
        seen.add((pair, lin//slots))
    return len(seen)/P
presets=[("B1 T8192 H96",[8192],96),("B1 T65536 H32",[65536],32),("B1 T8192 H64",[8192],64),("B4 T4096 H64",[4096]*4,64),
 ("varlen 8x1024 H96",[1024]*8,96),("varlen ragged H96",[1300,547,2048,963,271,3063],96)]
print("| preset | pairs | chunks (max/seq) | intra blocks | BV,W2,STAGES | regs | state blocks/SM (regs, smem) | state blocks | waves | steps/slot | scratch MB | DRAM reads x (seqs order) | x (SGRID=vb) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name,lens,H in presets:
    N=len(lens); pairs=N*H
    nch=sum(math.ceil(l/C) for l in lens); mx=max(math.ceil(l/C) for l in lens)
    bv,w2,st=auto(pairs)
    r=regs_of(bv,w2,st); bps,br,bs=blocks_per_sm(r,w2*32,state_smem(bv,st))
    blocks=pairs*V//bv; slots=bps*SMS; waves=blocks/slots
    tsplit = 1 if pairs>32 else 1<<int(math.log2(min(max(nch//128,1),8)))
    sb=scratch_bytes(H,nch)
    m1=dram_mult(N,H,V//bv,slots,"seqs"); m2=dram_mult(N,H,V//bv,slots,"vb")
    print(f"| {name} | {pairs} | {nch} ({mx}) | {nch*H} | {bv},{w2},{st}{' TSPLIT='+str(tsplit) if tsplit>1 else ''} | {r} | {bps} ({br}, {bs}) | {blocks} | {waves:.2f} | {math.ceil(waves)*mx if waves>1 else mx} | {sb/1e6:.0f} | {m1:.2f} | {m2:.2f} |")
print()
print("Alternatives at the multi-sequence presets (blocks per SM from ptxas registers measured here):")
for name,lens,H in presets[3:5]:
    N=len(lens); pairs=N*H; nch=sum(math.ceil(l/C) for l in lens)
    for bv,w2,stg in [(32,4,0),(64,8,0),(64,8,2),(128,16,0)]:
        bv,w2,st=auto(pairs,bv,w2,stg)
        r=regs_of(bv,w2,st); bps,br,bs=blocks_per_sm(r,w2*32,state_smem(bv,st))
        blocks=pairs*V//bv; slots=bps*SMS
        for order in ("seqs","vb"):
            m=dram_mult(N,H,V//bv,slots,order)
            l2sm = pairs*nch/N*(V//bv)*(C*K*2*3 + C*bv*2 + C*C*2 + K*4)
            print(f"  {name}: BV={bv} W2={w2} STAGES={st} regs {r} -> {bps}/SM ({bps*w2} warps), {blocks} blocks, {blocks/slots:.2f} waves, SGRID={order}: scratch from DRAM x{m:.2f} ({m*scratch_bytes(H,nch)/1e9:.2f} GB), L2->SM operand bytes {l2sm/1e9:.2f} GB")
