"""Errors the user can fix, and stops the user asked for.

Entry scripts print them as one line and exit non-zero."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the fix."""


class UserError(RuntimeError):
    """A mistake in the inputs (missing file, bad shape, diverged loss); the message says what to change."""


class UnreadableInput(UserError):
    """An input file a reader of infer cannot read (`ModelConfig.input_readers`): infer records it as skipped, with
    this message, and predicts the other files."""


class Interrupted(Exception):
    """The run stopped on a signal (SIGTERM, SIGUSR1, SIGINT) after saving last.pt. `exit_code` is 128 + the signal
    number; `run_status` is what summary.json and wandb record."""

    run_status = "interrupted"

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
