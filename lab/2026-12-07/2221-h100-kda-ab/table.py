import re,glob,collections
rows=collections.defaultdict(dict)
for f in sorted(glob.glob('ab/*.txt')):
    s=f.split('/')[-1][:-4]; st,rd=s.split('-')
    steps=[]
    for line in open(f):
        m=re.match(r'\s*step (\S+)\s+([\d.]+) ms',line)
        if m: steps.append((m.group(1),float(m.group(2)))); continue
        m=re.match(r'(\S.*?)\s+([\d.]+) ms\s+[\d.]+ TFLOP/s.*rel (\S+) (ok|FAIL)',line)
        if m:
            p=m.group(1).replace(' K128 safe lbsigab gbf16 l2 bsig h0','')
            intra=[t for n,t in steps if '_intra_' in n]; state=[t for n,t in steps if '_state_' in n]
            rows[p][f'{st}-{rd}']=(float(m.group(2)),sum(intra),sum(state),m.group(4))
            steps=[]
sets=['D-r1','D-r2','W-r1','U-r1','P-r1','P-r2','PW-r1','PWU-r1','PWU-r2']
print('| preset | '+' | '.join(sets)+' |'); print('|---'*(len(sets)+1)+'|')
for p,d in rows.items():
    print(f'| {p} | '+' | '.join(f"{d[s][0]:.4f} ({d[s][1]:.3f}/{d[s][2]:.3f})" if s in d else '-' for s in sets)+' |')
