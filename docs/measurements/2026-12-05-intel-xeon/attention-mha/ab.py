import sys, time, numpy as np
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
sys.path.insert(0, "/work/main/scripts")
from in_process_ab import HELDOUT, feeds, interleaved_medians
from contracts.onnx_sessions import served_session
a = served_session("/work/main/model_repository/text_embedder/1/model.onnx", int(sys.argv[1]), spin_within_run=sys.argv[1] != "1")
b = served_session("/tmp/mha/mha.onnx", int(sys.argv[1]), spin_within_run=sys.argv[1] != "1")
cs = lambda x, y: (x*y).sum(1)/np.linalg.norm(x,axis=1)/np.linalg.norm(y,axis=1)
for name, f in [("1 text", feeds(HELDOUT[:1])), ("8 texts", feeds(HELDOUT[:8])), ("32 texts", feeds(HELDOUT[:32]))]:
    oa, ob = a.run(None, f)[0], b.run(None, f)[0]
    t = interleaved_medians({"current": a, "mha": b}, f, warm=3, calls=30)
    print(f"threads={sys.argv[1]} {name}: current {t['current']:.3f} ms, MHA {t['mha']:.3f} ms ({t['mha']/t['current']:.3f}), min cos {cs(oa, ob).min():.5f}, max|diff| {np.abs(oa-ob).max():.1e}")
