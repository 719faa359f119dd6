import csv, os, re, subprocess, sys, tempfile, collections
sys.path.insert(0, "/work/main/scripts")
import sass_lines as S
class A: pass
a=A(); a.k3k="/work/main/.dev/bin/k3k"; a.op="kda"; a.preset=sys.argv[1]; a.dims=None; a.knobs=None
kern=sys.argv[2]; csvf=sys.argv[3]
mods = S.split_modules(S.emit(a, "ptx", True))
cu = subprocess.run([a.k3k,"emit","--op","kda","--preset",a.preset,"--emit","cuda"],capture_output=True,text=True).stdout.split("\n")
lines={}
with tempfile.TemporaryDirectory() as d:
    for name, ptx in mods:
        if kern not in name: continue
        p, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        open(p, "w").write(ptx)
        subprocess.run([S.tool("ptxas"), "-arch=sm_90a", "-lineinfo", "-O3", p, "-o", cubin], check=True)
        out = subprocess.run([S.tool("nvdisasm"), "-gi", "-c", cubin], capture_output=True, text=True).stdout
        cur=[]
        for line in out.split("\n"):
            if "//##" in line: cur=[int(x) for x in re.findall(r"line (\d+)", line)]; continue
            m=re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m: lines[int(m.group(1),16)]=(cur[-1] if cur else 0, m.group(2))
rows=list(csv.reader(open(csvf))); hdr=rows[1]; data=rows[2:]; ix={h:i for i,h in enumerate(hdr)}
base=int(data[0][0],16)
agg=collections.defaultdict(collections.Counter); mism=0
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=0
for r in data:
    off=int(r[0],16)-base
    ln,txt=lines.get(off,(None,None))
    if txt is None or txt.split()[0]!=r[1].split()[0]: mism+=1
    n=float(r[ix['# Samples']] or 0); tot+=n
    c=agg[ln]; c['n']+=n; c['inst']+=float(r[ix['Instructions Executed']] or 0)
    for h in stalls: c[h]+=float(r[ix[h]] or 0)
print("mismatched instructions:",mism,"of",len(data),"samples",tot)
for ln,c in sorted(agg.items(),key=lambda kv:-kv[1]['n'])[:int(sys.argv[4]) if len(sys.argv)>4 else 30]:
    top=sorted(stalls,key=lambda h:-c[h])[:3]
    src=cu[ln-1].strip()[:90] if ln and ln<=len(cu) else ''
    print(f"L{ln} {c['n']/tot*100:5.1f}% inst {c['inst']/1e6:6.1f}M  "+" ".join(f"{h[6:]}={c[h]/max(c['n'],1)*100:.0f}%" for h in top)+f"  | {src}")
