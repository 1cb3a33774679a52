"""SkyRL adapter: a gymserver session as a ``skyrl_gym`` ``BaseTextEnv``.

Register it with ``skyrl_gym.envs.register(id="gymserver",
entry_point="gymserver.adapters.skyrl:GymServerTextEnv")`` and set
``env_class: gymserver`` in the dataset. SkyRL builds one env per
trajectory with ``(env_config, extras)``, calls ``init(prompt)`` for the
initial chat, then ``step(action_text)`` per model turn until ``done``, then
``close()``.

``env_config`` keys: ``gymserver_url``, ``gymserver_token``, ``parser``
(default ``hermes``), ``observation_role`` (``user``, default, or
``tool``), ``use_server_prompt`` (default true: the server's system and task
messages replace the dataset prompt), ``max_turns``. ``extras`` (the dataset
row) names the episode: ``extras["gymserver"]`` or ``extras["extra_info"]``
with ``env``, ``task``, ``seed``, ``options``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import GymServerError
from ..sync import Session
from ._shared import episode_spec, shared_client

__all__ = ["GymServerTextEnv", "BaseTextEnv", "BaseTextEnvStepOutput", "HAVE_SKYRL"]

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # type: ignore[import-not-found]

    #: HAVE_SKYRL reports whether skyrl_gym's classes are used (else the local stand-ins).
    HAVE_SKYRL = True
except ImportError:
    from typing import TypedDict

    HAVE_SKYRL = False

    class BaseTextEnvStepOutput(TypedDict, total=False):  # type: ignore[no-redef]
        """BaseTextEnvStepOutput stands in for skyrl_gym's step output (OpenAI-format observation messages)."""

        observations: List[Dict[str, str]]
        reward: float
        done: bool
        metadata: Dict[str, Any]
        postprocessed_action: Optional[str]

    class BaseTextEnv:  # type: ignore[no-redef]
        """BaseTextEnv stands in for ``skyrl_gym.envs.base_text_env.BaseTextEnv`` when SkyRL is not installed."""

        def __init__(self) -> None:
            self.turns = 0
            self.max_turns = 1

        def init(self, prompt: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
            """init returns the initial chat and metadata."""
            return prompt, {}

        def step(self, action: str) -> Any:
            """step applies the model's text."""
            raise NotImplementedError

        def close(self) -> None:
            """close releases resources."""


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping) or hasattr(cfg, "get"):
        v = cfg.get(key, default)
        return default if v is None else v
    return getattr(cfg, key, default)


class GymServerTextEnv(BaseTextEnv):  # type: ignore[misc,valid-type]
    """GymServerTextEnv is a SkyRL text environment backed by one gymserver session per trajectory."""

    def __init__(self, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        self.url = _get(env_config, "gymserver_url")
        self.token = _get(env_config, "gymserver_token")
        self.parser = str(_get(env_config, "parser", "hermes"))
        self.observation_role = str(_get(env_config, "observation_role", "user"))
        self.use_server_prompt = bool(_get(env_config, "use_server_prompt", True))
        info = extras.get("extra_info")
        top = {k: v for k, v in extras.items() if k != "options"}
        spec = episode_spec(info, info.get("gymserver") if isinstance(info, Mapping) else None, extras.get("gymserver"), top)
        if not spec.get("env"):
            spec["env"] = _get(env_config, "env")
            spec.setdefault("task", _get(env_config, "task"))
        if not spec.get("env"):
            raise ValueError("GymServerTextEnv: no env in extras['gymserver'] / extras['extra_info'] or env_config")
        self.spec = spec
        self.max_turns = int(_get(env_config, "max_turns", 30))
        self.session: Optional[Session] = None
        self.masked = False

    def init(self, prompt: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
        """init starts the session and returns the initial chat (the server's, by default) and metadata."""
        client = shared_client(self.url, self.token)
        self.session = client.reset(self.spec["env"], self.spec.get("task"), self.spec.get("seed"), self.spec.get("options"), parser=self.parser)
        self.turns = 0
        chat = [dict(m) for m in self.session.messages] if self.use_server_prompt else list(prompt)
        return chat, {"session_id": self.session.id, "tools": self.session.tools, "env": self.session.env, "task": self.session.task}

    def _observations(self, messages: List[Dict[str, Any]], text: str) -> List[Dict[str, str]]:
        if self.observation_role == "tool":
            return [{"role": "tool", "content": str(m.get("content") or "")} for m in messages if m.get("role") == "tool"] or (
                [{"role": "user", "content": text}] if text else []
            )
        return [{"role": "user", "content": text}] if text else []

    def step(self, action: str) -> Any:
        """step sends the model's text to the server (parsed there) and returns SkyRL's step output."""
        if self.session is None:
            raise RuntimeError("GymServerTextEnv: init() was not called")
        self.turns += 1
        before = len(self.session.messages)
        try:
            res = self.session.step(action, parser=self.parser)
        except GymServerError as e:
            self.masked = True
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={"error_class": e.code, "mask": True, "error": str(e)})
        done = res.terminated or res.truncated
        reward = float(res.reward)
        meta: Dict[str, Any] = {"info": res.info, "mask": res.mask, "session_id": self.session.id}
        if not done and self.turns >= self.max_turns:
            ev = self.session.evaluate()
            reward, done = ev.reward, True
            meta["evaluation"] = ev.raw
            meta["mask"] = meta["mask"] or ev.mask
        if meta["mask"]:
            self.masked = True
            reward = 0.0
        obs = [] if done else self._observations(self.session.messages[before + 1 :], res.observation.text)
        return BaseTextEnvStepOutput(observations=obs, reward=reward, done=done, metadata=meta)

    def close(self) -> None:
        """close closes the session (removing the sandbox). Idempotent."""
        if self.session is not None:
            try:
                self.session.close()
            finally:
                self.session = None
