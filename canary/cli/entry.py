"""The ``canary`` console script: ``canary status`` (``canary.cli.quick``) and ``canary audit``
(``canary.cli.audit_cmd``) answer without loading click; every other command line goes to the click
group (``canary.cli.main``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


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


def spread_otlp(args: Sequence[str]) -> list[str]:
    """``canary audit``'s arguments with ``--otlp a.json b.json`` (a list, as a shell expands a glob)
    written ``--otlp a.json --otlp b.json``: the arguments after an ``--otlp`` value, up to the next
    option, are files of it too."""
    out: list[str] = []
    taking = False  # an --otlp value came last
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if taking and not arg.startswith("-"):
            out += ["--otlp", arg]
            continue
        taking = arg.startswith("--otlp=") or (arg == "--otlp" and bool(rest))
        out.append(arg)
        if arg == "--otlp" and rest:
            out.append(rest.pop(0))
    return out


def audit_args(args: Sequence[str]) -> dict[str, Any] | None:
    """``canary audit``'s options (``explicit``, ``since``, ``window``, ``as_json``, ``otlp``) when
    ``args`` are ``audit`` with only those options, each given whole, else None. The files after an
    ``--otlp`` value are its files too (``spread_otlp``)."""
    found: dict[str, list[str]] = {"--config": [], "--since": [], "--window": [], "--otlp": []}
    as_json, commands = False, list[str]()
    if "audit" in args:
        at = list(args).index("audit") + 1
        args = [*args[:at], *spread_otlp(args[at:])]
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if arg == "--json" and commands:
            as_json = True
        elif name in found and (name == "--config" or commands):
            if not eq:
                if not rest or rest[0].startswith("-"):
                    return None  # the value is missing: click says so
                value = rest.pop(0)
            if not value:
                return None
            found[name].append(value)
        elif arg.startswith("-"):
            return None  # --help, a typo, an option of the group: click answers those
        else:
            commands.append(arg)
    if commands != ["audit"] or any(len(found[k]) > 1 for k in ("--config", "--since", "--window")):
        return None  # click takes the last of an option given twice: let it
    first = {k: (v[0] if v else None) for k, v in found.items()}
    return {"explicit": first["--config"], "since": first["--since"], "window": first["--window"],
            "as_json": as_json, "otlp": found["--otlp"]}


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
    audit = audit_args(sys.argv[1:])
    if audit is not None:
        from canary.cli.audit_cmd import run as run_audit

        code = run_audit(**audit)
        if code is not None:
            sys.exit(code)
    from canary.cli.main import main as group

    group()


if __name__ == "__main__":  # pragma: no cover
    main()
