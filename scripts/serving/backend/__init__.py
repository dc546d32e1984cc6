"""Code that runs inside Triton's Python-backend stubs: the onnxruntime_cpu backend and its parts.
"""
