"""The ``canary`` console script: ``canary status`` answers without loading click
(``canary.cli.quick``); every other command line goes to the click group (``canary.cli.main``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def status_args(args: Sequence[str]) -> tuple[str | None, bool] | None:
    """``(--config value, --json)`` when ``args`` are ``status`` with only those options, else None."""
    explicit, as_json, commands = None, False, []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--json":
            as_json = True
        elif arg == "--config" and rest and not rest[0].startswith("-"):
            explicit = rest.pop(0)
        elif arg.startswith("--config=") and len(arg) > len("--config="):
            explicit = arg.partition("=")[2]
        elif arg.startswith("-"):
            return None  # --help, --all-projects, a typo: click answers those
        else:
            commands.append(arg)
    # --json before the command is an option of the group, which has none: click says so
    if commands != ["status"] or (as_json and args.index("--json") < args.index("status")):
        return None
    return explicit, as_json


def main() -> None:
    """Run the command line in ``sys.argv``."""
    quick = status_args(sys.argv[1:])
    if quick is not None:
        import gc

        # A short command: the collector would only walk the modules being imported, again and again.
        gc.disable()
        from canary.cli.quick import run

        explicit, as_json = quick
        sys.exit(run(explicit, as_json=as_json))
    from canary.cli.main import main as group

    group()


if __name__ == "__main__":  # pragma: no cover
    main()
