"""Exceptions raised by the runner; each message names the file or config key at fault."""


class ConfigError(ValueError):
    """A configuration that cannot be run (unknown key, wrong type, invalid value, missing experiment)."""


class ResultSchemaError(ValueError):
    """An experiment returned a frame that does not follow the long result format."""


class ClaimsSchemaError(ValueError):
    """A ``claims.yaml`` entry is malformed (unknown field, bad kind, missing key)."""


class RunLockedError(RuntimeError):
    """Another process is writing the same result file right now."""
