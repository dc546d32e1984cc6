import time, numpy as np, onnxruntime as ort, json
o=ort.SessionOptions(); o.intra_op_num_threads=1; o.inter_op_num_threads=1
o.add_session_config_entry("session.intra_op.allow_spinning","0")
s=ort.InferenceSession('model_repository/text_embedder/1/model.onnx',o,providers=["CPUExecutionProvider"])
def t(rows,w,n=15):
    f={'input_ids':np.random.randint(1000,2000,(rows,w)).astype(np.int64),'attention_mask':np.ones((rows,w),np.int64)}
    for _ in range(2): s.run(None,f)
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); s.run(None,f); ts.append(time.perf_counter()-a)
    return float(np.median(ts))*1000
res={}
for T in (64,96,128,160,192,256,320,384,512):
    one=t(1,T); split=t(T//32, 32) if T>=64 else None
    res[T]=one
    print(f"T={T}: 1x{T} {one:.2f} ms ({one/T*1000:.0f} us/token); {T//32}x32 {split:.2f} ms ({split/T*1000:.0f} us/token)", flush=True)

