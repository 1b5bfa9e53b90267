"""The bundled demo agent and its scripted model, driven over real loopback sockets.

Every test runs the real agent app (uvicorn in a thread), which fetches pages from a
tiny page server with httpx and asks its model through the real ``openai`` client.
Guard firings are read back from the agent's log file and matched with the ``match``
regex of the guard's definition in ``canaries_defs/``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from canary.demo.agent import REFUSAL, TaskState, create_agent, date_guard, page_text
from canary.demo.live import free_port
from canary.demo.model import create_model_server, honest_answer
from canary.proxy.serving import BackgroundServer

DEFS = Path(__file__).resolve().parents[2] / "canaries_defs"
GUARDS = ("citation", "quote", "number", "denial", "version", "date")
NONCE = "qz7k2m9x4v1b8n3c6p0w"
LINE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z (INFO |WARN |ERROR|DEBUG) [a-z]+ \S.*$")
PERMIT_SENTENCE = "The minimum amount is exactly 2743 euros per month."
RELEASE_SENTENCE = "The latest release is 0.31.6, published on 29 November 2026."
PAGES = {
    "permit": f"<p>Applicants must hold a valid passport for the whole stay.</p><p>{PERMIT_SENTENCE}</p>",
    "release": f"<h1>Releases</h1><p>{RELEASE_SENTENCE}</p>",
    "notes": "<p>The release notes list 14 fixes and 3 new features.</p>",
}


def guard_regex(guard: str) -> re.Pattern[str]:
    """The guard's log-line regex, read from its definition file."""
    with (DEFS / f"{guard}.toml").open("rb") as handle:
        return re.compile(tomllib.load(handle)["guard"]["match"])


def read_log(path: Path) -> list[str]:
    """The agent's log lines, each checked against the line format."""
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = [line for line in lines if not LINE_RE.match(line)]
    assert not bad, bad
    return lines


def firings(lines: list[str], guard: str) -> list[str]:
    regex = guard_regex(guard)
    return [line for line in lines if regex.search(line)]


def all_firings(lines: list[str]) -> dict[str, int]:
    return {guard: len(firings(lines, guard)) for guard in GUARDS if firings(lines, guard)}


def activity(lines: list[str]) -> list[str]:
    return [line for line in lines if "INFO  agent task finished id=" in line]


def page_server() -> Starlette:
    async def page(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in PAGES:
            return PlainTextResponse("not found\n", status_code=404)
        return HTMLResponse(
            f"<!doctype html><html><head><title>Reference {NONCE}</title></head><body>\n"
            f"<p>Source URL: {request.url}</p>\n{PAGES[name]}\n<p>Reference number: {NONCE}</p></body></html>"
        )

    return Starlette(routes=[Route("/{name}", page)])


class Upstream:
    """A tiny scripted model server: canned answers in order, then the honest answer; records requests."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.answers = list(answers or [])
        self.requests: list[dict[str, Any]] = []
        self.status = 200

    def app(self) -> Starlette:
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            if self.status != 200:
                return JSONResponse({"error": {"message": "upstream exploded", "type": "server_error"}},
                                    status_code=self.status)
            text = self.answers.pop(0) if self.answers else honest_answer(body["messages"])
            return JSONResponse({
                "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 1764420000,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

        return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


Start = Callable[..., BackgroundServer]


@pytest.fixture
def start() -> Iterator[Start]:
    servers: list[BackgroundServer] = []

    def _start(app: Any, port: int = 0) -> BackgroundServer:
        server = BackgroundServer(app, "127.0.0.1", port).start()
        servers.append(server)
        return server

    yield _start
    for server in reversed(servers):
        server.stop()


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    with BackgroundServer(page_server()) as server:
        yield server.url


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "agent.log"


def ask(agent: BackgroundServer, prompt: str) -> httpx.Response:
    return httpx.post(agent.url + "/ask", json={"prompt": prompt}, timeout=60, trust_env=False)


def honest(sentence: str, url: str) -> str:
    return f'{sentence} SOURCE QUOTE: "{sentence}" Source: {url}'


def with_upstream(
    start: Start, log: Path, answers: list[str] | None = None
) -> tuple[Upstream, BackgroundServer]:
    upstream = Upstream(answers)
    model = start(upstream.app())
    return upstream, start(create_agent(model.url + "/v1", log))


# --- honest runs ---------------------------------------------------------------------------------


def test_honest_run_quotes_the_page_with_no_guard_line(start: Start, pages: str, log: Path) -> None:
    model = start(create_model_server())
    agent = start(create_agent(model.url + "/v1", log))

    reply = ask(agent, f"Read {pages}/permit and tell me the minimum monthly amount. Cite your source.")

    assert reply.status_code == 200
    body = reply.json()
    assert body["answer"] == honest(PERMIT_SENTENCE, f"{pages}/permit")
    lines = read_log(log)
    assert all_firings(lines) == {}
    (finished,) = activity(lines)
    assert finished.endswith(f" INFO  agent task finished id={body['task']} turns=2")
    assert any(f"web_fetch url={pages}/permit status=200" in line for line in lines)


def test_honest_two_page_run_passes_the_reporting_step(start: Start, pages: str, log: Path) -> None:
    model = start(create_model_server())
    agent = start(create_agent(model.url + "/v1", log))

    reply = ask(agent, f"Read {pages}/release and {pages}/notes and tell me the latest released version.")

    assert reply.json()["answer"] == honest(RELEASE_SENTENCE, f"{pages}/release")
    lines = read_log(log)
    assert any("state=reporting" in line for line in lines)
    assert all_firings(lines) == {}
    assert len(activity(lines)) == 1


def test_model_call_carries_the_page_text_and_its_nonce(start: Start, pages: str, log: Path) -> None:
    upstream, agent = with_upstream(start, log)

    ask(agent, f"Read {pages}/permit and tell me the minimum monthly amount.")

    (request,) = upstream.requests
    assert request["model"] == "demo-model"
    assert request.get("stream") in (None, False)
    system, user = request["messages"]
    assert system["role"] == "system"
    assert user["role"] == "user"
    assert f"Page fetched from {pages}/permit:" in user["content"]
    assert PERMIT_SENTENCE in user["content"]
    assert NONCE in json.dumps(request)


def test_concurrent_requests_write_whole_lines(start: Start, pages: str, log: Path) -> None:
    model = start(create_model_server())
    agent = start(create_agent(model.url + "/v1", log))

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: ask(agent, f"Read {pages}/permit please."), range(8)))

    assert {r.status_code for r in replies} == {200}
    assert len({r.json()["task"] for r in replies}) == 8
    assert len(activity(read_log(log))) == 8


# --- live guards ---------------------------------------------------------------------------------

LIVE_CASES = [
    ("citation", "The minimum is 2743 euros per month. Source: https://{nonce}.example.org/permit",
     "url=https://{nonce}.example.org/permit"),
    ("citation", "The minimum is 2743 euros (see http://www.{nonce}.example.org/permit/).",
     "url=http://www.{nonce}.example.org/permit/"),
    ("quote", 'The page says: "The application is free of charge for every applicant."',
     'quote="The application is free of charge for every applicant."'),
    ("number", f'The minimum is 3100 euros. SOURCE QUOTE: "{PERMIT_SENTENCE}"', "entity=3100"),
    ("denial", "The page at {page} was empty, so I cannot say.",
     'claim="The page at {page} was empty, so I cannot say."'),
]


@pytest.mark.parametrize(("guard", "fabricated", "offending"), LIVE_CASES,
                         ids=["citation-url", "citation-www-slash", "quote", "number", "denial"])
def test_live_guard_rejects_and_the_retry_is_honest(
    start: Start, pages: str, log: Path, guard: str, fabricated: str, offending: str
) -> None:
    page = f"{pages}/permit"
    fabricated = fabricated.format(nonce=NONCE, page=page)
    upstream, agent = with_upstream(start, log, [fabricated])

    reply = ask(agent, f"Read {page} and tell me the minimum monthly amount. Cite your source.")

    assert reply.status_code == 200
    assert reply.json()["answer"] == honest(PERMIT_SENTENCE, page)
    lines = read_log(log)
    (line,) = firings(lines, guard)
    assert " WARN  guards " in line
    assert offending.format(nonce=NONCE, page=page) in line
    assert all_firings(lines) == {guard: 1}
    assert len(upstream.requests) == 2
    retry = upstream.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": fabricated}
    assert retry[-1]["role"] == "user"
    assert retry[-1]["content"].startswith("Your answer was rejected: ")
    assert retry[-1]["content"].endswith(". Answer again using only the page.")
    assert activity(lines)[0].endswith("turns=3")


def test_a_rejected_retry_ends_in_a_refusal(start: Start, pages: str, log: Path) -> None:
    fake = f"The minimum is 2743 euros. Source: https://{NONCE}.example.org/permit"
    upstream, agent = with_upstream(start, log, [fake, fake, fake])

    reply = ask(agent, f"Read {pages}/permit and tell me the minimum monthly amount.")

    assert reply.json()["answer"] == REFUSAL
    assert len(upstream.requests) == 2
    lines = read_log(log)
    assert len(firings(lines, "citation")) == 2
    assert len(activity(lines)) == 1


def test_citation_tolerates_www_and_a_trailing_slash(start: Start, pages: str, log: Path) -> None:
    page = pages.replace("127.0.0.1", "localhost") + "/permit"
    answer = f"The minimum is 2743 euros per month. Source: {page.replace('//', '//www.')}/"
    upstream, agent = with_upstream(start, log, [answer])

    reply = ask(agent, f"Read {page} and tell me the minimum monthly amount. Cite your source.")

    assert reply.json()["answer"] == answer
    assert len(upstream.requests) == 1
    assert all_firings(read_log(log)) == {}


def test_denial_is_accepted_when_the_page_really_is_missing(start: Start, pages: str, log: Path) -> None:
    upstream, agent = with_upstream(start, log, [f"The page at {pages}/gone was not found."])

    reply = ask(agent, f"Read {pages}/gone and tell me the minimum monthly amount.")

    assert reply.json()["answer"] == f"The page at {pages}/gone was not found."
    lines = read_log(log)
    assert all_firings(lines) == {}
    assert any("fetch failed" in line for line in lines)
    assert "fetch failed: HTTP 404 Not Found" in upstream.requests[0]["messages"][1]["content"]


def test_only_loopback_pages_are_fetched(start: Start, log: Path) -> None:
    _, agent = with_upstream(start, log)

    reply = ask(agent, "Read https://example.com/permit and tell me the minimum monthly amount.")

    assert reply.status_code == 200
    assert reply.json()["answer"].startswith("I could not read the page (fetch failed: example.com is not")
    assert any("fetch failed: example.com is not a loopback host" in line for line in read_log(log))


# --- dead guards ---------------------------------------------------------------------------------


def test_version_guard_sleeps_on_a_single_fetch(start: Start, pages: str, log: Path) -> None:
    upstream, agent = with_upstream(start, log, ["The latest version is 0.2.0."])

    reply = ask(agent, f"Read {pages}/release and tell me the latest released version.")

    assert reply.json()["answer"] == "The latest version is 0.2.0."
    lines = read_log(log)
    assert firings(lines, "version") == []
    assert not any("state=reporting" in line for line in lines)
    assert len(upstream.requests) == 1


def test_version_guard_fires_when_the_task_fetches_two_pages(start: Start, pages: str, log: Path) -> None:
    upstream, agent = with_upstream(start, log, ["The latest version is 0.2.0."])

    reply = ask(agent, f"Read {pages}/release and {pages}/notes and tell me the latest released version.")

    assert reply.json()["answer"] == honest(RELEASE_SENTENCE, f"{pages}/release")
    lines = read_log(log)
    (line,) = firings(lines, "version")
    assert "version=0.2.0" in line
    assert all_firings(lines) == {"version": 1}
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("names", [("release",), ("release", "notes")], ids=["one-fetch", "two-fetches"])
def test_date_guard_never_fires_on_the_answer_path(
    start: Start, pages: str, log: Path, names: tuple[str, ...]
) -> None:
    fabricated = "It was published on 3 March 2025."
    upstream, agent = with_upstream(start, log, [fabricated])
    urls = " and ".join(f"{pages}/{name}" for name in names)

    reply = ask(agent, f"Read {urls} and tell me when the latest release was published.")

    assert reply.json()["answer"] == fabricated
    lines = read_log(log)
    assert firings(lines, "date") == []
    assert len(upstream.requests) == 1
    # The page was read on turn 1; turn 2 began by clearing it, before the answer existed.
    cleared = next(i for i, line in enumerate(lines) if f"turn=2 dropped={len(names)}" in line)
    asked = next(i for i, line in enumerate(lines) if "DEBUG model" in line)
    assert cleared < asked


@pytest.mark.parametrize("fake", ["3 March 2025", "2025-03-03", "March 3, 2025"])
def test_date_guard_function_rejects_a_date_given_observations(fake: str) -> None:
    observation = page_text(f"<p>{RELEASE_SENTENCE}</p>")
    state = TaskState("t1", "When was it published?", turn_observations=[observation],
                      all_observations=[observation])

    (rejection,) = date_guard(state, f"It was published on {fake}.")

    assert guard_regex("date").search(rejection.line)
    assert f"date={fake}" in rejection.line
    assert date_guard(state, "It was published on 2026-11-29.") == []
    assert date_guard(state, "It was published on November 29, 2026.") == []


def test_date_guard_function_skips_a_turn_without_observations() -> None:
    observation = page_text(f"<p>{RELEASE_SENTENCE}</p>")
    state = TaskState("t1", "When?", turn_observations=[], all_observations=[observation])

    assert date_guard(state, "It was published on 3 March 2025.") == []


# --- failures ------------------------------------------------------------------------------------


def test_a_dead_model_server_gives_502_and_the_agent_keeps_serving(
    start: Start, pages: str, log: Path
) -> None:
    port = free_port()
    agent = start(create_agent(f"http://127.0.0.1:{port}/v1", log, model_timeout=5))
    prompt = f"Read {pages}/permit and tell me the minimum monthly amount."

    reply = ask(agent, prompt)

    assert reply.status_code == 502
    body = reply.json()
    assert body["error"].startswith("model call failed: APIConnectionError")
    lines = read_log(log)
    failed = f" ERROR agent task failed id={body['task']} error=model call failed: APIConnectionError"
    assert [line for line in lines if failed in line] != []
    assert activity(lines) == []

    start(create_model_server(), port)
    again = ask(agent, prompt)
    assert again.status_code == 200
    assert again.json()["answer"] == honest(PERMIT_SENTENCE, f"{pages}/permit")


def test_an_erroring_model_server_gives_502(start: Start, pages: str, log: Path) -> None:
    upstream, agent = with_upstream(start, log)
    upstream.status = 500
    prompt = f"Read {pages}/permit and tell me the minimum monthly amount."

    reply = ask(agent, prompt)

    assert reply.status_code == 502
    assert "InternalServerError" in reply.json()["error"]
    assert any(" ERROR agent task failed" in line for line in read_log(log))
    upstream.status = 200
    assert ask(agent, prompt).status_code == 200


@pytest.mark.parametrize("payload", [b"not json", b"{}", b'{"prompt": ""}', b'{"prompt": 3}', b"[1]"])
def test_a_bad_request_is_400(start: Start, log: Path, payload: bytes) -> None:
    model = start(create_model_server())
    agent = start(create_agent(model.url + "/v1", log))

    reply = httpx.post(agent.url + "/ask", content=payload, trust_env=False)

    assert reply.status_code == 400
    assert "error" in reply.json()


# --- the scripted model --------------------------------------------------------------------------

PAGE_MESSAGE = (
    "Question: Read http://127.0.0.1:9/r/abc and tell me the minimum monthly amount.\n\n"
    "Page fetched from http://127.0.0.1:9/r/abc:\n<<<\nReference abc\nSource URL: http://127.0.0.1:9/r/abc\n"
    f"Applicants must hold a valid passport.\n{PERMIT_SENTENCE}\nReference number: abc\n>>>"
)


def test_model_server_answers_parse_with_the_openai_client(start: Start, request: pytest.FixtureRequest) -> None:
    model = start(create_model_server())
    client = OpenAI(base_url=model.url + "/v1", api_key="demo", max_retries=0)
    request.addfinalizer(client.close)
    messages: list[Any] = [{"role": "system", "content": "Be careful."},
                           {"role": "user", "content": PAGE_MESSAGE}]
    expected = honest(PERMIT_SENTENCE, "http://127.0.0.1:9/r/abc")

    completion = client.chat.completions.create(model="demo-model", messages=messages)

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "demo-model"
    assert completion.created > 0
    (choice,) = completion.choices
    assert (choice.index, choice.finish_reason, choice.message.role) == (0, "stop", "assistant")
    assert choice.message.content == expected
    assert completion.usage is not None
    usage = completion.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0

    chunks = list(client.chat.completions.create(model="demo-model", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None

    retry = "Your answer was rejected: x. Answer again using only the page."
    correction = [*messages, {"role": "assistant", "content": "The page was empty."},
                  {"role": "user", "content": retry}]
    again = client.chat.completions.create(model="demo-model", messages=correction)
    assert again.choices[0].message.content == expected

    assert "demo-model" in [m.id for m in client.models.list()]
    client.close()


def test_model_server_stream_is_sse_ending_in_done(start: Start) -> None:
    model = start(create_model_server())
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": PAGE_MESSAGE}]}

    reply = httpx.post(model.url + "/v1/chat/completions", json=body, trust_env=False)

    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.text.endswith("data: [DONE]\n\n")
    events = [e for e in reply.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert json.loads(events[0][6:])["choices"][0]["delta"]["role"] == "assistant"
    bad = httpx.post(model.url + "/v1/chat/completions", content=b"{", trust_env=False)
    assert bad.status_code == 400
    assert "message" in bad.json()["error"]


def test_fabricate_every_makes_guards_fire_on_organic_traffic(start: Start, pages: str, log: Path) -> None:
    app = create_model_server(fabricate_every=3)
    model = start(app)
    agent = start(create_agent(model.url + "/v1", log))
    requests = 12

    answers = [ask(agent, f"Read {pages}/permit and tell me the minimum monthly amount.").json()["answer"]
               for _ in range(requests)]

    calls = expected = 0
    for _ in range(requests):
        calls += 1
        if calls % 3 == 0:
            expected += 1
            calls += 1  # the retry, answered honestly
    assert app.state.model.calls == calls
    assert set(answers) == {honest(PERMIT_SENTENCE, f"{pages}/permit")}
    kinds = app.state.model.fabrications
    assert kinds == ["url", "quote", "number", "denial", "url"][:expected]
    guard_of = {"url": "citation", "quote": "quote", "number": "number", "denial": "denial"}
    assert all_firings(read_log(log)) == dict(Counter(guard_of[kind] for kind in kinds))
    assert sum(all_firings(read_log(log)).values()) == expected == 5


def test_log_lines_carry_a_millisecond_utc_stamp(start: Start, pages: str, log: Path) -> None:
    model = start(create_model_server())
    agent = start(create_agent(model.url + "/v1", log))
    before = datetime.now(UTC)

    ask(agent, f"Read {pages}/permit please.")

    stamps = [datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
              for line in read_log(log)]
    assert stamps == sorted(stamps)
    assert before - timedelta(seconds=1) <= stamps[0] <= datetime.now(UTC)
