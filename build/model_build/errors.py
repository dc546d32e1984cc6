"""The build's error types: one root and a few subclasses."""


class BuildError(Exception):
    """Root of every error raised while building a model or a variant."""


class BudgetExceededError(BuildError):
    """A precision variant missed its accuracy or fidelity budget."""


class SkippedStep(BuildError):
    """A step that cannot run on this machine (e.g. TensorRT without a GPU); not a failure."""
