"""Throwaway probe, kept as it was run (output in README.txt): the time of the onnxruntime_cpu
backend's execute() for one request, outside Triton (pb_stand_in/ replaces pb_utils), split into
the ONNX Runtime call and the rest; then a cProfile of it. Usage: python execute_outside_triton.py MODEL N"""
import cProfile, json, os, pstats, sys, time, importlib.util
import numpy as np
sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "pb_stand_in"), "/work/main/scripts"]
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
model, n = sys.argv[1], int(sys.argv[2])
repo = f"/work/main/model_repository/{model}"
cfg = text_format.Parse(open(f"{repo}/config.pbtxt").read(), model_config_pb2.ModelConfig())
config = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
# the backend reads dims as strings/ints and parameters as {key: {string_value}}
spec = importlib.util.spec_from_file_location("m", "/work/main/scripts/serving/backend/triton_backends/onnxruntime_cpu/model.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
os.environ["SERVING_INTRA_OP_THREADS"] = "2"
inst = m.TritonPythonModel()
inst.initialize({"model_config": json.dumps(config), "model_name": model, "model_version": "1",
                 "model_repository": repo, "model_instance_name": f"{model}_0_0", "model_instance_kind": "CPU"})
if model.startswith("digit"):
    req = {"image": np.full((1, 1, 8, 8), 0.5, np.float32)}
else:
    req = {"TEXT": np.array([[b"A quick brown fox jumps over the lazy dog near the river bank today."]], dtype=object)}
for _ in range(300): inst.execute([req])
t = time.perf_counter()
for _ in range(n): inst.execute([req])
el = (time.perf_counter() - t) / n
fw = inst.session_calls
print(f"{model}: execute {el*1e6:.1f} us per request")
pr = cProfile.Profile(); pr.enable()
for _ in range(n): inst.execute([req])
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
# split: framework vs rest, without the profiler
import time as _t
orig = inst._run; acc = [0.0]
def timed(feeds):
    a = _t.perf_counter(); r = orig(feeds); acc[0] += _t.perf_counter() - a; return r
inst._run = timed
t = _t.perf_counter()
for _ in range(n): inst.execute([req])
el = _t.perf_counter() - t
print(f"execute {1e6*el/n:.1f} us, framework {1e6*acc[0]/n:.1f} us, rest {1e6*(el-acc[0])/n:.1f} us per request")
