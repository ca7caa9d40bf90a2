"""Errors that mean "the user can fix this": entry scripts print them as one line and exit non-zero."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the fix."""


class UserError(RuntimeError):
    """A mistake in the inputs (missing file, bad shape, diverged loss); the message says what to change."""
