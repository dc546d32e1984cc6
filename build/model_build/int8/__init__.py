"""INT8 variants: calibration, Q/DQ graphs, quantization, layer sensitivity.
"""
