"""Sequence packing prototype against the served length buckets: correctness (max abs diff to each text alone) and time per text."""
import json, numpy as np, onnxruntime as ort, time, random, sys
from tokenizers import Tokenizer
sys.path.insert(0, 'scripts')
from contracts.sequence_buckets import run_in_length_buckets
def sess(p):
    o=ort.SessionOptions(); o.intra_op_num_threads=1; o.inter_op_num_threads=1
    o.add_session_config_entry("session.intra_op.allow_spinning","0")
    return ort.InferenceSession(p,o,providers=["CPUExecutionProvider"])
import os, tempfile, onnx
sys.path.insert(0, os.path.dirname(__file__))
from packed_graph_prototype import packed
PACKED = os.path.join(tempfile.mkdtemp(), 'packed.onnx')
onnx.save(packed(onnx.load('model_repository/text_embedder/1/model.onnx')), PACKED)
std=sess('model_repository/text_embedder/1/model.onnx'); pk=sess(PACKED)
tok=Tokenizer.from_file('model_repository/text_embedder/1/tokenizer.json'); tok.enable_truncation(128)
texts=json.load(open('artifacts/text_encoder/text_corpus.json'))['heldout']
ids=[np.array(e.ids,np.int64) for e in tok.encode_batch(texts)]
def pack_rows(seqs, width):
    """first-fit decreasing into rows of `width` tokens (a text longer than width gets its own row)."""
    order=sorted(range(len(seqs)), key=lambda i:-len(seqs[i]))
    rows=[]  # list of lists of indices
    fill=[]
    for i in order:
        l=len(seqs[i])
        for r in range(len(rows)):
            if fill[r]+l<=width: rows[r].append(i); fill[r]+=l; break
        else: rows.append([i]); fill.append(l)
    W=max(fill)
    inp=np.zeros((len(rows),W),np.int64); pos=np.zeros_like(inp); seg=np.zeros_like(inp)
    out_order=[]; s=0
    for r,members in enumerate(rows):
        c=0
        for i in members:
            l=len(seqs[i]); inp[r,c:c+l]=seqs[i]; pos[r,c:c+l]=np.arange(l); s+=1; seg[r,c:c+l]=s; out_order.append(i); c+=l
    return {'input_ids':inp,'position_ids':pos,'segment_ids':seg}, out_order
def run_packed(seqs, width):
    feeds, order = pack_rows(seqs, width)
    out=pk.run(None,feeds)[0]
    res=np.empty_like(out); res[order]=out
    return res
def run_buckets(seqs):
    L=max(len(s) for s in seqs)
    inp=np.zeros((len(seqs),L),np.int64); mask=np.zeros_like(inp)
    for i,s in enumerate(seqs): inp[i,:len(s)]=s; mask[i,:len(s)]=1
    return run_in_length_buckets(lambda f: std.run(None,f), {'input_ids':inp,'attention_mask':mask}, 'attention_mask', (16,24,32,48,64,96,128))[0]
# correctness
random.seed(0)
worst=0
for n in (1,3,8,16):
    for _ in range(5):
        seqs=random.sample(ids,n)
        a=np.concatenate([std.run(None,{'input_ids':s[None],'attention_mask':np.ones((1,len(s)),np.int64)})[0] for s in seqs])
        b=run_packed(seqs, 64)
        worst=max(worst, float(np.abs(a-b).max()))
print("max abs diff packed vs one-at-a-time:", worst)
# speed: interleaved rounds
for n in (1,2,4,8,16,32):
    random.seed(n)
    batches=[random.sample(ids,n) for _ in range(max(8, 160//n))]
    for b in batches[:2]: run_buckets(b); run_packed(b,64)
    tb=tp=tp2=0
    for rnd in range(3):
        t=time.perf_counter(); [run_buckets(b) for b in batches]; tb+=time.perf_counter()-t
        t=time.perf_counter(); [run_packed(b,64) for b in batches]; tp+=time.perf_counter()-t
        t=time.perf_counter(); [run_packed(b,128) for b in batches]; tp2+=time.perf_counter()-t
    k=3*len(batches)*n
    print(f"batch {n:2d}: buckets {tb/k*1e3:.2f} ms/text, packed rows<=64 {tp/k*1e3:.2f} ({tp/tb:.3f}), rows<=128 {tp2/k*1e3:.2f} ({tp2/tb:.3f})", flush=True)
