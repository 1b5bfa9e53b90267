"""Templates come from the installed package: listed by ``canary templates``, copied by ``init --template``.

``canary init`` never mixes the bundled templates into a user's guards: it refuses to run in
guard-canary's own folder, and copies only the templates asked for. The installed wheel is
rehearsed from a folder outside the checkout in ``test_readme_onboarding.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.config.settings import load_config
from canary.locations import bundled_defs_dir

ROOT = Path(__file__).resolve().parents[2]


def test_templates_lists_every_bundled_file() -> None:
    result = CliRunner().invoke(main, ["templates", "--json"])
    assert result.exit_code == 0, result.output
    names = {t["name"] for t in json.loads(result.output)["templates"]}
    assert names == {p.stem for p in bundled_defs_dir().glob("*.toml")}
    text = CliRunner().invoke(main, ["templates"])
    assert text.exit_code == 0
    assert "citation" in text.output and "canaries: fake-url" in text.output


def test_init_copies_only_the_templates_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "--yes", "--agent-url", "http://127.0.0.1:9/ask",
                                       "--template", "citation", "--template", "quote_fused.toml"])
    assert result.exit_code == 0, result.output
    copied = sorted(p.name for p in (tmp_path / "canaries_defs").glob("*.toml"))
    assert copied == ["citation.toml", "quote_fused.toml"]
    for name in copied:
        assert (tmp_path / "canaries_defs" / name).read_bytes() == (bundled_defs_dir() / name).read_bytes()
    config = load_config(path=tmp_path / "canary.toml")
    assert sorted(g.name for g in config.guards) == ["citation", "quote-fused"]


def test_templates_copied_after_init_are_read_and_nothing_is_asked(tmp_path: Path) -> None:
    """The README's order: ``init`` with flags first (no guard in the logs), ``init --template`` next."""
    first = CliRunner().invoke(main, ["init", "--agent-url", "http://127.0.0.1:9/ask", "--logs", "none/*.log",
                                      "--model-upstream", "http://127.0.0.1:9"], input="")
    assert first.exit_code == 0, first.output
    assert load_config(str(tmp_path / "canary.toml")).guards == ()
    then = CliRunner().invoke(main, ["init", "--template", "citation"], input="")
    assert then.exit_code == 0, then.output
    assert "How do canaries reach your agent" not in then.output
    config = load_config(str(tmp_path / "canary.toml"))
    assert [g.name for g in config.guards] == ["citation"]
    assert config.agent is not None and config.agent.url == "http://127.0.0.1:9/ask"  # the rest is kept


def test_a_copied_template_the_user_edited_is_kept(tmp_path: Path) -> None:
    defs = tmp_path / "canaries_defs"
    defs.mkdir()
    (defs / "citation.toml").write_text("# mine\n")
    result = CliRunner().invoke(main, ["init", "--yes", "--dir", str(tmp_path), "--template", "citation"])
    assert "kept" in result.output
    assert (defs / "citation.toml").read_text() == "# mine\n"


def test_an_unknown_template_says_what_exists(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["init", "--yes", "--dir", str(tmp_path), "--template", "citaton"])
    assert result.exit_code == 2
    assert "did you mean 'citation'?" in result.output
    assert "quote_fused" in result.output
    assert not (tmp_path / "canary.toml").exists()


def test_init_refuses_the_folder_that_holds_the_bundled_templates(tmp_path: Path) -> None:
    (tmp_path / "canaries_defs").symlink_to(bundled_defs_dir(), target_is_directory=True)
    result = CliRunner().invoke(main, ["init", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "guard-canary's own folder" in result.output
    assert "canary init --template NAME" in result.output
    assert not (tmp_path / "canary.toml").exists()


def _clone_copy(tmp_path: Path) -> Path:
    """guard-canary's checkout as an installed ``canary`` sees it: its templates are not the bundled ones."""
    import shutil

    clone = tmp_path / "guard-canary"
    shutil.copytree(ROOT / "canaries_defs", clone / "canaries_defs")
    shutil.copyfile(ROOT / "pyproject.toml", clone / "pyproject.toml")
    (clone / "logs").mkdir()
    (clone / "logs" / "a.log").write_text("CitationGuard: rejected url=http://x.example.org\n")
    return clone


@pytest.mark.parametrize("where", ["--dir", "cwd", "--config", "--traces"])
def test_an_installed_init_refuses_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 where: str) -> None:
    clone = _clone_copy(tmp_path)
    assert (clone / "canaries_defs").resolve() != bundled_defs_dir().resolve()
    args = ["init", "--yes", "--logs", str(clone / "logs" / "a.log")]
    if where in ("cwd", "--traces"):
        monkeypatch.chdir(clone)
        args += ["--traces"] if where == "--traces" else []
    else:
        args += ["--dir", str(clone)] if where == "--dir" else ["--config", str(clone / "canary.toml")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "guard-canary's own folder" in result.stderr
    assert not (clone / "canary.toml").exists()
