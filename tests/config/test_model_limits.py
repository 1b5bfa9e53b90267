"""``[model] max_body`` and URLs shown without their userinfo (``canary check``, config errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.config.settings import ModelConfig, load_config
from canary.config.summary import summarize
from canary.config.urls import redact_url
from tests.config.test_config import problems_of, write_config

AGENT = '[agent]\nurl = "http://agent-user:agent-pw@127.0.0.1:8700/ask"\n'


@pytest.mark.parametrize(("value", "size"), [
    (None, 64 * 1024 * 1024),
    ("1048576", 1_048_576),
    ('"64 MiB"', 64 * 2**20),
    ('"512KiB"', 512 * 1024),
    ('"2 MB"', 2_000_000),
    ('"1.5 GiB"', int(1.5 * 2**30)),
])
def test_max_body_reads_bytes_and_units(tmp_path: Path, value: str | None, size: int) -> None:
    line = f"max_body = {value}\n" if value is not None else ""
    path = write_config(tmp_path, f'[model]\nupstream = "http://127.0.0.1:11434"\n{line}')
    assert load_config(path=path).model.max_body == size == (size if value else ModelConfig.max_body)


@pytest.mark.parametrize(("value", "says"), [
    ('"lots"', "expected a size in bytes like 67108864 or '64 MiB'"),
    ("0", "at least one byte"),
    ("-5", "at least one byte"),
    ("true", "expected a size in bytes"),
    ('"64 MiBs"', "expected a size in bytes"),
])
def test_a_bad_max_body_names_the_key_and_the_problem(tmp_path: Path, value: str, says: str) -> None:
    path = write_config(tmp_path, f"[model]\nmax_body = {value}\n")
    problems = problems_of(path)
    assert [p.key for p in problems] == ["model.max_body"]
    assert says in problems[0].message


def test_check_shows_urls_without_their_credentials(tmp_path: Path) -> None:
    text = (AGENT + '[model]\nupstream = "http://model-user:model-pw@127.0.0.1:11434"\n'
            '[store]\nurl = "postgresql://db-user:db-pw@127.0.0.1/canary"\n')
    summary = summarize(load_config(path=write_config(tmp_path, text)))
    for secret in ("agent-pw", "model-pw", "db-pw", "agent-user", "model-user", "db-user"):
        assert secret not in summary
    assert "POST http://***@127.0.0.1:8700/ask" in summary
    assert "relays to http://***@127.0.0.1:11434" in summary
    assert "store    postgresql+psycopg://***@127.0.0.1/canary" in summary  # read as psycopg's


def test_a_config_error_about_a_url_does_not_repeat_its_password(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[model]\nupstream = "ftp://user:hunter2@127.0.0.1/x"\n')
    problems = problems_of(path)
    assert [p.key for p in problems] == ["model.upstream"]
    assert "hunter2" not in problems[0].message and "ftp://***@127.0.0.1/x" in problems[0].message


@pytest.mark.parametrize(("text", "shown"), [
    ("http://u:p@h:1/x", "http://***@h:1/x"),
    ("http://h:1/a@b", "http://h:1/a@b"),  # an @ in the path is not userinfo
    ("http://u:p@ss@h/x?y=@z", "http://***@h/x?y=@z"),
    ("at http://a:b@h and https://c@d/e", "at http://***@h and https://***@d/e"),
    ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
])
def test_redact_url(text: str, shown: str) -> None:
    assert redact_url(text) == shown


def test_ca_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    import trustme

    trustme.CA().cert_pem.write_to_path(str(tmp_path / "internal-ca.pem"))
    path = write_config(tmp_path, '[model]\nupstream = "https://gateway.internal"\nca_file = "internal-ca.pem"\n')
    assert load_config(path=path).model.ca_file == str(tmp_path / "internal-ca.pem")
    assert ModelConfig.ca_file is None


@pytest.mark.parametrize(("content", "says"), [
    (None, "no such file"),
    ("not a certificate\n", "holds no CA certificate the proxy can read"),
])
def test_a_bad_ca_file_names_the_key_and_the_problem(tmp_path: Path, content: str | None, says: str) -> None:
    if content is not None:
        (tmp_path / "ca.pem").write_text(content)
    path = write_config(tmp_path, '[model]\nupstream = "https://gateway.internal"\nca_file = "ca.pem"\n')
    problems = problems_of(path)
    assert [p.key for p in problems] == ["model.ca_file"]
    assert says in problems[0].message and "ca.pem" in problems[0].message
