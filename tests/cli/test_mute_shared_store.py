"""``canary mute`` and ``canary unmute`` on a shared store never make a project's site: only its
daemon does (a site with no daemon's heartbeat would read as a stale daemon to the whole team)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main
from canary.store.sites import Site
from tests.cli.test_status_claims import daemon_ran, site_mutes, site_tables, write_config
from tests.store.conftest import pg_url


def test_mute_before_the_projects_daemon_wrote_says_why_and_makes_no_site(tmp_path: Path, pg_site: Site) -> None:
    config = write_config(tmp_path / "p", project=pg_site.project, url=pg_url(), machine="m1")
    muted = CliRunner().invoke(main, ["--config", str(config), "mute", "cite", "--for", "1h"])
    assert muted.exit_code == 3, muted.output
    assert (f"no daemon of project {pg_site.project} on machine m1 has written to this shared store yet"
            in muted.stderr), muted.stderr
    assert "start one with `canary daemon --config " in muted.stderr, muted.stderr
    assert "Traceback" not in muted.output
    unmuted = CliRunner().invoke(main, ["--config", str(config), "unmute", "cite"])
    assert unmuted.exit_code == 0, unmuted.output
    assert unmuted.stdout.strip() == "cite: was not muted"
    assert site_tables(pg_site) == (False, False, None)


def test_mute_once_the_daemon_wrote_lands_in_its_site(tmp_path: Path, pg_site: Site) -> None:
    config = write_config(tmp_path / "p", project=pg_site.project, url=pg_url(), machine="m1")
    daemon_ran(config)
    muted = CliRunner().invoke(main, ["--config", str(config), "mute", "cite", "--for", "1h", "--reason", "r"])
    assert muted.exit_code == 0, muted.output
    assert site_mutes(pg_site) == [("cite", "r")]
    unmuted = CliRunner().invoke(main, ["--config", str(config), "unmute", "cite"])
    assert unmuted.stdout.strip() == "cite: mute lifted", unmuted.output
