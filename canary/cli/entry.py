"""The ``canary`` console script: ``canary status`` answers without loading click
(``canary.cli.quick``); every other command line goes to the click group (``canary.cli.main``)."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the command line in ``sys.argv``."""
    from canary.cli.quick import status_args

    quick = status_args(sys.argv[1:])
    if quick is not None:
        from canary.cli.quick import run

        explicit, as_json = quick
        sys.exit(run(explicit, as_json=as_json))
    from canary.cli.main import main as group

    group()


if __name__ == "__main__":  # pragma: no cover
    main()
