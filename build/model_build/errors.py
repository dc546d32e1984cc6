"""The build's error types: one root and a few subclasses."""


class BuildError(Exception):
    """Root of every error raised while building a model or a variant."""


class BudgetExceededError(BuildError):
    """A precision variant missed its accuracy or fidelity budget."""

