import sys, time, numpy as np
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
sys.path.insert(0, "/work/main/scripts")
from in_process_ab import HELDOUT, feeds
from contracts.onnx_sessions import served_session
a = served_session("/work/main/model_repository/text_embedder/1/model.onnx", int(sys.argv[1]), spin_within_run=sys.argv[1] != "1")
b = served_session("/tmp/mha/mha.onnx", int(sys.argv[1]), spin_within_run=sys.argv[1] != "1")
cs = lambda x, y: (x*y).sum(1)/np.linalg.norm(x,axis=1)/np.linalg.norm(y,axis=1)
for name, f in [("1 text", feeds(HELDOUT[:1])), ("8 texts", feeds(HELDOUT[:8])), ("32 texts", feeds(HELDOUT[:32]))]:
    oa, ob = a.run(None, f)[0], b.run(None, f)[0]
    ra, rb = [], []
    for r in range(5):
        for s, l in ((a, ra), (b, rb)):
            for _ in range(3): s.run(None, f)
            ts = []
            for _ in range(30):
                t = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t)
            l.append(np.median(ts) * 1000)
    print(f"threads={sys.argv[1]} {name}: current {np.median(ra):.3f} ms, MHA {np.median(rb):.3f} ms ({np.median(rb)/np.median(ra):.3f}), min cos {cs(oa, ob).min():.5f}, max|diff| {np.abs(oa-ob).max():.1e}")
