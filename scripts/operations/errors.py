"""The operations side's error types: one root, two subclasses."""


class OperationsError(Exception):
    """Root of every error raised by the `operations` package."""


class MonitorConfigError(OperationsError, ValueError):
    """A threshold, manifest entry or monitoring setting is invalid."""


class MonitorStartError(OperationsError, RuntimeError):
    """Prometheus could not be found, started or brought to readiness."""
