"""Accuracy of the text encoder's all-INT8 static_uint8 CPU graph (and with layer.0's FFN output
kept FP32, the plan before this change) for several outlier thresholds, with the build's own
functions, calibration set and held-out texts. Run from the repository root after `make build-engines`:
    .venv/bin/python docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/threshold_sweep.py 0 2 3 4 6
Threshold 0 = no smoothing. Writes each all-INT8 graph to /tmp/outlier-sweep/ for speed.py."""
import sys, types, tempfile
from pathlib import Path
import numpy as np, onnx
sys.path[:0] = ["build", "scripts"]
from model_build.recipes.text_int8 import text_int8_inputs
from model_build.int8.variant import Int8Settings, _outputs
from model_build.int8.quant_types import find_quantizable_layers, CalibrationMethod, ActivationScheme
from model_build.int8.quantize import compute_activation_ranges, cpu_graph, cpu_session
from model_build.int8.smoothing import activation_channel_absmax, apply_smoothing, plan_smoothing, smoothing_candidates
from model_build.onnx_export.validate import embedder_measurement

W, OUT = Path("artifacts/text_encoder"), Path("/tmp/outlier-sweep")
OUT.mkdir(exist_ok=True)
inp = text_int8_inputs(types.SimpleNamespace(name="text_encoder"), W, W / "fp32.onnx", Int8Settings())
fp32 = onnx.load(str(W / "fp32.onnx"))
ref = _outputs(cpu_session(W / "fp32.onnx"), inp.eval_batches)
layers = find_quantizable_layers(fp32)
candidates = smoothing_candidates(fp32, layers)
absmax = activation_channel_absmax(fp32, list(candidates), inp.calibration_batches)
for a, v in absmax.items():
    print(f"{candidates[a][0].name}: channels {v.size}, max |x| {v.max():.2f}, median channel {np.median(v):.2f}")
for threshold in [float(t) for t in sys.argv[1:]]:
    plan = plan_smoothing(candidates, absmax, threshold) if threshold else ()
    model = apply_smoothing(fp32, plan)
    path = OUT / f"source-t{threshold:g}.onnx"
    onnx.save(model, str(path))
    qlayers = find_quantizable_layers(model)
    compute_activation_ranges(path, qlayers, inp.calibration_batches, CalibrationMethod.MINMAX, OUT / f"ranges-t{threshold:g}.json")
    row = []
    for keep in ([], ["/transformer/encoder/layer.0/output/dense/MatMul"]):
        g = cpu_graph(path, [l for l in qlayers if l.name not in keep], ActivationScheme.STATIC_UINT8, CalibrationMethod.MINMAX,
                      OUT / f"ranges-t{threshold:g}.json")
        if not keep:
            onnx.save(g, str(OUT / f"int8-all-t{threshold:g}.onnx"))
        else:
            onnx.save(g, str(OUT / f"int8-l0fp32-t{threshold:g}.onnx"))
        m = embedder_measurement(_outputs(cpu_session(g), inp.eval_batches), ref)
        row.append(f"{'all INT8' if not keep else 'layer.0 FFN out FP32'}: mean cos {m.value:.4f} (min {m.extra['min_cosine']:.4f})")
    print(f"threshold {threshold:g}: {len(plan)} activations smoothed " + str([p.layers[0].split('/')[3] + ('/attn' if 'attention' in p.layers[0] else '') for p in plan])
          + "; " + "; ".join(row), flush=True)
