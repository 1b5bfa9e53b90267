"""``canary service``: one background service per project (launchd on macOS, systemd --user on Linux)."""

from __future__ import annotations

import sys

import click

from canary.cli.boundary import CanaryGroup, config_option, config_path, epilog, load
from canary.errors import UsageError
from canary.terminal import safe_lines
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY

_SERVICE_EXITS: dict[int, str | None] = {0: "done", 2: None, 3: "the service manager refused"}


@click.group(name="service", cls=CanaryGroup,
             epilog=epilog(["canary service install", "canary service status"], _SERVICE_EXITS))
def service() -> None:
    """Run the daemon as a background service (launchd on macOS, systemd --user on Linux)."""


@service.command(name="install", epilog=epilog(["canary service install --dry-run"],
                                               {**_SERVICE_EXITS, 2: "bad config, or the service name or a "
                                                "port belongs to another project"}))
@click.option("--dry-run", is_flag=True, help="Print what would be written; change nothing.")
@config_option
@click.pass_context
def service_install(ctx: click.Context, dry_run: bool) -> None:
    """Install and start this project's service (idempotent); other projects' stay as they are."""
    from canary.config.settings import find_config
    from canary.daemon import service as svc

    found = find_config(config_path(ctx))
    # The service manager holds the proxy's and fixture server's sockets at the configured addresses.
    config = load(ctx) if found else None
    listens = {"proxy": config.model.listen, "fixtures": config.fixtures.listen} if config else None
    report = svc.install(found.resolve() if found else None, dry_run=dry_run, listens=listens,
                         project=config.project if config else None,
                         carry=svc.carried(config) if config else ())
    click.echo(safe_lines(svc.render(report)))
    sys.exit(EXIT_OK if report.ok else EXIT_UNAVAILABLE)


def _service_project(ctx: click.Context, project: str | None) -> str | None:
    """The project named by --project, else the config's (None: no config, the default project)."""
    from canary import locations
    from canary.config.settings import find_config

    if project is not None:
        if not locations.PROJECT_NAME.fullmatch(project):
            raise UsageError(f"--project: {project!r} is not a project name (a-z, 0-9, '_', '-')",
                             option="--project")
        return project
    return load(ctx).project if find_config(config_path(ctx)) else None


@service.command(name="uninstall", epilog=epilog(["canary service uninstall",
                                                  "canary service uninstall --project my-agent"],
                                                 _SERVICE_EXITS))
@click.option("--project", default=None, help="The project whose service to remove (default: this config's).")
@config_option
@click.pass_context
def service_uninstall(ctx: click.Context, project: str | None) -> None:
    """Stop and remove this project's service; other projects' keep running."""
    from canary.daemon import service as svc

    report = svc.uninstall(project=_service_project(ctx, project))
    click.echo(safe_lines(svc.render(report)))
    sys.exit(EXIT_OK if report.ok else EXIT_UNAVAILABLE)


@service.command(name="status", epilog=epilog(["canary service status"],
                                              {0: "every installed service is running",
                                               1: "none is installed, or one is not running",
                                               3: "the service manager could not be asked"}))
@config_option
@click.pass_context
def service_status(ctx: click.Context) -> None:
    """Every project's service: installed, running, its config and sockets."""
    from canary.daemon import service as svc

    states = svc.status_all(project=_service_project(ctx, None))
    click.echo(safe_lines(svc.render(states)))
    ok = any(st.installed for st in states) and all(st.running for st in states if st.installed)
    sys.exit(EXIT_OK if ok else EXIT_UNHEALTHY)
