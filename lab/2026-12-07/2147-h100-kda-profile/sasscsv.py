import csv,sys,collections
f=sys.argv[1]
rows=list(csv.reader(open(f)))
hdr=rows[1]; data=rows[2:]
ix={h:i for i,h in enumerate(hdr)}
def num(r,h):
    try: return float(r[ix[h]])
    except: return 0.0
tot=collections.Counter()
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
for r in data:
    for h in stalls: tot[h]+=num(r,h)
    tot['samples']+=num(r,'# Samples')
    tot['exc']+=num(r,'L2 Theoretical Sectors Global Excessive')
    tot['sect']+=num(r,'L2 Theoretical Sectors Global')
    tot['inst']+=num(r,'Instructions Executed')
print('samples',tot['samples'],'inst',tot['inst'],'L2 sectors',tot['sect'],'excessive',tot['exc'])
for h in sorted(stalls,key=lambda h:-tot[h])[:12]: print(f"  {h:28s} {tot[h]/tot['samples']*100:5.1f}%")
print('top excessive-sector instructions:')
ex=sorted(data,key=lambda r:-num(r,'L2 Theoretical Sectors Global Excessive'))[:14]
for r in ex: print(f"  {r[0][-5:]} {r[1].strip()[:60]:60s} exc {num(r,'L2 Theoretical Sectors Global Excessive'):.0f} sect {num(r,'L2 Theoretical Sectors Global'):.0f} ideal {num(r,'L2 Theoretical Sectors Global Ideal'):.0f} size {r[ix['Access Size']]}")
