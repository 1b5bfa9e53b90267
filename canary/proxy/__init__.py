"""The model proxy and its dialects, the fixture server, and serving ASGI apps on loopback."""
