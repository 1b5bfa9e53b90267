"""A log line full of escape sequences, through ``canary run`` in a real pty: shown, never obeyed."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from canary.demo.live import free_port

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs a pty")

ESCAPES = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J"
#: What canary writes on a terminal: SGR colours, and the live lines' cursor moves (hide/show the
#: cursor, up N lines, erase a line). Nothing else may carry an ESC: no OSC, no clear screen.
SGR = re.compile(rb"\x1b\[(?:[0-9;]*m|\?25[lh]|[0-9]*A|2K)")

AGENT = r'''
import sys, time
time.sleep(1)  # an agent takes a moment; the run follows the log from its end as of the start
prompt, nonce = sys.argv[1], sys.argv[2]
if "break" in prompt:
    sys.stderr.write("upstream failed \x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\n")
    sys.exit(1)
with open(sys.argv[3], "a", encoding="utf-8") as log:
    log.write(f"{ESCAPES} task={nonce} CitationGuard: rejected https://{nonce}.example.org/permit\n")
print("I could not verify that source.")
'''.replace("{ESCAPES}", ESCAPES.encode("unicode_escape").decode())


def write_project(root: Path) -> None:
    (root / "agent.py").write_text(AGENT, encoding="utf-8")
    (root / "agent.log").write_text("")
    (root / "defs").mkdir()
    (root / "defs" / "citation.toml").write_text(
        """[guard]
name = "citation"
match = 'CitationGuard: rejected'
[[canary]]
name = "fake-url"
every = "6h"
prompt = "Read {fixture_url} please"
fixture = "<p>The minimum is {true_number} euros.</p>"
inject = "The minimum is {true_number} euros. Source: https://{nonce}.example.org/permit"
leak = "{nonce}.example.org"
timeout = "20s"
""")
    (root / "defs" / "broken.toml").write_text(
        """[guard]
name = "broken"
match = 'BrokenGuard: rejected'
[[canary]]
name = "break"
every = "6h"
prompt = "please break {fixture_url}"
fixture = "<p>{true_number}</p>"
inject = "x {nonce}"
leak = "{nonce}"
timeout = "20s"
""")
    command = [sys.executable, str(root / "agent.py"), "{prompt}", "{nonce}", str(root / "agent.log"), "{inject}"]
    (root / "canary.toml").write_text(
        f"""defs = ["defs/*.toml"]
[agent]
command = {json.dumps(command)}
timeout = "20s"
[model]
listen = "127.0.0.1:{free_port()}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[logs]
paths = ["agent.log"]
[store]
url = "sqlite:///{(root / 'canary.db').as_posix()}"
[daemon]
control = "127.0.0.1:{free_port()}"
""")


def run_in_pty(argv: list[str], cwd: Path, timeout: float = 120,
               env: dict[str, str] | None = None) -> tuple[int, bytes]:
    """Run a command with a real terminal on stdin, stdout and stderr; return its code and every byte."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env=env)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out; output so far: {bytes(out)!r}")
        return proc.wait(30), bytes(out)
    finally:
        os.close(master)


@pytest.mark.slow
def test_canary_run_in_a_pty_shows_escapes_and_never_sends_them(tmp_path: Path) -> None:
    write_project(tmp_path)
    canary = str(Path(sys.executable).with_name("canary"))
    code, out = run_in_pty([canary, "run"], tmp_path)
    text = out.decode("utf-8", "replace")
    assert "CAUGHT" in text and "ERROR" in text, text
    # The escapes are there, as visible text, in the evidence and in the agent's error body ...
    assert "\\x1b]0;PWNED\\x07" in text
    assert "\\x1b]52;c;cHduZWQ=" in text
    assert text.count("\\x1b[2J") >= 2, text
    # ... and the only ESC bytes written are colours and cursor moves: no OSC, no BEL, no clear screen.
    rest = SGR.sub(b"", out)
    assert b"\x1b" not in rest and b"\x07" not in rest and b"\x9b" not in rest, rest
    assert code == 1  # one caught, one error


@pytest.mark.slow
def test_run_json_keeps_the_exact_text(tmp_path: Path) -> None:
    write_project(tmp_path)
    canary = str(Path(sys.executable).with_name("canary"))
    done = subprocess.run([canary, "run", "citation", "--json"], cwd=tmp_path, capture_output=True,
                          timeout=120, check=False)
    assert b"\x1b" not in done.stdout  # JSON escapes it ...
    runs = json.loads(done.stdout)["runs"]
    assert runs[0]["verdict"] == "caught"
    assert runs[0]["evidence"].startswith(ESCAPES)  # ... and keeps it exactly


#: Every character that reorders the text around it on a terminal: embeddings, overrides, isolates, marks.
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_canary_init_shows_bidirectional_overrides_escaped(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from canary.cli.main import main

    log = tmp_path / "agent.log"
    log.write_text("".join(f"2026-11-30T10:00:0{n}Z WARN CitationGuard: rejected {BIDI}gpj.exe page "
                           "url=http://x.example.org/\n" for n in range(3)), encoding="utf-8")
    result = CliRunner().invoke(main, ["init", "--yes", "--logs", str(log), "--agent-url", "http://127.0.0.1:9/ask"])
    assert result.exit_code == 0, result.output
    assert "CitationGuard: rejected" in result.output
    assert not set(BIDI) & set(result.output), [c for c in result.output if c in BIDI]
    assert "\\u202e" in result.output  # shown, as the other controls are
    written = "".join(p.read_text(encoding="utf-8") for p in [tmp_path / "canary.toml",
                                                               *(tmp_path / "canaries_defs").glob("*.toml")])
    assert "CitationGuard" in written
    assert not set(BIDI) & set(written), [c for c in written if c in BIDI]  # nor in the files (cat, diff)


@pytest.mark.slow
def test_canary_run_shows_bidirectional_overrides_in_evidence_escaped(tmp_path: Path) -> None:
    write_project(tmp_path)
    agent = (tmp_path / "agent.py").read_text()
    (tmp_path / "agent.py").write_text(agent.replace("task={nonce}", BIDI.encode("unicode_escape").decode()
                                                     + "task={nonce}"))
    canary = str(Path(sys.executable).with_name("canary"))
    done = subprocess.run([canary, "run", "citation"], cwd=tmp_path, capture_output=True, timeout=120,
                          check=False, env={**os.environ, "COLUMNS": "400"})
    text = done.stdout.decode()
    assert "CAUGHT" in text, text + done.stderr.decode()
    assert not set(BIDI) & set(text), [c for c in text if c in BIDI]
    assert "\\u202e" in text
