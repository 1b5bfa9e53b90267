"""Loading canary.toml: lookup order, strict validation, defaults, and the check summary."""

from __future__ import annotations

import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from canary import locations
from canary.config.settings import (
    AgentConfig,
    AlertsConfig,
    Config,
    DaemonConfig,
    FixturesConfig,
    LogsConfig,
    ModelConfig,
    StoreConfig,
    find_config,
    load_config,
)
from canary.config.summary import summarize
from canary.errors import ConfigError, Problem

DEFS = Path(__file__).parents[1] / "data" / "defs"

CONTRACT_EXAMPLE = """\
defs = ["canaries_defs/*.toml"]          # globs, relative to this file

[agent]                                  # how canaries reach the real agent
url = "http://127.0.0.1:8700/ask"
method = "POST"
body = { prompt = "{prompt}" }           # JSON body; placeholders are filled inside string values
headers = {}
answer = "answer"                        # dotted path to the final answer in the JSON reply
timeout = "180s"

[model]                                  # the interposition proxy
listen = "127.0.0.1:11435"               # the agent's model base URL points here
upstream = "http://127.0.0.1:11434"      # the real model server (optional)

[fixtures]
listen = "127.0.0.1:11436"

[logs]
paths = ["~/Library/Logs/MyAgent/*.log"] # globs; rotated files may match too
format = "text"                          # "text" or "jsonl"
activity = 'task finished'               # optional: one match = one unit of agent work
correlate = 'task=(?P<id>[0-9a-f-]+)'    # optional: a task / request id in each line (jsonl: a field name, e.g. "task_id")
timestamp = "auto"

[store]
url = "sqlite:///path/to/canary.db"

[alerts]
desktop = true
webhook = "env:CANARY_WEBHOOK"           # a URL, or env:VAR to read it from the environment
command = ["notify-me", "{guard}", "{status}", "{reason}"]
repeat = "6h"

[daemon]
control = "127.0.0.1:11437"
"""


def write_config(directory: Path, text: str, *, defs: str = "valid/citation.toml") -> Path:
    """A canary.toml in ``directory``, with copies of tests/data/defs/<defs> in canaries_defs/."""
    target = directory / "canaries_defs"
    target.mkdir(parents=True, exist_ok=True)
    for source in DEFS.glob(defs):
        shutil.copy(source, target / source.name)
    path = directory / "canary.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        load_config(path=path)
    return caught.value.problems + caught.value.warnings


def test_the_contract_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write_config(tmp_path, CONTRACT_EXAMPLE)
    config = load_config(path=path)
    assert config.path == path
    assert config.defs == ("canaries_defs/*.toml",)
    assert config.agent == AgentConfig(
        url="http://127.0.0.1:8700/ask",
        method="POST",
        body={"prompt": "{prompt}"},
        headers={},
        answer="answer",
        timeout=timedelta(seconds=180),
        command=None,
    )
    assert not config.agent.inject_mode
    assert config.model == ModelConfig("127.0.0.1:11435", "http://127.0.0.1:11434")
    assert config.fixtures == FixturesConfig("127.0.0.1:11436")
    assert config.logs == LogsConfig(
        paths=(str(tmp_path / "home" / "Library/Logs/MyAgent/*.log"),),
        format="text",
        activity="task finished",
        activity_pattern=re.compile("task finished"),
        correlate="task=(?P<id>[0-9a-f-]+)",
        correlate_pattern=re.compile("task=(?P<id>[0-9a-f-]+)"),
        timestamp="auto",
        timestamp_format=None,
    )
    # a relative SQLite path names a file in canary.toml's folder
    assert config.store == StoreConfig(f"sqlite:///{(path.parent / 'path/to/canary.db').as_posix()}")
    assert config.alerts == AlertsConfig(
        desktop=True,
        webhook="env:CANARY_WEBHOOK",
        command=("notify-me", "{guard}", "{status}", "{reason}"),
        repeat=timedelta(hours=6),
    )
    assert config.daemon == DaemonConfig("127.0.0.1:11437")
    assert [g.name for g in config.guards] == ["citation"]
    assert config.guards[0].path == tmp_path / "canaries_defs" / "citation.toml"
    assert config.warnings == ()


def test_defaults_when_sections_are_absent(tmp_path: Path) -> None:
    path = write_config(tmp_path, "")
    config = load_config(path=path)
    assert config == Config(
        path=path,
        project=locations.default_project(path),
        guards=config.guards,
        store=StoreConfig(locations.project_store_url(path)),
        daemon=DaemonConfig(locations.project_control(path)),
    )
    assert config.agent is None
    assert config.store.url.startswith(f"sqlite:///{tmp_path / '_state' / 'projects'}/")
    assert (config.model.listen, config.fixtures.listen) == ("127.0.0.1:11435", "127.0.0.1:11436")
    assert int(config.daemon.control.rpartition(":")[2]) in locations.PROJECT_PORTS
    assert config.alerts.repeat == timedelta(hours=6)


def test_relative_paths_start_at_the_config_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "conf" / "here"
    elsewhere.mkdir(parents=True)
    path = write_config(elsewhere, '[logs]\npaths = ["logs/*.log", "/var/log/agent.log"]\n')
    config = load_config(path=path)
    assert config.logs.paths == (str(elsewhere / "logs" / "*.log"), "/var/log/agent.log")
    assert config.guards[0].path == elsewhere / "canaries_defs" / "citation.toml"


@pytest.mark.parametrize(
    ("agent", "inject_mode"),
    [
        ('url = "http://h/ask"\nbody = { prompt = "{prompt}" }', False),
        ('url = "http://h/ask"\nbody = { prompt = "{prompt}", test = { answer = "{inject}" } }',
         True),
        ('url = "http://h/ask"\nbody = { prompt = "{prompt}" }\n'
         'headers = { X-Inject = "{inject}" }', True),
        ('command = ["my-agent", "ask", "{prompt}", "--answer", "{inject}"]', True),
        ('command = ["my-agent", "ask", "{prompt}"]', False),
        ('url = "http://h/ask"\nbody = { prompt = "{prompt}", note = "{{inject}}" }', False),
    ],
    ids=["body", "body-nested", "header", "command", "command-plain", "escaped"],
)
def test_inject_mode(tmp_path: Path, agent: str, inject_mode: bool) -> None:
    config = load_config(path=write_config(tmp_path, f"[agent]\n{agent}\n"))
    assert config.agent is not None
    assert config.agent.inject_mode is inject_mode


def test_command_agent(tmp_path: Path) -> None:
    config = load_config(path=write_config(tmp_path, '[agent]\ncommand = ["a", "{prompt}"]\n'))
    assert config.agent == AgentConfig(url=None, command=("a", "{prompt}"))


def test_allow_remote_lets_a_listener_bind_elsewhere(tmp_path: Path) -> None:
    text = '[model]\nlisten = "0.0.0.0:11435"\nallow_remote = true\n'
    config = load_config(path=write_config(tmp_path, text))
    assert config.model == ModelConfig("0.0.0.0:11435", None, allow_remote=True)


@pytest.mark.parametrize(
    "address", ["localhost:9000", "127.0.0.2:9000", "[::1]:9000"], ids=str
)
def test_loopback_listeners(tmp_path: Path, address: str) -> None:
    config = load_config(path=write_config(tmp_path, f'[fixtures]\nlisten = "{address}"\n'))
    assert config.fixtures.listen == address


def test_timestamp_regex_and_jsonl_activity(tmp_path: Path) -> None:
    text = (
        "[logs]\nformat = 'jsonl'\nactivity = { event = 'task_finished' }\n"
        "timestamp = '^(?P<ts>\\S+)'\ntimestamp_format = '%Y-%m-%dT%H:%M:%S'\n"
    )
    config = load_config(path=write_config(tmp_path, text, defs="valid_jsonl/citation.toml"))
    assert config.logs.format == "jsonl"
    assert config.logs.activity == {"event": "task_finished"}
    assert config.logs.activity_pattern is None
    assert config.logs.timestamp == r"^(?P<ts>\S+)"
    assert config.logs.timestamp_format == "%Y-%m-%dT%H:%M:%S"


def test_jsonl_correlate_is_a_field_name(tmp_path: Path) -> None:
    text = "[logs]\nformat = 'jsonl'\ncorrelate = 'ctx.task_id'\n"
    config = load_config(path=write_config(tmp_path, text, defs="valid_jsonl/citation.toml"))
    assert (config.logs.correlate, config.logs.correlate_pattern) == ("ctx.task_id", None)
    bad = "[logs]\nformat = 'jsonl'\ncorrelate = 'task=(?P<id>\\w+)'\n"
    problems = problems_of(write_config(tmp_path, bad, defs="valid_jsonl/citation.toml"))
    assert [(p.key, "name of the field" in p.message) for p in problems] == [("logs.correlate", True)]


def test_warnings_are_kept(tmp_path: Path) -> None:
    text = "[logs]\nactivity = '.*task finished'\n"
    config = load_config(path=write_config(tmp_path, text, defs="leak_constant.toml"))
    assert [(w.key, w.severity) for w in config.warnings] == [
        ("logs.activity", "warning"), ("canary[0].leak", "warning")]


# (config text, dotted key, fragment of the message, suggestion)
FAILURES = [
    ("defs = [\n", "", "invalid TOML", None),
    ("agnet = {}\n", "agnet", "unknown key", "agent"),
    ("defs = 'nowhere/*.toml'\n", "defs", "'nowhere/*.toml' matches no file", None),
    ("defs = 3\n", "defs", "expected a string or a list of strings, got an integer (3)", None),
    ("[agent]\nurl = 'http://h/ask'\nbody = { prompt = '{prompt}' }\nmetod = 'GET'\n",
     "agent.metod", "unknown key", "method"),
    ("[agent]\nurl = 'http://h/'\ncommand = ['a', '{prompt}']\n", "agent.command",
     "both url and command are set", None),
    ("[agent]\nmethod = 'POST'\n", "agent.url", "url = 'http://127.0.0.1:8700/ask' or command",
     None),
    ("[agent]\ncommand = ['a', '{prompt}']\nheaders = { A = 'b' }\n", "agent.headers",
     "only used with url", None),
    ("[agent]\nurl = 'ftp://h/ask?q={prompt}'\n", "agent.url",
     "expected an http:// or https:// URL, got 'ftp://h/ask?q={prompt}'", None),
    ("[agent]\nurl = 'http://h/ask'\nmethod = 'PSOT'\nbody = { prompt = '{prompt}' }\n",
     "agent.method", "expected one of GET, POST", "POST"),
    ("[agent]\nurl = 'http://h/ask'\nbody = { prompt = '{promt}' }\n", "agent.body.prompt",
     "unknown placeholder {promt}", "{prompt}"),
    ("[agent]\nurl = 'http://h/ask'\nbody = { prompt = '{prompt}', x = '{injct}' }\n",
     "agent.body.x", "unknown placeholder {injct}", "{inject}"),
    ("[agent]\nurl = 'http://h/ask'\nbody = { q = 'hello' }\n", "agent.body",
     "the prompt never reaches the agent", None),
    ("[agent]\ncommand = ['a', 'b']\n", "agent.command", "the prompt never reaches the agent",
     None),
    ("[agent]\ncommand = []\n", "agent.command", "an empty command", None),
    ("[agent]\nurl = 'http://h/ask?q={prompt}'\ntimeout = '3 minutes'\n", "agent.timeout",
     "expected a duration like '90s', '15m', '6h' or '7d', got '3 minutes'", None),
    ("[agent]\nurl = 'http://h/ask?q={prompt}'\nheaders = { X-Retries = 3 }\n",
     "agent.headers.X-Retries", "expected a string, got an integer (3)", None),
    ("[model]\nlistn = '127.0.0.1:11435'\n", "model.listn", "unknown key", "listen"),
    ("[model]\nlisten = '11435'\n", "model.listen", "expected host:port", None),
    ("[model]\nlisten = '0.0.0.0:11435'\n", "model.listen",
     "'0.0.0.0' is not a loopback address", None),
    ("[model]\nlisten = '127.0.0.1:99999'\n", "model.listen", "between 1 and 65535", None),
    ("[model]\nupstream = '127.0.0.1:11434'\n", "model.upstream",
     "expected an http:// or https:// URL", None),
    ("[model]\nallow_remote = 'yes'\n", "model.allow_remote", "expected true or false", None),
    ("[fixtures]\nlisen = '127.0.0.1:1'\n", "fixtures.lisen", "unknown key", "listen"),
    ("[fixtures]\nlisten = '192.168.1.5:11436'\n", "fixtures.listen",
     "set allow_remote = true in [fixtures]", None),
    ("[fixtures]\nlisten = '127.0.0.1:11435'\n", "fixtures.listen",
     "port 11435 is also used by model.listen", None),
    ("[logs]\npahts = ['x.log']\n", "logs.pahts", "unknown key", "paths"),
    ("[logs]\npaths = 5\n", "logs.paths", "expected a string or a list of strings", None),
    ("[logs]\nformat = 'json'\n", "logs.format", "expected 'text' or 'jsonl'", "jsonl"),
    ("[logs]\nactivity = { event = 'done' }\n", "logs.activity",
     "[logs] format is 'text', so this must be a regex string", None),
    ("[logs]\nactivity = '(unclosed'\n", "logs.activity",
     "not a valid regex: missing ), unterminated subpattern at position 0", None),
    ("[logs]\ntimestamp = '^\\S+'\n", "logs.timestamp", "a group named ts", None),
    ("[logs]\ncorrelate = 'task=[0-9a-f]+'\n", "logs.correlate", "a group named id", None),
    ("[logs]\ncorrelate = 'task=(?P<id>[0-9a-f+'\n", "logs.correlate", "not a valid regex", None),
    ("[logs]\ncorrelate = ''\n", "logs.correlate", "an empty correlate names no task id", None),
    ("[logs]\ncorelate = 'task=(?P<id>\\w+)'\n", "logs.corelate", "unknown key", "correlate"),
    ("[logs]\ntimestamp = '^(?P<ts>\\S+'\n", "logs.timestamp", "not a valid regex", None),
    ("[logs]\ntimestamp_format = '%Y'\n", "logs.timestamp_format",
     "only applies with a timestamp regex", None),
    ("[logs]\ntimestamp = '(?P<ts>\\S+)'\ntimestamp_format = 'YYYY'\n", "logs.timestamp_format",
     "expected a strptime format", None),
    ("[store]\nuri = 'sqlite:///x.db'\n", "store.uri", "unknown key", "url"),
    ("[store]\nurl = '/tmp/canary.db'\n", "store.url", "expected a database URL", None),
    ("[alerts]\nwebhok = 'env:X'\n", "alerts.webhok", "unknown key", "webhook"),
    ("[alerts]\nwebhook = 'ftp://hooks'\n", "alerts.webhook",
     "expected an http(s) URL or env:VAR", None),
    ("[alerts]\nwebhook = 'env:1BAD'\n", "alerts.webhook", "expected an http(s) URL or env:VAR",
     None),
    ("[alerts]\nrepeat = '0s'\n", "alerts.repeat", "longer than zero", None),
    ("[alerts]\ndesktop = 'yes'\n", "alerts.desktop", "expected true or false", None),
    ("[alerts]\ncommand = ['notify', '{gaurd}']\n", "alerts.command[1]",
     "unknown placeholder {gaurd}", "{guard}"),
    ("[daemon]\ncontrl = '127.0.0.1:1'\n", "daemon.contrl", "unknown key", "control"),
    ("[daemon]\ncontrol = '10.0.0.2:11437'\n", "daemon.control",
     "set allow_remote = true in [daemon]", None),
    ("daemon = 'on'\n", "daemon", "expected a table [daemon], got a string ('on')", None),
]


@pytest.mark.parametrize(
    ("text", "key", "fragment", "suggestion"),
    FAILURES,
    ids=[f"{row[1] or 'syntax'}-{i}" for i, row in enumerate(FAILURES)],
)
def test_each_config_failure_is_reported(
    tmp_path: Path, text: str, key: str, fragment: str, suggestion: str | None
) -> None:
    path = write_config(tmp_path, text)
    problems = problems_of(path)
    found = [p for p in problems if p.key == key and fragment in p.message]
    assert found, "\n".join(p.render() for p in problems)
    assert found[0].path == path
    assert found[0].suggestion == suggestion


def test_a_misspelled_prompt_is_reported_once(tmp_path: Path) -> None:
    text = "[agent]\nurl = 'http://h/ask'\nbody = { prompt = '{promt}' }\n"
    assert [p.key for p in problems_of(write_config(tmp_path, text))] == ["agent.body.prompt"]


def test_syntax_error_at_the_end_has_a_line(tmp_path: Path) -> None:
    [problem] = problems_of(write_config(tmp_path, "[logs]\npaths = [\n"))
    assert (problem.line, problem.message) == (2, "invalid TOML: Invalid value (at the end of the file)")


def test_activity_regex_in_jsonl_says_which_format(tmp_path: Path) -> None:
    text = "[logs]\nformat = 'jsonl'\nactivity = 'task finished'\n"
    problems = problems_of(write_config(tmp_path, text, defs="valid_jsonl/citation.toml"))
    assert [(p.key, p.message.split(",")[0]) for p in problems] == [
        ("logs.activity", "[logs] format is 'jsonl'")]


def test_definitions_are_checked_against_the_configured_format(tmp_path: Path) -> None:
    problems = problems_of(write_config(tmp_path, "[logs]\nformat = 'jsonl'\n"))
    assert [(p.key, p.path.name if p.path else None) for p in problems] == [
        ("guard.match", "citation.toml")]
    assert "[logs] format is 'jsonl'" in problems[0].message


def test_every_problem_of_every_file_is_collected(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[agnet]\n[logs]\nformat = 'txt'\n", defs="two_bad/*.toml")
    problems = problems_of(path)
    by_file = sorted({(p.path.name if p.path else "", p.key) for p in problems})
    assert by_file == [
        ("a.toml", "canary[0].every"),
        ("b.toml", "canary[0].name"),
        ("b.toml", "guard.windw"),
        ("canary.toml", "agnet"),
        ("canary.toml", "logs.format"),
    ]


def test_a_missing_defs_glob_points_at_the_config_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, "# comment\ndefs = ['nothing/*.toml']\n")
    [problem] = problems_of(path)
    assert (problem.path, problem.key, problem.line) == (path, "defs", 2)


def test_config_error_lines(tmp_path: Path) -> None:
    text = "[agent]\ncommand = ['a', '{prompt}']\n\n[alerts]\nrepet = '6h'\n"
    path = write_config(tmp_path, text)
    [problem] = problems_of(path)
    assert problem.render() == f"{path}:5: alerts.repet: unknown key (did you mean 'repeat'?)"


# Lookup order: --config, then $CANARY_CONFIG, then ./canary.toml, then the platform dir.


def make(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("", encoding="utf-8")
    return path


def test_explicit_config_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = make(tmp_path / "elsewhere" / "mine.toml")
    monkeypatch.setenv("CANARY_CONFIG", str(make(tmp_path / "env.toml")))
    make(tmp_path / "canary.toml")
    make(tmp_path / "_config" / "canary.toml")
    assert find_config(str(explicit)) == explicit


def test_env_comes_before_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = make(tmp_path / "env.toml")
    monkeypatch.setenv("CANARY_CONFIG", str(env))
    make(tmp_path / "canary.toml")
    assert find_config(None) == env


def test_current_directory_comes_before_the_platform_dir(tmp_path: Path) -> None:
    here = make(tmp_path / "canary.toml")
    make(tmp_path / "_config" / "canary.toml")
    assert find_config(None) == here


def test_platform_dir_comes_last(tmp_path: Path) -> None:
    platform = make(tmp_path / "_config" / "canary.toml")
    assert find_config(None) == platform


def test_no_config_anywhere(tmp_path: Path) -> None:
    assert find_config(None) is None
    with pytest.raises(ConfigError) as caught:
        load_config()
    assert "no canary.toml found" in str(caught.value)
    assert str(tmp_path / "canary.toml") in str(caught.value)


def test_relative_explicit_path_is_made_absolute(tmp_path: Path) -> None:
    make(tmp_path / "sub" / "c.toml")
    assert find_config("sub/c.toml") == tmp_path / "sub" / "c.toml"


@pytest.mark.parametrize(
    ("explicit", "env", "source"),
    [("missing.toml", None, "--config"), (None, "missing.toml", "$CANARY_CONFIG")],
    ids=["flag", "env"],
)
def test_a_named_config_that_does_not_exist_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, explicit: str | None, env: str | None,
    source: str,
) -> None:
    make(tmp_path / "canary.toml")  # must not be used instead
    if env:
        monkeypatch.setenv("CANARY_CONFIG", env)
    with pytest.raises(ConfigError) as caught:
        find_config(explicit)
    [problem] = caught.value.problems
    assert problem.path == Path("missing.toml")
    assert problem.message == f"{source} names missing.toml, which does not exist"


def test_load_config_follows_the_lookup(tmp_path: Path) -> None:
    write_config(tmp_path, "")
    assert load_config().path == tmp_path / "canary.toml"


def test_summary(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    make(tmp_path / "logs" / "agent.log")
    make(tmp_path / "logs" / "agent.log.1")
    text = CONTRACT_EXAMPLE.replace("~/Library/Logs/MyAgent/*.log", "logs/agent.log*")
    path = write_config(tmp_path, text, defs="valid/*.toml")
    (tmp_path / "canaries_defs" / "extra.toml").write_text(
        "[guard]\nname = 'slow'\nmatch = '.*SlowGuard'\n", encoding="utf-8")
    summary = summarize(load_config(path=path))
    assert f"config   {path}" in summary
    assert f"store    sqlite:///{(path.parent / 'path/to/canary.db').as_posix()}" in summary
    assert f"  {tmp_path / 'logs' / 'agent.log*'}   2 files now" in summary
    assert "guards   3" in summary
    assert "  citation   canaries_defs/citation.toml" in summary
    assert "    match 'CitationGuard: rejected'   window 1d   grace 1h" in summary
    assert "    - fake-url   every 6h   expect reject   2 variants" in summary
    assert "    - fake-quote   cron '17 */6 * * *'   expect reject   1 variant" in summary
    assert "    - grounded-quote   every 12h   expect accept   1 variant" in summary
    assert "(no canaries" in summary
    assert "warnings 1" in summary
    assert "warning: " in summary and "a leading '.*'" in summary


def test_a_misspelled_placeholder_in_the_url(tmp_path: Path) -> None:
    text = "[agent]\nmethod = 'GET'\nurl = 'http://h/ask?q={promt}'\n"
    [problem] = problems_of(write_config(tmp_path, text))
    assert (problem.key, problem.suggestion) == ("agent.url", "{prompt}")


def test_a_guard_match_of_polynomial_shape_is_searched_under_the_budget_and_check_says_so(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    text = CONTRACT_EXAMPLE.replace("~/Library/Logs/MyAgent/*.log", "logs/agent.log*")
    path = write_config(tmp_path, text, defs="valid/*.toml")
    (tmp_path / "canaries_defs" / "extra.toml").write_text(
        "[guard]\nname = 'poly'\nmatch = 'rejected .*url=.*http.*example'\n", encoding="utf-8")
    summary = summarize(load_config(path=path))
    assert "warnings 1" in summary
    assert "3 unbounded repeats in a row ('.*') can match the same text" in summary
    assert "a line over it is not counted for this guard" in summary
