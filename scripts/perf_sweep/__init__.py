"""perf_analyzer sweeps that look like production: realistic inputs and arrivals, knee finding,
A/B comparisons against real servers, and a Markdown/PNG report.

Planning (`plan`, `inputs`, `knee`, `results`, `report`) is pure and tested without a server;
`runner`, `loadgen`, `variants` and `campaign` start processes and talk to tritonserver.
"""
