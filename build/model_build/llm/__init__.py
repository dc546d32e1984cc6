"""The generative model: GGUF in, decoder-step ONNX graph out, checked against transformers.
"""
