# threshold_sweep.py with 7-bit weights forced (ONNX Runtime reduce_range, what the build uses on AVX2 CPUs without VNNI).
# Run from the repository root: .venv/bin/python docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/reduce_range_sweep.py
import runpy, sys
sys.path[:0] = ["build", "scripts"]
import model_build.int8.quantize as q
q.cpu_lacks_vnni = lambda: True   # the AVX2 path: 7-bit weights (reduce_range)
sys.argv = ["x", "0", "3"]
runpy.run_path("docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/threshold_sweep.py", run_name="__main__")
