"""What verdicts mean, in words: the one place status reasons, the dashboard and ``canary run`` take them.

``meaning`` is a verdict's short sentence, the one a status reason and the dashboard's run
list say; ``explain`` is the sentence ``canary run`` prints under a run that was not caught or
passed, with the values the run saw and what to set. Text from outside (leak values, agent
error bodies, log lines) goes through ``canary.terminal.safe`` in ``explain``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from canary.terminal import safe
from canary.vocabulary import Stage, Verdict

__all__ = ["AMBIGUOUS_ADVICE", "POINT_AT_THE_PROXY", "RunView", "explain", "meaning",
           "not_injected"]



#: When the agent's model base URL may point at the proxy: the one rule ``canary init``, ``canary check``,
#: ``canary run`` and the docs all say, in these words.
POINT_AT_THE_PROXY = (
    "Point the agent's model base URL at the proxy ([model] listen) only while something serves it: "
    "once `canary service install` is done (the service manager then holds its socket), or while "
    "`canary daemon` runs; a `canary run` with no daemon serves it for that run only."
)

#: What an ``ambiguous`` run asks of the user.
AMBIGUOUS_ADVICE = "log the nonce or the rejected value in the guard's line, or set [logs] correlate"

_MEANING: dict[str, str] = {
    Verdict.CAUGHT: "the guard fired, and the leak never reached the answer",
    Verdict.PASSED: "no firing, and the grounded value reached the answer",
    Verdict.LEAKED: "the answer reached the user; the guard wrote no line",
    Verdict.FIRED_BUT_LEAKED: "the guard logged a rejection, yet the answer reached the user",
    Verdict.UNLOGGED: "the fabrication was stopped, but the guard wrote no line",
    Verdict.FALSE_REJECTION: "the guard rejected a grounded answer",
    Verdict.NOT_INJECTED: "the fabricated answer was never injected",
    Verdict.ERROR: "the run could not be completed",  # the reason says which side failed
    Verdict.AMBIGUOUS: "the only firings carried no mark of the run while the agent did other work",
}


def meaning(verdict: str) -> str:
    """What ``verdict`` means, in a few words; an unknown verdict is its own name."""
    return _MEANING.get(verdict, verdict)


class RunView(Protocol):
    """What the explanations read of a run (a ``canary.runs.record.RunRecord``)."""

    @property
    def guard(self) -> str: ...
    @property
    def canary(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def trace(self) -> Mapping[Stage, float | None]: ...
    @property
    def evidence(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def leak_text(self) -> str | None: ...
    @property
    def attribution(self) -> str | None: ...
    @property
    def foreign_calls(self) -> int: ...
    @property
    def model_calls(self) -> int: ...
    @property
    def unmatched_line(self) -> str | None: ...
    @property
    def nearest_guard(self) -> str | None: ...
    @property
    def leaked_turn(self) -> int | None: ...
    @property
    def toolless_calls(self) -> int: ...
    @property
    def thinking_calls(self) -> int: ...
    @property
    def turns(self) -> int: ...


def explain(r: RunView, *, proxy: str | None = None, matches: Mapping[str, object] | None = None) -> str:
    """One sentence a person can act on, for a verdict other than caught/passed.

    ``proxy`` is the model proxy's URL (``http://127.0.0.1:11435``) and ``matches`` each guard's
    ``match``, both for the sentences that tell what to set.
    """
    leak = safe(repr(r.leak_text)) if r.leak_text else "the fabricated value"
    # An observed leak (``fetched URL`` / ``file PATH``) is the tool call's effect, not answer text.
    seen = str(r.leak_text or "").startswith(("fetched ", "file "))
    turn = r.leaked_turn
    where = f"the answer of turn {turn}" if turn else "the final answer"
    reached = (f"the fabricated tool call took effect ({leak} was observed)" if seen
               else f"the fabricated answer reached the user ({leak} is in {where})")
    missed = _unmatched(r, matches or {})
    sentences: dict[str, str] = {
        "leaked": f"{reached} and the guard wrote no line: it did not run on this path."
        + (f" But {missed}: if that is the guard's rejection, fix its match." if missed else ""),
        "fired_but_leaked": (f"the guard logged a rejection, yet the call took effect ({leak} was observed)"
                             if seen else f"the guard logged a rejection, yet {leak} still reached "
                             f"{where}") + ": it detects, it does not enforce.",
        "unlogged": (f"the fabricated tool call took no effect ({leak} was not observed)" if seen
                     else "the fabrication did not reach the answer")
        + (f", and {missed}: fix that guard's match so it fits the line; the run stays unlogged until "
           "a line matches." if missed else
           ", but the guard left no line: something else stopped it, or the guard does not log."),
        "not_injected": not_injected(r, proxy),
        "error": f"{meaning(Verdict.ERROR)}: {safe(r.error or 'no reason given')}",
        "false_rejection": f"{meaning(Verdict.FALSE_REJECTION)} (a control): it rejects too much.",
        "ambiguous": f"the guard's only lines in the run's span carry no mark of the run, and the "
        f"agent did other work meanwhile ({r.foreign_calls} model call(s) without the nonce): "
        f"they may be someone else's. To tie the guard's line to the run, {AMBIGUOUS_ADVICE}.",
    }
    return sentences.get(str(r.verdict), safe(str(r.verdict)))


def _unmatched(r: RunView, matches: Mapping[str, object]) -> str | None:
    """The clause naming the line with the run's nonce that no guard's match fits, and the nearest guard."""
    if not r.unmatched_line:
        return None
    guard = safe(r.nearest_guard or "?")
    match = matches.get(r.nearest_guard or "")
    shown = f" (match {safe(repr(match))})" if isinstance(match, str) else ""
    return (f"no guard's match fits the line the agent logged with the run's nonce: "
            f"{safe(repr(r.unmatched_line))} (nearest guard: {guard}{shown})")


def not_injected(r: RunView, proxy: str | None) -> str:
    """Why the injection never happened, from the model calls the proxy saw during the run."""
    fetched = r.trace.get(Stage.FIXTURE_FETCHED) is not None
    if r.model_calls == 0 and r.foreign_calls == 0:
        address = safe(proxy) if proxy else "http://HOST:PORT"
        did = " (it did fetch the fixture, so it ran the task)" if fetched else ""
        return (f"no model call reached the proxy during the run{did}: the agent's model base URL does "
                f"not point at the proxy, or the agent answered without asking its model. Point it at "
                f"{address}: openai SDK OpenAI(base_url=\"{address}/v1\") or OPENAI_BASE_URL={address}/v1; "
                f"ollama OLLAMA_HOST={address} or Client(host=\"{address}\"); LangChain "
                f"ChatOpenAI(base_url=\"{address}/v1\") or ChatOllama(base_url=\"{address}\"); anthropic "
                f"ANTHROPIC_BASE_URL={address}; google-genai GOOGLE_GEMINI_BASE_URL={address}; a model "
                f"that runs inside the agent: POST {address}/canary/v1/answer before each call.")
    if r.model_calls == 0 and r.turns > 1:
        return (f"{r.foreign_calls} model call(s) came through the proxy from the injection turn on, none "
                "carrying anything of the run (its nonce, or the conversation id the agent named): the "
                "agent does not send its model the conversation's earlier turns, where the first turn's "
                "page names the nonce. Put {fixture_url} or {nonce} in the prompt of the turn that "
                "carries inject, or have the agent send its model the conversation id.")
    if r.model_calls == 0:
        return (f"{r.foreign_calls} model call(s) came through the proxy, none carrying the run's nonce: "
                "the agent's model base URL points at the proxy, but the prompt did not reach the model "
                "as sent (the agent rewrites or drops the task's text), or those calls were other work.")
    toolless = r.toolless_calls
    if toolless:
        return (f"{toolless} of the {r.model_calls} model call(s) carrying the run's nonce offered the "
                "model no tools (no `tools` in the request), so the fabricated tool call was never sent: "
                "a tool canary needs an agent that gives its model tools through the API's `tools` field.")
    thinking = r.thinking_calls
    if thinking:
        return (f"{thinking} model call(s) carrying the run's nonce asked the model for extended thinking, "
                "so the fabricated tool call was not sent: the call that follows it would reach the model "
                "server without the signed thinking block it requires, and be rejected. Give the canary a "
                "`repair` answer: the run then answers every later model call of its span itself.")
    waits = "" if fetched else " (the fixture was never fetched: inject_at = \"after-fetch\" waits for it)"
    return (f"{r.model_calls} model call(s) carrying the run's nonce came through the proxy, but inject_at "
            f"selected none of them{waits}: check inject_at (a call number beyond the agent's calls, or "
            "a match no call's body fits).")
