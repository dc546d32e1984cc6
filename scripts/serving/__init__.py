"""How models are served: the serving configuration (one source of truth), Triton model configs
rendered from it, and the process launcher that runs the real `tritonserver`."""
