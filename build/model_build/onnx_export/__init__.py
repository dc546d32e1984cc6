"""From a framework model to a checked ONNX graph.
"""
