"""TensorRT engines, where a GPU exists.
"""
