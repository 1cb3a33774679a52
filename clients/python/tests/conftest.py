"""Test fixtures: a fake server (in process) and the real ``gymserver serve`` with Docker.

Most client tests take the ``backend`` fixture, parametrized over both, so
every fake-backed test has a twin against the real server. The real server
is built once per session (``CGO_ENABLED=0 go build``) and started on
127.0.0.1:0 with a config listing both examples (absolute paths).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # import gymserver from source
sys.path.insert(0, str(HERE))

from fakeserver import FakeServer  # noqa: E402

REPO = HERE.parent.parent.parent
EXAMPLES = REPO / "examples"
SOLUTION = (EXAMPLES / "calculator_api" / "solution" / "app.py").read_text()
LISTEN_RE = re.compile(r"^listening on (\S+)$")


@dataclass
class Backend:
    """Backend is a running server the tests talk to."""

    kind: str  # "fake" or "live"
    url: str
    env: str = "calculator_api"
    token: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def solution_path(self) -> str:
        """solution_path is where the reference solution goes."""
        return "/workspace/app.py" if self.kind == "live" else "app.py"


@dataclass
class LiveServer:
    """LiveServer is a ``gymserver serve`` child process."""

    proc: subprocess.Popen
    addr: str
    stderr_lines: List[str]

    @property
    def url(self) -> str:
        """url is the server's ws:// URL."""
        return f"ws://{self.addr}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        """stop signals the server and waits for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _combined_config(tmp: Path) -> Path:
    envs: List[Dict[str, Any]] = []
    top: Dict[str, Any] = {}
    for name in ("calculator_api", "fix_inventory"):
        base = EXAMPLES / name
        cfg = json.loads((base / "config.json").read_text())
        if not top:
            top = {k: v for k, v in cfg.items() if k != "environments"}
        for env in cfg["environments"]:
            for key in ("copy_folders", "hidden_tests"):
                for item in env.get(key) or []:
                    item["src"] = str(base / item["src"])
            for item in (env.get("reference_solution") or {}).get("files") or []:
                item["src"] = str(base / item["src"])
            envs.append(env)
    # verifier_broken is calculator_api whose hidden tests collect nothing:
    # every evaluation is a masked verifier_error (for masked-sample tests).
    broken = json.loads(json.dumps(envs[0]))
    broken["id"] = "verifier_broken"
    broken["hidden_tests"] = [{"src": str(HERE / "data" / "no_tests"), "dest": "/workspace/tests"}]
    broken.pop("reference_solution", None)
    envs.append(broken)
    top["environments"] = envs
    path = tmp / "config.json"
    path.write_text(json.dumps(top, indent=2))
    return path


def start_live(binary: Path, config: Path, *extra: str, timeout: float = 120) -> LiveServer:
    """start_live starts ``gymserver serve`` on a free port and waits for its listening line."""
    proc = subprocess.Popen(
        [str(binary), "serve", "--config", str(config), "--addr", "127.0.0.1:0", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
    )
    lines: List[str] = []
    found: List[str] = []
    ready = threading.Event()

    def _pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip("\n")
            lines.append(line)
            m = LISTEN_RE.match(line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=_pump, daemon=True).start()
    ready.wait(timeout)
    if not found:
        proc.kill()
        proc.wait(10)
        raise RuntimeError("gymserver serve did not report its address:\n" + "\n".join(lines[-30:]))
    return LiveServer(proc=proc, addr=found[0], stderr_lines=lines)


def _docker_leftovers(pid: int) -> List[str]:
    """_docker_leftovers lists the containers still owned by the server process pid.

    A server labels its containers ``gymserver.owner=HOST:PID:RANDOM``; other
    servers on the same engine (other test runs) are not counted.
    """
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=gymserver.owner", "--format", '{{.ID}} {{.Label "gymserver.owner"}}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    mine = f"{socket.gethostname()}:{pid}:"
    return [line.split()[0] for line in out.stdout.splitlines() if len(line.split()) == 2 and line.split()[1].startswith(mine)]


@pytest.fixture(scope="session")
def live_env() -> Iterator[Dict[str, Path]]:
    """live_env builds the gymserver binary and the combined config.

    The live tests fail when the server cannot be built or started; set
    GYMSERVER_LIVE=0 to skip them on a machine without Go or Docker.
    """
    if os.environ.get("GYMSERVER_LIVE") == "0":
        pytest.skip("GYMSERVER_LIVE=0")

    def unavailable(why: str) -> None:
        pytest.fail(f"live server unavailable: {why}")

    if shutil.which("go") is None or shutil.which("docker") is None:
        unavailable("go or docker not on PATH")
    tmp = Path(tempfile.mkdtemp(prefix="gymserver-pytest-"))
    binary = tmp / "gymserver"
    env = dict(os.environ, CGO_ENABLED="0")
    build = subprocess.run(["go", "build", "-o", str(binary), str(REPO)], cwd=str(REPO), env=env, capture_output=True, text=True, timeout=600)
    if build.returncode != 0:
        unavailable("go build failed:\n" + build.stderr[-2000:])
    try:
        yield {"binary": binary, "config": _combined_config(tmp), "tmp": tmp}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def live_server(live_env: Dict[str, Path]) -> Iterator[LiveServer]:
    """live_server is one real server shared by the session's live tests."""
    srv = start_live(live_env["binary"], live_env["config"])
    try:
        yield srv
    finally:
        srv.stop()
        assert_no_leftovers(srv.proc.pid)


def assert_no_leftovers(pid: int, timeout: float = 60) -> None:
    """assert_no_leftovers waits until the server process pid owns no container, failing after timeout."""
    deadline = time.monotonic() + timeout
    left = _docker_leftovers(pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _docker_leftovers(pid)
    assert not left, f"containers labelled gymserver.owner of server pid {pid} left behind: {left}"


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    """fake_server is the in-process toy server."""
    srv = FakeServer().start()
    yield srv
    srv.stop()


@pytest.fixture(params=["fake", "live"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """backend runs the test against the fake server and against the real one."""
    if request.param == "fake":
        srv = request.getfixturevalue("fake_server")
        return Backend("fake", srv.url, extra={"fake": srv})
    live = request.getfixturevalue("live_server")
    return Backend("live", live.url)


def write_solution_call(b: Backend, call_id: str = "w1") -> Dict[str, Any]:
    """write_solution_call is the OpenAI tool call writing the reference solution."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "write_file", "arguments": json.dumps({"filepath": b.solution_path, "content": SOLUTION})},
    }


def open_sessions(b: Backend) -> int:
    """open_sessions is the number of sessions the backend holds right now.

    For the live server it is the ``gymserver_sessions`` gauge of ``/metrics``;
    for the fake server its session table. Adapter tests assert it returns to
    zero after an episode (no session left open).
    """
    if b.kind == "fake":
        return sum(1 for s in b.extra["fake"].sessions.values() if not s.closed)
    import urllib.request

    with urllib.request.urlopen(b.url.replace("ws://", "http://", 1) + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("gymserver_sessions "):
                return int(float(line.split()[1]))
    raise AssertionError("/metrics has no gymserver_sessions gauge")


def wait_no_sessions(b: Backend, timeout: float = 10.0) -> None:
    """wait_no_sessions waits until the backend holds no session, failing after timeout."""
    deadline = time.monotonic() + timeout
    n = open_sessions(b)
    while n and time.monotonic() < deadline:
        time.sleep(0.1)
        n = open_sessions(b)
    assert n == 0, f"{n} sessions still open on the {b.kind} server"
