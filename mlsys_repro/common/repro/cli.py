"""``mlsys-repro``: the installed command line (console script), one subcommand per entry point.

    mlsys-repro run [PAPER ...] [--profile P] [--only E,E] [--list] [--status] ...   # = ./reproduce.sh
    mlsys-repro status [PAPER ...]                                                    # = run --status
    mlsys-repro claims [PAPER ...] | --claims F.yaml --csv-dir DIR [--out V.csv]       # verdicts, SUMMARY, page
    mlsys-repro report [PAPER ...] [--results-dir DIR]                                # page + reports, no run
    mlsys-repro collect RUNDIR                                                        # gather a Hydra multirun
    mlsys-repro --version

Each subcommand forwards its arguments unchanged to the module that ``python -m`` runs, so both spellings take
the same options and give the same exit codes (0 ok, 1 failures / not fresh, 2 bad input).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence


def _run(argv: Sequence[str]) -> int:
    from mlsys_repro.common.repro.run_all import main

    return main(list(argv))


def _status(argv: Sequence[str]) -> int:
    return _run(["--status", *argv])


def _claims(argv: Sequence[str]) -> int:
    from mlsys_repro.common.repro.claims import main

    return main(list(argv))


def _report(argv: Sequence[str]) -> int:
    from mlsys_repro.common.repro.report import main

    return main(list(argv))


def _collect(argv: Sequence[str]) -> int:
    from mlsys_repro.common.repro.collect import main

    return main(list(argv))


COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "run": (_run, "run experiments and check their claims (python -m mlsys_repro.common.repro.run_all)"),
    "status": (_status, "fresh / stale / missing / incomplete per experiment; exit 1 unless all are fresh"),
    "claims": (_claims, "check claims against stored results; write claims.md, SUMMARY.md, index.html"),
    "report": (_report, "regenerate results/index.html, SUMMARY.md and claims.md from stored results (no run)"),
    "collect": (_collect, "gather a Hydra multirun folder into one table and its verdicts"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "usage: mlsys-repro COMMAND [ARGS ...]\n\ncommands:\n" + "\n".join(lines) + \
        "\n\n'mlsys-repro COMMAND --help' shows a command's options."


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--version"], ["-V"]):
        from mlsys_repro.common.repro.results import package_version

        print(f"mlsys-repro {package_version()}")
        return 0
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        from mlsys_repro.common.repro.errors import did_you_mean

        print(f"error: {did_you_mean('command', [name], list(COMMANDS))}\n\n{usage()}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[name][0](rest)
    except BrokenPipeError:  # `mlsys-repro run --list | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit stays quiet
        return 141  # as a shell reports a process killed by SIGPIPE


def entry() -> None:
    """The console script: :func:`main`, ending the process (after Ctrl-C without interpreter teardown)."""
    from mlsys_repro.common.repro.errors import exit_process

    exit_process(main())


if __name__ == "__main__":
    entry()
