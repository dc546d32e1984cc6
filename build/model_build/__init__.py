"""Where models are built: training/loading, ONNX export, precision variants, validation, reports."""
