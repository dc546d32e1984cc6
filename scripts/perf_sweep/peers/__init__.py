"""The peer comparison (`make perf-peers`, a section of `make perf`): this project against what a
user would run instead, given the same ONNX files, the same inputs, the same load generator and
the whole machine for each (docs/performance.md).

Pure: `plan` (levels, targets, timing), `codec` (request bodies, answer checks), `stats` (one
level's numbers), `verdicts` (the issue's target ratios), `report` (Markdown). Thin: `http_load`
(the aiohttp load generator), `servers` (start and stop each target), `suite` (one run, end to
end). `apps/` holds the peer servers themselves; they run in their own interpreters and import
nothing from this project.
"""
