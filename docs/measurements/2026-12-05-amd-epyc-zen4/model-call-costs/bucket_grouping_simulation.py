"""The served length buckets against padding to the longest and the best contiguous grouping (dynamic
programming), costed with cost_by_rows_and_width.json on random batches of real lengths. Usage: heldout|train."""
import json, random, numpy as np, bisect, functools
from tokenizers import Tokenizer
import os
grid=json.load(open(os.path.join(os.path.dirname(__file__), 'cost_by_rows_and_width.json')))
W=[8,16,24,32,48,64,96,128]; R=[1,2,4,8,16]
def cost(rows,w):
    # interpolate over width (linear) and rows (linear) on the measured grid
    def at_rows(r):
        i=bisect.bisect_left(W,w); 
        if i==0: return grid[f"{r}x8"]*w/8
        if i>=len(W): return grid[f"{r}x128"]
        w0,w1=W[i-1],W[i]; c0,c1=grid[f"{r}x{w0}"],grid[f"{r}x{w1}"]
        return c0+(c1-c0)*(w-w0)/(w1-w0)
    j=bisect.bisect_left(R,rows)
    if R[min(j,len(R)-1)]==rows: return at_rows(rows)
    if j>=len(R): return at_rows(16)*rows/16
    r0,r1=R[j-1],R[j]; c0,c1=at_rows(r0),at_rows(r1)
    return c0+(c1-c0)*(rows-r0)/(r1-r0)
tok=Tokenizer.from_file('model_repository/text_embedder/1/tokenizer.json'); tok.enable_truncation(128)
import sys
src=sys.argv[1] if len(sys.argv)>1 else 'heldout'
d=json.load(open('artifacts/text_encoder/text_corpus.json'))
texts=d['heldout'] if src=='heldout' else d['train']
L=[len(e.ids) for e in tok.encode_batch(texts)]
B=(16,24,32,48,64,96,128)
def buckets(ls):
    groups={}
    for l in ls:
        b=min(bisect.bisect_left(B,l),len(B)-1); groups.setdefault(b,[]).append(l)
    return sum(cost(len(g),max(g)) for g in groups.values()), len(groups)
def longest(ls): return cost(len(ls),max(ls)),1
def dp(ls):
    s=sorted(ls); n=len(s)
    best=[0.0]+[float('inf')]*n; calls=[0]*(n+1)
    for j in range(1,n+1):
        for i in range(j):
            c=best[i]+cost(j-i,s[j-1])
            if c<best[j]: best[j]=c; calls[j]=calls[i]+1
    return best[n],calls[n]
random.seed(0)
print("corpus",src,"texts",len(L),"P50",np.median(L))
for n in (1,2,3,4,6,8,12,16):
    tot={'buckets':[0,0],'longest':[0,0],'dp':[0,0]}
    for _ in range(2000):
        ls=random.sample(L,n)
        for k,f in (('buckets',buckets),('longest',longest),('dp',dp)):
            c,k2=f(ls); tot[k][0]+=c; tot[k][1]+=k2
    b=tot['buckets'][0]
    print(f"batch {n:2d}: ms/text buckets {b/2000/n:.2f} ({tot['buckets'][1]/2000:.2f} calls)  longest {tot['longest'][0]/2000/n:.2f}  dp {tot['dp'][0]/2000/n:.2f} ({tot['dp'][1]/2000:.2f} calls)  dp/buckets {tot['dp'][0]/b:.3f}")
