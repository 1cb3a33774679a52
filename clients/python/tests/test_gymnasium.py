"""RemoteEnv and Gymnasium: observation spaces, and Gymnasium's own env checker when gymnasium is available."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

import gymserver.gym
from gymserver.gym import MessagesSpace, RemoteEnv, TextSpace
from conftest import Backend, wait_no_sessions

#: GYMNASIUM_TAG is the Gymnasium release the twin test loads from the mirror.
GYMNASIUM_TAG = "v1.3.0"


def test_observation_spaces_contain_what_reset_and_step_return(backend: Backend) -> None:
    for kind, space_type in (("text", TextSpace), ("messages", MessagesSpace)):
        env = RemoteEnv(backend.env, url=backend.url, observation=kind)
        try:
            assert isinstance(env.observation_space, space_type)
            obs, info = env.reset(seed=3)
            assert env.observation_space.contains(obs), obs
            obs, *_ = env.step([{"name": "execute_command", "arguments": {"command": "echo hi"}}])
            assert env.observation_space.contains(obs), obs
            assert env.observation_space.contains(env.observation_space.sample())
        finally:
            env.close()
    assert not MessagesSpace().contains("text") and not MessagesSpace().contains([{"content": "no role"}])
    assert RemoteEnv.metadata["render_fps"] > 0
    wait_no_sessions(backend)


@pytest.fixture(scope="module")
def gymnasium_module() -> Iterator[Any]:
    """gymnasium_module is the installed gymnasium, or Gymnasium GYMNASIUM_TAG from the mirror."""
    try:
        import gymnasium  # noqa: F401

        yield gymnasium
        return
    except ImportError:
        pass
    mirror = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")
    if not mirror:
        pytest.skip("gymnasium is not installed and GYMSERVER_UPSTREAM_MIRROR is not set")
    pytest.importorskip("cloudpickle")
    git_dir = Path(mirror) / "Farama-Foundation+Gymnasium" / "repo"
    tmp = Path(tempfile.mkdtemp(prefix="gymnasium-"))
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", GYMNASIUM_TAG, "gymnasium"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    (tmp / "farama_notifications").mkdir()
    (tmp / "farama_notifications" / "__init__.py").write_text("notifications = {}\n")  # its only content we need
    sys.path.insert(0, str(tmp))
    try:
        import gymnasium

        importlib.reload(gymserver.gym)  # RemoteEnv now subclasses gymnasium.Env
        yield gymnasium
    finally:
        sys.path.remove(str(tmp))
        for name in [n for n in sys.modules if n == "gymnasium" or n.startswith("gymnasium.") or n == "farama_notifications"]:
            del sys.modules[name]
        importlib.reload(gymserver.gym)


@pytest.mark.parametrize("observation", ["text", "messages"])
def test_gymnasium_check_env(live_server: Any, gymnasium_module: Any, observation: str) -> None:
    """Gymnasium's check_env passes on RemoteEnv made through gymnasium.make, with the URL from GYMSERVER_URL."""
    from gymnasium.utils.env_checker import check_env

    env_id = f"gymserver-test/calculator_api-{observation}-v0"
    if env_id not in gymnasium_module.registry:
        gymnasium_module.register(
            id=env_id, entry_point="gymserver.gym:RemoteEnv", kwargs={"env": "calculator_api", "observation": observation}
        )
    old = os.environ.get("GYMSERVER_URL")
    os.environ["GYMSERVER_URL"] = live_server.url
    try:
        env = gymnasium_module.make(env_id)
        try:
            check_env(env.unwrapped)
            assert "token" not in env.spec.to_json()
        finally:
            env.close()
    finally:
        if old is None:
            del os.environ["GYMSERVER_URL"]
        else:
            os.environ["GYMSERVER_URL"] = old
    wait_no_sessions(Backend("live", live_server.url))
