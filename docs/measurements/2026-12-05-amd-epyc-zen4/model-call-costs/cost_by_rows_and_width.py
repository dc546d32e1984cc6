import time, numpy as np, onnxruntime as ort, itertools, json, sys
o=ort.SessionOptions(); o.intra_op_num_threads=1; o.inter_op_num_threads=1
o.add_session_config_entry("session.intra_op.allow_spinning","0")
s=ort.InferenceSession('model_repository/text_embedder/1/model.onnx',o,providers=["CPUExecutionProvider"])
res={}
for rows in (1,2,4,8,16):
    for w in (8,16,24,32,48,64,96,128):
        f={'input_ids':np.random.randint(1000,2000,(rows,w)).astype(np.int64),'attention_mask':np.ones((rows,w),np.int64)}
        for _ in range(3): s.run(None,f)
        n=max(5,int(60/(rows*w/16+1)))
        ts=[]
        for _ in range(n):
            t=time.perf_counter(); s.run(None,f); ts.append(time.perf_counter()-t)
        res[f"{rows}x{w}"]=float(np.median(ts))*1000
        print(rows,w,f"{res[f'{rows}x{w}']:.2f} ms", flush=True)
json.dump(res,open(__file__.replace('.py', '.json'),'w'))
