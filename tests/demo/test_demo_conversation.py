"""The demo agent's conversation mode and its figure guard, over real loopback sockets.

A reply names its conversation; a request that names it again continues it, and the model
receives the earlier turns' messages ahead of the new question. The figure guard rejects an
amount that is on no page read in the conversation, unless the conversation already stated it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from canary.demo.agent import MAX_CONVERSATIONS, AgentLog, ResearchAgent, UnknownConversation, create_agent
from canary.demo.model import summary_answer
from canary.proxy.serving import BackgroundServer
from tests.demo import test_demo_agent as base
from tests.demo.test_demo_agent import PERMIT_SENTENCE, Start, Upstream, firings, honest, read_log

# The agent tests' fixtures: servers started per test, the page server, the agent's log path.
start, pages, log = base.start, base.pages, base.log

FIGURE = "FigureGuard: rejected figure=1635 euros not on any page of the conversation"


def ask(agent: BackgroundServer, prompt: str, conversation: Any = None) -> httpx.Response:
    return httpx.post(agent.url + "/ask", json={"prompt": prompt, "conversation": conversation},
                      timeout=60, trust_env=False)


def conversational(start: Start, log: Path, answers: list[str]) -> tuple[Upstream, BackgroundServer]:
    upstream = Upstream(answers)
    model = start(upstream.app())
    return upstream, start(create_agent(model.url + "/v1", log))


def test_a_named_conversation_carries_its_history_to_the_model(start: Start, pages: str, log: Path) -> None:
    upstream, agent = conversational(start, log, [])
    first = ask(agent, f"Read {pages}/permit and tell me what the permit is for.")
    assert first.status_code == 200
    cid = first.json()["conversation"]
    assert isinstance(cid, str) and cid

    second = ask(agent, f"Going by {pages}/permit, what is the minimum monthly budget?", cid)

    assert second.status_code == 200 and second.json()["conversation"] == cid
    turn1, turn2 = (r["messages"] for r in upstream.requests)
    assert [m["role"] for m in turn1] == ["system", "user"]
    assert [m["role"] for m in turn2] == ["system", "user", "assistant", "user"]
    assert turn2[1:3] == [turn1[1], {"role": "assistant", "content": first.json()["answer"]}]
    assert turn2[3]["content"].startswith("Question: Going by ")
    # A request without a conversation starts a new one, with no history.
    third = ask(agent, f"Read {pages}/permit and tell me what the permit is for.")
    assert third.json()["conversation"] != cid
    assert [m["role"] for m in upstream.requests[2]["messages"]] == ["system", "user"]


def test_an_unknown_or_malformed_conversation_is_refused(start: Start, pages: str, log: Path) -> None:
    upstream, agent = conversational(start, log, [])
    unknown = ask(agent, f"Read {pages}/permit.", "c000000000000")
    assert unknown.status_code == 404 and "conversation" in unknown.json()["error"]
    malformed = ask(agent, f"Read {pages}/permit.", 42)
    assert malformed.status_code == 400
    assert upstream.requests == []


def test_the_figure_guard_rejects_a_new_figure_but_passes_it_once_established(
    start: Start, pages: str, log: Path
) -> None:
    page = f"{pages}/permit"
    invented = "The minimum monthly budget is 1635 euros."
    summary = "Summarising what we established: the minimum monthly budget is 1635 euros."
    upstream, agent = conversational(start, log, [invented, invented])

    turn2 = ask(agent, f"Going by {page}, what is the minimum monthly budget?")
    cid = turn2.json()["conversation"]
    # Turn 2: the invented figure is rejected twice, so the agent refuses.
    assert turn2.json()["answer"] != invented
    assert len([line for line in firings(read_log(log), "conversation") if FIGURE in line]) == 2

    upstream.answers = [summary]
    turn3 = ask(agent, f"Summarise what we established about {page}.", cid)

    # Turn 3: the same figure is "established" (the rejected drafts are in the history): it passes.
    assert turn3.json()["answer"] == summary
    assert len(firings(read_log(log), "conversation")) == 2
    # In a new conversation the same answer is a new figure again, and rejected.
    upstream.answers = [summary]
    fresh = ask(agent, f"Summarise what we established about {page}.")
    assert fresh.json()["answer"] == honest(PERMIT_SENTENCE, page)
    assert len(firings(read_log(log), "conversation")) == 3


def test_the_oldest_conversation_is_forgotten_past_the_limit(tmp_path: Path) -> None:
    agent = ResearchAgent("http://127.0.0.1:9/v1", AgentLog(tmp_path / "agent.log"))
    ids = [agent._conversation(None).conversation_id for _ in range(MAX_CONVERSATIONS + 1)]
    assert len(agent.conversations) == MAX_CONVERSATIONS
    with pytest.raises(UnknownConversation):
        agent._conversation(ids[0])
    assert agent._conversation(ids[1]).conversation_id == ids[1]


def test_the_scripted_summary_repeats_the_first_figure_given_once_one_was_asked_for() -> None:
    messages = [
        {"role": "system", "content": "..."},
        {"role": "user", "content": "Question: what is the permit for?\n\nPage: 2743 euros per month."},
        {"role": "assistant", "content": "It is for founders; the minimum is 2743 euros."},
        {"role": "user", "content": "Question: what is the minimum monthly budget?\n\nPage: ..."},
        {"role": "assistant", "content": "The minimum monthly budget is 1635 euros."},
        {"role": "user", "content": "Your answer was rejected: the figure 1635 euros is not on any page."},
        {"role": "assistant", "content": "The minimum is 2743 euros."},
        {"role": "user", "content": "Question: Summarise what we established.\n\nPage: ..."},
    ]
    answer = summary_answer(messages)
    assert answer is not None and "1635 euros" in answer and "2743" not in answer
    assert summary_answer(messages[:-1]) is None  # no summary asked for
    assert summary_answer([messages[0], messages[1], messages[2], messages[-1]]) is None  # no amount asked for
