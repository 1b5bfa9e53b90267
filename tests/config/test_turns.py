"""Multi-turn canaries: ``[[canary.turn]]`` tables and ``[agent] conversation``.

One fixture file per failure mode in tests/data/turns/; every problem names its file and key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.config.definitions import load_definitions
from canary.config.settings import load_config
from canary.errors import ConfigError

DATA = Path(__file__).parents[1] / "data" / "turns"

# (fixture, dotted key, fragment of the message)
FAILURES = [
    ("turn_without_prompt.toml", "canary[0].turn[1].prompt", "required key is missing"),
    ("no_inject_turn.toml", "canary[0].turn",
     "no turn carries the fabrication: put inject (or inject_tool) on the turn where it goes in"),
    ("two_inject_turns.toml", "canary[0].turn[1].inject_tool",
     "turn[0] already carries the fabrication; a canary injects on one turn only"),
    ("inject_beside_turns.toml", "canary[0].inject",
     "with [[canary.turn]] tables, inject belongs on the turn where the fabrication goes in"),
    ("turn_unknown_key.toml", "canary[0].turn[0].injekt", "unknown key"),
    ("turn_without_nonce.toml", "canary[0].turn[0].prompt", "neither {nonce} nor {fixture_url}"),
    ("turn_single_brackets.toml", "canary[0].turn", "expected [[canary.turn]] tables"),
]


@pytest.mark.parametrize(("fixture", "key", "fragment"), FAILURES,
                         ids=[row[0].removesuffix(".toml") for row in FAILURES])
def test_each_turn_mistake_names_its_file_and_key(fixture: str, key: str, fragment: str) -> None:
    guards, problems = load_definitions([fixture], DATA)
    found = [p for p in problems if p.key == key and fragment in p.message]
    assert found, "\n".join(p.render() for p in problems)
    assert found[0].path == DATA / fixture
    assert found[0].severity == "error"
    assert guards == []


def test_every_turn_fixture_is_in_the_table() -> None:
    assert {p.name for p in DATA.glob("*.toml")} - {"valid.toml"} == {row[0] for row in FAILURES}


def test_turns_load_in_order_with_the_injection_on_its_turn() -> None:
    guards, problems = load_definitions(["valid.toml"], DATA)
    assert problems == []
    (canary,) = guards[0].canaries
    assert [t.split(" ")[0] for t in canary.turns] == ["Read", "Using", "Summarise"]
    assert canary.inject_turn == 1
    assert canary.prompt == canary.turns[0]
    assert canary.inject == ("The minimum is {fake_number} euros.",)
    assert canary.inject_at == "first"
    assert canary.multi_turn


def test_a_later_turn_is_tied_by_the_conversation_and_need_not_repeat_the_url(tmp_path: Path) -> None:
    """Only the first turn has no history to carry the nonce: "Summarise what we established" is a
    turn an agent that keeps its history sends to its model with the first turn's page."""
    text = (DATA / "valid.toml").read_text()
    text = text.replace("Using {fixture_url}, what", "What").replace(
        "Summarise what we established about {fixture_url}.", "Summarise what we established.")
    (tmp_path / "figures.toml").write_text(text)
    guards, problems = load_definitions(["figures.toml"], tmp_path)
    assert problems == []
    assert guards[0].canaries[0].turns[1:] == ("What is the minimum monthly budget?",
                                               "Summarise what we established.")


def test_a_single_turn_canary_has_one_turn_and_injects_on_it() -> None:
    guards, _ = load_definitions(["number.toml"], Path(__file__).parents[2] / "canaries_defs")
    canary = guards[0].canaries[0]
    assert canary.turns == (canary.prompt,)
    assert canary.inject_turn == 0
    assert not canary.multi_turn


def _config(tmp_path: Path, agent: str) -> Path:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "figures.toml").write_text((DATA / "valid.toml").read_text())
    path = tmp_path / "canary.toml"
    path.write_text(f'defs = ["defs/*.toml"]\n\n[agent]\n{agent}\n')
    return path


@pytest.mark.parametrize(
    ("agent", "key", "fragment"),
    [
        ('url = "http://127.0.0.1:9/ask"\nbody = { prompt = "{prompt}", conversation = "{conversation}" }',
         "agent.conversation", "the canary figures/established in"),
        ('command = ["my-agent", "{prompt}"]', "agent.command", "a command cannot continue a conversation"),
        ('url = "http://127.0.0.1:9/ask"\nbody = { prompt = "{prompt}" }\nconversation = "id"',
         "agent.body", "{conversation} is in neither the body, the url nor the headers"),
        ('command = ["my-agent", "{prompt}"]\nconversation = "id"', "agent.conversation",
         "conversation is only used with url"),
        ('url = "http://127.0.0.1:9/ask"\nbody = { prompt = "{prompt}", c = "{conversation}" }\n'
         'conversation = ""', "agent.conversation", "an empty path"),
    ],
    ids=["conversation-missing", "command-agent", "placeholder-absent", "with-command", "empty-path"],
)
def test_agent_conversation_mistakes_name_the_key(tmp_path: Path, agent: str, key: str,
                                                  fragment: str) -> None:
    path = _config(tmp_path, agent)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    found = [p for p in caught.value.problems if p.key == key and fragment in p.message]
    assert found, "\n".join(p.render() for p in caught.value.problems)
    assert found[0].path == path


def test_a_conversational_agent_config_loads(tmp_path: Path) -> None:
    path = _config(tmp_path, 'url = "http://127.0.0.1:9/ask"\n'
                   'body = { prompt = "{prompt}", conversation = "{conversation}" }\n'
                   'conversation = "conversation.id"')
    config = load_config(str(path))
    assert config.agent is not None and config.agent.conversation == "conversation.id"
    assert config.guards[0].canaries[0].multi_turn
    # Turn 1's model call passes through the proxy, and there is no model server behind it.
    (warning,) = config.warnings
    assert warning.key == "model.upstream" and "injects after its first turn" in warning.message
    with path.open("a") as handle:
        handle.write('[model]\nupstream = "http://127.0.0.1:9"\n')
    assert load_config(str(path)).warnings == ()


@pytest.mark.parametrize(("fixture", "key", "line"), [
    ("turn_without_prompt.toml", "canary[0].turn[1].prompt", 14),  # the second turn's header
    ("two_inject_turns.toml", "canary[0].turn[1].inject_tool", 17),
    ("turn_unknown_key.toml", "canary[0].turn[0].injekt", 13),
])
def test_a_turns_problem_points_at_its_line(fixture: str, key: str, line: int) -> None:
    _, problems = load_definitions([fixture], DATA)
    (problem,) = [p for p in problems if p.key == key]
    assert problem.line == line
