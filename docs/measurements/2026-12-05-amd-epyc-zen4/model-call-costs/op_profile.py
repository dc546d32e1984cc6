import json, sys, collections, numpy as np, onnxruntime as ort
p=sys.argv[1]; b=int(sys.argv[2]); L=int(sys.argv[3])
o=ort.SessionOptions(); o.intra_op_num_threads=1; o.enable_profiling=True; o.profile_file_prefix="/tmp/ortprof"
o.add_session_config_entry("session.intra_op.allow_spinning","0")
s=ort.InferenceSession(p,o,providers=["CPUExecutionProvider"])
feeds={'input_ids':np.random.randint(1000,2000,(b,L)).astype(np.int64),'attention_mask':np.ones((b,L),np.int64)}
for _ in range(300): s.run(None,feeds)
f=s.end_profiling()
ev=json.load(open(f))
byop=collections.Counter(); cnt=collections.Counter(); runs=0; total=0
for e in ev:
    if e.get('cat')=='Node' and e['name'].endswith('_kernel_time'):
        byop[e['args']['op_name']]+=e['dur']; cnt[e['args']['op_name']]+=1
    if e.get('name')=='model_run': runs+=1; total+=e['dur']
print("runs",runs,"mean run us",total/runs)
ks=sum(byop.values())/runs
print("kernel sum us per run", ks, "nodes per run", sum(cnt.values())/runs)
for op,d in byop.most_common(25): print(f"{op:28s} {d/runs:8.1f} us  n={cnt[op]/runs:.0f}")
