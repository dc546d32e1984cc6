import sys, time, numpy as np
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
from in_process_ab import HELDOUT, feeds, interleaved_medians, mk
path = sys.argv[1]
V = {"noskip": ["SkipLayerNormFusion"], "noskip+nobiasgelu": ["SkipLayerNormFusion", "BiasGeluFusion"],
     "noskip+nobiasgelu+nogelu": ["SkipLayerNormFusion", "BiasGeluFusion", "GeluFusion"]}
for threads, spin in [(1, False), (2, True)]:
    ss = {k: mk(path, threads, spin, v) for k, v in V.items()}
    for name, f in [("1 text", feeds(HELDOUT[:1])), ("8 texts", feeds(HELDOUT[:8])), ("32 texts", feeds(HELDOUT[:32]))]:
        outs = {k: s.run(None, f)[0] for k, s in ss.items()}
        res = interleaved_medians(ss, f, warm=3, calls=30)
        base = res["noskip"]
        print(f"threads={threads} {name}: " + ", ".join(f"{k} {v:.3f} ms ({v/base:.3f})" for k, v in res.items()),
              "max|diff| vs noskip", {k: float(f"{np.abs(o - outs['noskip']).max():.1e}") for k, o in outs.items()})
