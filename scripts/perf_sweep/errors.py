"""The perf_sweep error types: one root and two subclasses; only the CLI catches them."""


class PerfSweepError(Exception):
    """Root of every error raised by the `perf_sweep` package."""


class SweepPlanError(PerfSweepError, ValueError):
    """A sweep, input or report setting is invalid (names the field, the value and what is allowed)."""


class SweepRunError(PerfSweepError, RuntimeError):
    """perf_analyzer, a server or a client failed while measuring (the message says how to reproduce)."""
