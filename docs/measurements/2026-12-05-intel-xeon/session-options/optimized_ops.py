"""The op types of the served text encoder before and after ONNX Runtime's optimisations (served options,
SkipLayerNormFusion left out). Usage: python optimized_ops.py (from the repository root)."""
import sys, collections, onnx
sys.path.insert(0, "/work/main/scripts")
import onnxruntime as ort
from contracts.onnx_sessions import served_session_options
p = "model_repository/text_embedder/1/model.onnx"
src = onnx.load(p)
print("source ops", collections.Counter(n.op_type for n in src.graph.node).most_common())
o = served_session_options(1, False); o.optimized_model_filepath = "/tmp/optimized_text_encoder.onnx"
ort.InferenceSession(p, o, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"])
m = onnx.load("/tmp/optimized_text_encoder.onnx")
print("optimized ops", collections.Counter(n.op_type for n in m.graph.node).most_common())
