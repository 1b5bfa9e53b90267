"""The fast path's request and response heads, written as bytes.

A relayed request keeps the client's method, target (after the origin's base path) and headers,
less hop-by-hop ones and those a ``Connection`` header names; ``Host`` is the origin's, and
the framing is the one the body goes with. A relayed response keeps its status, its reason
phrase and its headers less hop-by-hop ones (names in lower case, as the ASGI path writes
them); a body of unknown length goes back chunked.
"""

from __future__ import annotations

from collections.abc import Iterable

from canary.proxy import dialects

__all__ = ["error_response", "request_head", "response_head"]

Headers = list[tuple[bytes, bytes]]

# RFC 9110 §7.6.1 hop-by-hop headers, plus the framing headers the proxy writes itself.
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization",
    b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade",
})
# ``expect`` too: the proxy has already answered any 100-continue.
_REQUEST_DROP = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
_RESPONSE_DROP = _HOP_BY_HOP | {b"content-length"}


def connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names listed in ``Connection:``; they are hop-by-hop too."""
    names: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b","))
    return frozenset(names)


def request_head(
    method: bytes, target: bytes, headers: Headers, *, host: bytes | None, framing: bytes,
    authorization: bytes | None,
) -> bytes:
    """The head of a relayed request; ``framing`` is its ``content-length``/``transfer-encoding`` line(s)."""
    named = connection_tokens(headers) if any(n.lower() == b"connection" for n, _ in headers) else ()
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    authorized = False
    for name, value in headers:
        low = name.lower()
        if low == b"host" and host is None:
            lines += [name, b": ", value, b"\r\n"]
            continue
        if low in _REQUEST_DROP or low in named:
            continue
        if low == b"authorization":
            authorized = True
        lines += [name, b": ", value, b"\r\n"]
    if host is not None:
        lines += [b"host: ", host, b"\r\n"]
    if authorization is not None and not authorized:
        lines += [b"authorization: ", authorization, b"\r\n"]
    lines += [framing, b"\r\n"]
    return b"".join(lines)


def response_head(
    status: int, reason: bytes, headers: Headers, *, keep_length: bool, chunked: bool, close: bool
) -> bytes:
    """The head of a relayed response."""
    named = connection_tokens(headers) if any(n.lower() == b"connection" for n, _ in headers) else ()
    lines = [b"HTTP/1.1 %d " % status, reason, b"\r\n"]
    for name, value in headers:
        low = name.lower()
        if (low in _RESPONSE_DROP and not (keep_length and low == b"content-length")) or low in named:
            continue
        lines += [low, b": ", value, b"\r\n"]
    if chunked:
        lines.append(b"transfer-encoding: chunked\r\n")
    if close:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


_REASONS = {400: b"Bad Request", 403: b"Forbidden", 408: b"Request Timeout", 413: b"Content Too Large",
            502: b"Bad Gateway", 503: b"Service Unavailable", 504: b"Gateway Timeout"}


def error_response(path: str, status: int, kind: str, message: str, *, close: bool = False,
                   retry_after: int | None = None, client_retries: bool = False) -> bytes:
    """A whole error response in the dialect ``path`` speaks (see ``canary.proxy.relay.send_error``).

    It tells SDKs not to retry (``x-should-retry: false``), unless it names ``retry_after``, or
    ``client_retries`` leaves the choice to the client's own policy, as a direct call's failure would.
    """
    body = dialects.error_body(path, status, kind, message)
    headers = [b"HTTP/1.1 %d " % status, _REASONS.get(status, b"Error"), b"\r\n",
               b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body)]
    if retry_after is not None:
        headers.append(b"retry-after: %d\r\n" % retry_after)
    elif not client_retries:
        headers.append(b"x-should-retry: false\r\n")
    if close:
        headers.append(b"connection: close\r\n")
    return b"".join([*headers, b"\r\n", body])


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


#: The end of a chunked body.
LAST_CHUNK = b"0\r\n\r\n"
