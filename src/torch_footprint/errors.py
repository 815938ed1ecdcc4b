"""User-facing errors: one clear paragraph, exit code 2, no traceback; and the exit codes."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What ``footprint`` exits with."""

    ANSWER = 0  # an answer, including "nothing fits"
    VERDICT_FAILED = 1  # a check the user asked for failed: over budget, a calibration that fails its checks
    BAD_INPUT = 2  # the input, the model or a file cannot be used: one line says why
    INTERNAL_ERROR = 3  # a bug in torch-footprint
    INTERRUPTED = 130  # Ctrl-C


class FootprintError(Exception):
    """An error caused by the user's input or model, reported without a traceback.

    The message is one line: a line break in it (text the user typed, echoed back) is shown
    as ``\\n``."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: object = "", *args: object) -> None:
        text = str(message).replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(text, *args)


class FootprintWarning(UserWarning):
    """Something the user should know that does not stop the work (the command line prints it
    as one line on stderr)."""


class MissingExtraError(FootprintError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the optional package '{package}', which is not installed. "
            f"Install it with: pip install 'torch-footprint[{extra}]'"
        )
        self.package = package
        self.extra = extra


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during long work; ``partial`` holds the result of what was finished (or None)."""

    def __init__(self, partial: object = None) -> None:
        super().__init__()
        self.partial = partial
