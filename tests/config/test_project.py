"""`project`: a name for each config, which names its state folder, service, log and metric label."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary import locations
from canary.config.settings import load_config
from canary.errors import ConfigError


def _config(folder: Path, text: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "canary.toml"
    path.write_text("defs = []\n" + text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("folder", "project"),
    [
        ("my-agent", "my-agent"),  # as it is
        ("My Agent", "my-agent"),  # lowercased, a space as -
        ("agent.v2_beta", "agent-v2_beta"),  # a dot is not a project character
        ("---", "default"),  # nothing left of the folder's name
        ("x" * 60, "x" * 40),  # at most 40 characters
    ],
)
def test_the_default_project_is_the_config_folders_name(tmp_path: Path, folder: str, project: str) -> None:
    config = load_config(path=_config(tmp_path / folder))
    assert config.project == project
    assert locations.PROJECT_NAME.fullmatch(config.project)


def test_a_written_project_names_the_state_folder_the_store_and_the_log(tmp_path: Path) -> None:
    config = load_config(path=_config(tmp_path / "checkout", 'project = "billing-bot"\n'))

    assert config.project == "billing-bot"
    folder = config.state_folder
    assert folder.parent == locations.state_dir() / "projects" and folder.name.startswith("billing-bot-")
    assert config.store.url == f"sqlite:///{folder / 'canary.db'}"
    assert locations.project_log(config.path, config.project) == folder / "logs" / "billing-bot.log"


def test_two_configs_with_one_project_name_keep_two_state_folders(tmp_path: Path) -> None:
    one = load_config(path=_config(tmp_path / "a", 'project = "agent"\n'))
    two = load_config(path=_config(tmp_path / "b", 'project = "agent"\n'))
    assert one.state_folder != two.state_folder
    assert one.store.url != two.store.url


@pytest.mark.parametrize(
    ("value", "suggestion"),
    [("My Agent", "my-agent"), ("-lead", "lead"), ("a/b", "a-b"), ("x" * 41, "x" * 40)],
)
def test_a_bad_project_name_names_the_key_and_a_fix(tmp_path: Path, value: str, suggestion: str) -> None:
    path = _config(tmp_path / "p", f"project = {value!r}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path=path)
    (problem,) = caught.value.problems
    assert (problem.path, problem.key, problem.line) == (path, "project", 2)
    assert "a-z, 0-9" in problem.message and problem.suggestion == suggestion


def test_a_project_that_is_not_a_string_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="project: expected a string"):
        load_config(path=_config(tmp_path / "p", "project = 7\n"))


def test_an_older_versions_state_folder_is_kept_while_the_project_keeps_its_default_name(tmp_path: Path) -> None:
    path = _config(tmp_path / "My Agent")
    key = locations.project_dir(path).name.rpartition("-")[2]
    legacy = locations.state_dir() / "projects" / f"My_Agent-{key}"  # as an older version named it
    legacy.mkdir(parents=True)
    (legacy / "canary.db").write_bytes(b"")

    config = load_config(path=path)
    assert config.project == "my-agent"
    assert config.state_folder == legacy
    assert config.store.url == f"sqlite:///{legacy / 'canary.db'}"
    renamed = load_config(path=_config(tmp_path / "My Agent", 'project = "other"\n'))
    assert renamed.state_folder.name == f"other-{key}"  # a new name is a new project


def test_status_json_names_the_project_first(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from canary.cli.main import main

    path = _config(tmp_path / "checkout", 'project = "billing-bot"\n')
    done = CliRunner().invoke(main, ["status", "--json", "--config", str(path)])
    doc = json.loads(done.output)
    assert next(iter(doc)) == "project" and doc["project"] == "billing-bot"
