"""TRL adapter: a gymserver sandbox as a GRPOTrainer ``environment_factory`` class, plus reward functions.

TRL's ``GRPOTrainer(environment_factory=...)`` instantiates the class once
per rollout slot, exposes its public methods (except ``reset``) as tools
(their type hints and docstrings become the JSON schema), calls
``reset(**row)`` before each generation, and passes the instances to reward
functions as ``environments=``::

    from gymserver.adapters.trl import tool_env_factory, gymserver_reward
    Env = tool_env_factory(url="ws://gym:8080", env="calculator_api")
    trainer = GRPOTrainer(model=..., train_dataset=ds, reward_funcs=[gymserver_reward],
                          environment_factory=Env, args=GRPOConfig(...))

A dataset row may carry ``env``, ``task``, ``seed`` (or a ``gymserver``
dict) to pick the episode. The reward function evaluates each episode
(hidden tests), closes its session, and returns the rewards; masked
(infrastructure) failures give ``None``, which TRL treats as "no reward".
TRL itself is not imported: the contract is duck-typed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import GymServerError
from ..sync import Client, Session
from ._shared import shared_client

__all__ = ["GymServerToolEnv", "tool_env_factory", "gymserver_reward", "gymserver_reward_async"]


class GymServerToolEnv:
    """GymServerToolEnv is one gymserver episode whose tools are this class's public methods.

    Configure the server and default episode with :func:`tool_env_factory` (or the
    ``GYMSERVER_URL``/``GYMSERVER_TOKEN`` environment variables). After the
    episode: ``done``, ``reward``, ``masked`` and ``evaluation`` attributes
    (set by :func:`gymserver_reward`).
    """

    url: Optional[str] = None
    token: Optional[str] = None
    env: Optional[str] = None
    task: Optional[str] = None
    seed: Optional[int] = None
    return_prompt: bool = False

    def __init__(self) -> None:
        self._client: Client = shared_client(type(self).url, type(self).token)
        self._session: Optional[Session] = None
        self.done = False
        self.reward = 0.0
        self.masked = False
        self.evaluation: Any = None

    def reset(self, **kwargs: Any) -> Optional[str]:
        """reset starts a fresh episode (closing the previous one); kwargs are the dataset row."""
        self._finish_quietly()
        spec = dict(kwargs.get("gymserver") or {}) if isinstance(kwargs.get("gymserver"), Mapping) else {}
        env = spec.get("env") or kwargs.get("env") or type(self).env
        if not env:
            raise ValueError("GymServerToolEnv: no env (tool_env_factory(env=...) or an 'env' column)")
        task = spec.get("task") or kwargs.get("task") or type(self).task
        seed = spec.get("seed", kwargs.get("seed", type(self).seed))
        self._session = self._client.reset(env, task, seed, spec.get("options"))
        self.done, self.reward, self.masked, self.evaluation = False, 0.0, False, None
        return self._session.prompt if type(self).return_prompt else None

    def execute_command(self, command: str, timeout: float = 0.0, working_directory: str = "", background: bool = False) -> str:
        """Run a shell command in the sandbox and return its exit code and output.

        Args:
            command: The shell command to run (/bin/sh -c).
            timeout: Timeout in seconds; 0 uses the task's command timeout.
            working_directory: Directory to run in; empty uses the task's working directory.
            background: Start the command in the background and return immediately.

        Returns:
            The exit code, stdout and stderr of the command.
        """
        args: Dict[str, Any] = {"command": command}
        if timeout:
            args["timeout"] = timeout
        if working_directory:
            args["working_directory"] = working_directory
        if background:
            args["background"] = True
        return self._call("execute_command", args)

    def write_file(self, filepath: str, content: str) -> str:
        """Write content to a file in the sandbox, creating parent directories.

        Args:
            filepath: Path of the file, absolute or relative to the working directory.
            content: The complete new content of the file.

        Returns:
            A confirmation or an error message.
        """
        return self._call("write_file", {"filepath": filepath, "content": content})

    def read_file(self, filepath: str) -> str:
        """Read a text file in the sandbox.

        Args:
            filepath: Path of the file, absolute or relative to the working directory.

        Returns:
            The content of the file or an error message.
        """
        return self._call("read_file", {"filepath": filepath})

    def mark_done(self, message: str = "") -> str:
        """Declare the task finished; the hidden tests then run and the episode ends.

        Args:
            message: Optional summary of what was done.

        Returns:
            A confirmation.
        """
        return self._call("mark_done", {"message": message} if message else {})

    # --- private: not tools ------------------------------------------------

    def _call(self, name: str, args: Dict[str, Any]) -> str:
        if self._session is None:
            raise RuntimeError("GymServerToolEnv: reset() was not called")
        if self.done:
            return "Error: the episode has ended; no more tool calls are accepted."
        try:
            res = self._session.step([{"name": name, "arguments": json.dumps(args)}])
        except GymServerError as e:
            if e.mask:
                self.masked = True
            return f"Error: {e}"
        if res.mask:
            self.masked = True
        if res.terminated or res.truncated:
            self.done = True
            self.reward = float(res.reward)
            self.evaluation = res.evaluation
        return res.observation.text

    async def _finish(self) -> Optional[float]:
        """_finish evaluates (if needed) and closes the session; it runs on the client's loop."""
        s = self._session
        if s is None:
            return None if self.masked else self.reward
        inner = s.async_session
        try:
            if self.evaluation is None and not self.masked:
                self.evaluation = await inner.evaluate()
                self.reward = self.evaluation.reward
            if self.evaluation is not None and self.evaluation.mask:
                self.masked = True
        except GymServerError as e:
            self.masked = self.masked or e.mask or e.code != "agent_error"
        finally:
            try:
                await inner.close()
            except GymServerError:
                pass
            self._session = None
            self.done = True
        return None if self.masked else self.reward

    def _finish_quietly(self) -> None:
        if self._session is not None:
            try:
                self._client.run(self._finish())
            except GymServerError:
                pass


def tool_env_factory(
    *,
    url: Optional[str] = None,
    token: Optional[str] = None,
    env: Optional[str] = None,
    task: Optional[str] = None,
    seed: Optional[int] = None,
    return_prompt: bool = False,
) -> type:
    """tool_env_factory returns a GymServerToolEnv subclass bound to a server and a default episode.

    Pass the result as GRPOTrainer's ``environment_factory``. It is a module
    function, not a method, so TRL does not mistake it for a tool.
    ``return_prompt`` makes ``reset`` return the server's task prompt, which
    TRL appends to the dataset prompt.
    """
    attrs = dict(url=url, token=token, env=env, task=task, seed=seed, return_prompt=return_prompt)
    return type(GymServerToolEnv.__name__, (GymServerToolEnv,), attrs)


def _check(environments: Optional[Sequence[Any]], completions: Sequence[Any]) -> List[GymServerToolEnv]:
    if environments is None:
        raise ValueError("gymserver_reward needs environments= (use GRPOTrainer's environment_factory)")
    envs = list(environments)
    if len(envs) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(envs)} environments")
    return envs


def gymserver_reward(completions: Sequence[Any], environments: Optional[Sequence[Any]] = None, **kwargs: Any) -> List[Optional[float]]:
    """gymserver_reward is a TRL reward function: the hidden tests' reward of each environment's episode.

    Episodes still running are evaluated (concurrently, on the shared
    connection) and every session is closed. Masked failures give ``None``.
    """
    envs = _check(environments, completions)
    futs = [e._client.submit(e._finish()) for e in envs]
    return [f.result() for f in futs]


async def gymserver_reward_async(
    completions: Sequence[Any], environments: Optional[Sequence[Any]] = None, **kwargs: Any
) -> List[Optional[float]]:
    """gymserver_reward_async is the async variant of :func:`gymserver_reward` (batched, for TRL's async reward functions)."""
    envs = _check(environments, completions)
    return list(await asyncio.gather(*(asyncio.wrap_future(e._client.submit(e._finish())) for e in envs)))
