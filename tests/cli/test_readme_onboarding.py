"""The README's onboarding, rehearsed: the built wheel in a fresh venv, run from a folder of its own.

The ``canary`` lines of the README's "Onboard your agent" block run as written, with its example
addresses replaced by those of a small agent started by the test (``tests/cli/readme_agent.py``,
a real HTTP server whose citation guard logs its rejections). The one manual step, pointing the
agent's model base URL at ``[model] listen``, is done by writing the proxy address the agent was
started with into ``canary.toml``. ``canary daemon`` (the README's "second terminal") runs in the
background until the end; ``canary run`` then goes through it, and the rehearsal ends in the run's
real verdicts and the status the daemon's store gives the guard.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.demo.live import free_port

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).with_name("readme_agent.py")


def readme_steps() -> list[str]:
    """The ``canary`` command lines of the README's onboarding block, continuation lines joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Onboard your agent", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    onboarding = next(b for b in blocks if "canary init --agent-url" in b)
    joined = re.sub(r"\\\n\s*", " ", onboarding)
    return [line.split(" #", 1)[0].strip() for line in joined.splitlines() if line.startswith("canary ")]


def install_wheel(tmp: Path) -> Path:
    """Build the wheel and install it into a fresh venv (from uv's cache when it can); its ``canary``."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    dist = tmp / "dist"
    subprocess.run([uv, "build", "--wheel", "--out-dir", str(dist), str(ROOT)], check=True,
                   capture_output=True, timeout=120)
    (wheel,) = dist.glob("*.whl")
    env_dir = tmp / "venv"
    subprocess.run([uv, "venv", "--python", sys.executable, str(env_dir)], check=True, capture_output=True,
                   timeout=60)
    python = env_dir / "bin" / "python"
    install = [uv, "pip", "install", "--python", str(python), str(wheel)]
    offline = subprocess.run([*install, "--offline"], check=False, capture_output=True, timeout=120)
    if offline.returncode != 0:
        subprocess.run(install, check=True, capture_output=True, timeout=300)
    return env_dir / "bin" / "canary"


@contextlib.contextmanager
def running_daemon(argv: list[str], project: Path, env: dict[str, str], tmp: Path) -> Iterator[None]:
    """``canary daemon`` in the background until ``canary status --json`` says it runs; killed at the end."""
    log = (tmp / "daemon.out").open("wb")
    with log, subprocess.Popen(argv, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT) as proc:
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, (tmp / "daemon.out").read_text(errors="replace")
                probe = subprocess.run([argv[0], "status", "--json"], cwd=project, env=env, capture_output=True,
                                       text=True, timeout=60, check=False)
                if probe.stdout.strip() and json.loads(probe.stdout)["daemon"]["running"]:
                    break
                assert time.monotonic() < deadline, (tmp / "daemon.out").read_text(errors="replace")
                time.sleep(0.2)
            yield
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The small agent and its model server, in a process of their own, killed at the end."""
    project = tmp_path / "my-agent"
    (project / "logs").mkdir(parents=True)
    log = project / "logs" / "agent.log"
    log.touch()
    proxy = f"127.0.0.1:{free_port()}"
    ports = tmp_path / "ports.json"
    with subprocess.Popen([sys.executable, str(AGENT), str(ports), str(log), f"http://{proxy}"],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            deadline = time.monotonic() + 30
            while not (ports.is_file() and ports.read_text()) and proc.poll() is None:
                assert time.monotonic() < deadline, "the agent did not start"
                time.sleep(0.1)
            urls = json.loads(ports.read_text())
            yield {"project": str(project), "agent": urls["agent"], "model": urls["model"], "proxy": proxy}
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.mark.slow
def test_the_readmes_onboarding_ends_in_real_verdicts(tmp_path: Path, agent: dict[str, str]) -> None:
    steps = readme_steps()
    assert [s.split()[:2] for s in steps] == [["canary", "init"], ["canary", "templates"], ["canary", "init"],
                                              ["canary", "check"], ["canary", "daemon"], ["canary", "run"],
                                              ["canary", "status"]]
    canary = install_wheel(tmp_path)
    project = Path(agent["project"])
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG" and k != "VIRTUAL_ENV"}
    examples = {"http://127.0.0.1:8700/ask": f"{agent['agent']}/ask", "~/Library/Logs/MyAgent/*.log": "logs/*.log",
                "http://127.0.0.1:11434": agent["model"]}
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    with contextlib.ExitStack() as daemons:
        for step in steps:
            argv = shlex.split(step)
            argv = [examples.get(arg, arg) for arg in argv]
            if argv[1] == "check":  # the manual step: the agent's model base URL is this proxy address
                config = project / "canary.toml"
                text = re.sub(r'(\[model\][^\[]*?listen = )"[^"]*"', rf'\1"{agent["proxy"]}"', config.read_text())
                text = re.sub(r'(\[fixtures\][^\[]*?listen = )"[^"]*"', rf'\1"127.0.0.1:{free_port()}"', text)
                config.write_text(text)
            if argv[1] == "daemon":
                daemons.enter_context(running_daemon([str(canary), *argv[1:]], project, env, tmp_path))
                continue
            done = subprocess.run([str(canary), *argv[1:]], cwd=project, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=120, check=False)
            outputs[step] = done
            if argv[1] not in ("run", "status"):
                assert done.returncode == 0, (step, done.stdout, done.stderr)

    listed = outputs[steps[1]].stdout
    assert "citation" in listed and "quote_fused" in listed
    assert str(ROOT) not in listed, "templates read from the checkout, not the install"
    assert sorted(p.name for p in (project / "canaries_defs").iterdir()) == ["citation.toml", "quote_fused.toml"]
    assert "guards   2" in outputs[steps[3]].stdout
    run = outputs[steps[5]]
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[1]: line.split()[2] for line in run.stdout.splitlines() if line.startswith("citation ")}
    assert rows == {"fake-url": "CAUGHT", "real-url-control": "PASSED"}, run.stdout
    # the guard's own line is the evidence, for whichever variant the daemon's own first runs left to this one
    assert re.search(r"CitationGuard: rejected url=https?://(www\.)?[a-z0-9]", run.stdout), run.stdout
    assert "no daemon runs" not in run.stderr, run.stderr  # it went through the daemon
    status = outputs[steps[6]]
    assert status.returncode in (0, 1), status.stdout + status.stderr
    assert "no daemon is collecting" not in status.stdout, status.stdout
    verdicts = {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()[1:] if line.strip()}
    assert verdicts["citation"] in ("QUIET", "ALIVE"), status.stdout  # caught just now, no organic firing


@pytest.mark.slow
def test_the_installed_init_refuses_a_checkout(tmp_path: Path) -> None:
    """The README says init refuses the clone: so it does for the installed command, not only ``uv run``."""
    canary = install_wheel(tmp_path)
    clone = tmp_path / "guard-canary"
    shutil.copytree(ROOT / "canaries_defs", clone / "canaries_defs")
    shutil.copyfile(ROOT / "pyproject.toml", clone / "pyproject.toml")
    env = {k: v for k, v in os.environ.items() if k not in ("CANARY_CONFIG", "VIRTUAL_ENV")}
    done = subprocess.run([str(canary), "init", "--yes", "--agent-url", "http://127.0.0.1:9/ask"], cwd=clone,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "guard-canary's own folder" in done.stderr
    assert not (clone / "canary.toml").exists()


def test_the_install_section_says_what_to_do_when_uv_warns_of_path() -> None:
    """``uv tool install`` warns when its tool folder is not on PATH: the README says what to run then."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Install"):readme.index("## Onboard your agent")]
    assert "uv tool update-shell" in install
    assert "not on your PATH" in install
    assert "canary --version" in install
