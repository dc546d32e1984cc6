"""The deploy side's error types: one root, two subclasses. Only the CLI prints and exits."""


class DeployError(Exception):
    """Root of every error raised by `k8s_deploy`."""


class DeployConfigError(DeployError, ValueError):
    """serving.toml cannot be rendered for the cluster (the message names the field and the rule)."""


class ValidationFailed(DeployError):
    """A rendered manifest failed a check (kubectl, kubernetes-validate, a CRD schema, promtool)."""
