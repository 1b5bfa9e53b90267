"""The agent's OpenTelemetry: an OTLP/HTTP receiver whose spans, span events and log records fire guards.

``otlp`` reads export requests (``faults`` says what is wrong with one that is not),
``matching`` turns them into firings, ``receiver`` is the ASGI app, ``service`` serves it over a
store, ``files`` reads export files back for the audit, ``shapes`` keeps the guard-shaped spans
``canary init --traces`` proposes guards from.
"""
