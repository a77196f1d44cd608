"""Exceptions raised by the runner; each message names the file or config key at fault."""

import difflib
import os
import sys
from collections.abc import Sequence

INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C, as a shell reports SIGINT


def exit_process(code: int) -> None:
    """End the process with ``code``. After Ctrl-C, flush and leave without interpreter teardown: XLA's compile
    threads may still run, and tearing the interpreter down under them crashed (rc 139) on a cold compile cache."""
    if code == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    sys.exit(code)


def stop_interrupted(line: str) -> None:
    """Print ``line`` (the one line a Ctrl-C leaves) and leave with 130 at once. Unwinding through Hydra's job teardown
    while XLA still compiles on its own threads segfaulted (rc -11), so nothing runs after the line but log flushes."""
    import logging

    print(line, file=sys.stderr, flush=True)
    for h in logging.getLogger().handlers:
        h.flush()
    exit_process(INTERRUPTED)


def did_you_mean(what: str, bad: Sequence[str], known: Sequence[str]) -> str:
    """``unknown <what> 'x' (did you mean 'y'?)`` for each of ``bad``, then the known names."""
    parts = []
    for b in bad:
        close = difflib.get_close_matches(b, known, n=1)
        parts.append(f"unknown {what} {b!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "; ".join(parts) + f". Known: {', '.join(known)}"


class ConfigError(ValueError):
    """A configuration that cannot be run (unknown key, wrong type, invalid value, missing experiment)."""


class ResultSchemaError(ValueError):
    """An experiment returned a frame that does not follow the long result format."""


class ClaimsSchemaError(ValueError):
    """A ``claims.yaml`` entry is malformed (unknown field, bad kind, missing key)."""


class RunLockedError(RuntimeError):
    """Another process is writing the same result file right now."""
