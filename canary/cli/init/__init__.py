"""``canary init``: from an agent's logs to a ``canary.toml`` and one definition per guard found.

``mine`` turns log lines into templates and proposes a guard per rejection template, ``render``
writes them as TOML, ``project`` plans and writes the files (never over one the user did not
say yes to), and ``wizard`` is the command that asks, scans, writes, checks and audits.
"""

from __future__ import annotations

from canary.cli.init.mine import mask, scan_logs, shown
from canary.cli.init.model import KINDS, InitResult, InitSettings, LogScan, Proposal, Template
from canary.cli.init.project import init_project
from canary.cli.init.render import canary_sections
from canary.cli.init.wizard import init_command, run_init

__all__ = [
    "KINDS",
    "InitResult",
    "InitSettings",
    "LogScan",
    "Proposal",
    "Template",
    "canary_sections",
    "init_command",
    "init_project",
    "mask",
    "run_init",
    "scan_logs",
    "shown",
]
