"""The serving side's error types: one root, a few subclasses.

Only command-line entry points catch these to print and exit; library code raises them with a
message that names what was wrong and what was expected.
"""


class ServingError(Exception):
    """Root of every error raised by the `serving` package."""


class ConfigError(ServingError, ValueError):
    """The serving configuration (serving.toml) names an invalid field or value."""


class ServerStartError(ServingError, RuntimeError):
    """tritonserver could not be found, prepared or brought to readiness."""


class SecurityError(ServingError):
    """The admin key or bind address is unsafe or unusable (see serving.runtime.security)."""


def find_named(items, name: str, what: str):
    """The item of `items` whose `.name` is `name`; else a ConfigError listing the names there are
    (`what`: how the error names the kind, e.g. "partition", "model in the serving configuration")."""
    for item in items:
        if item.name == name:
            return item
    raise ConfigError(f"no {what} named {name!r}; known: {[i.name for i in items]}.")
