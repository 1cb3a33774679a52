"""Gymnasium-style environment backed by a gymserver session.

:class:`RemoteEnv` follows the Gymnasium 1.x API (``reset(seed=None,
options=None) -> (obs, info)``, ``step(action) -> (obs, reward, terminated,
truncated, info)``, ``close()``). It subclasses ``gymnasium.Env`` when
gymnasium is importable and works without it. Observations and actions are
text; an action may also be a list of tool-call dicts.
"""

from __future__ import annotations

import os
import random
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import EpisodeDone
from .results import StepResult
from .pool import split_urls
from .sync import Client, Session

__all__ = ["RemoteEnv", "TextSpace", "MessagesSpace", "HAVE_GYMNASIUM"]

try:  # gymnasium is optional
    import gymnasium as _gymnasium
    from gymnasium import spaces as _spaces

    #: HAVE_GYMNASIUM reports whether gymnasium was importable (RemoteEnv then subclasses gymnasium.Env).
    HAVE_GYMNASIUM = True
except ImportError:  # pragma: no cover - depends on the environment
    _gymnasium = None  # type: ignore[assignment]
    _spaces = None  # type: ignore[assignment]
    HAVE_GYMNASIUM = False


_SAMPLE_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
_MAX_LENGTH = 1 << 24

if HAVE_GYMNASIUM:

    class TextSpace(_spaces.Text):  # type: ignore[misc,name-defined]
        """TextSpace is a gymnasium Text space that contains any ``str``.

        ``gymnasium.spaces.Text`` restricts the charset and length; model
        text and tool output are arbitrary Unicode, so ``contains`` accepts
        any string and ``sample`` draws short alphanumeric strings.
        """

        def __init__(self, max_length: int = _MAX_LENGTH, seed: Any = None) -> None:
            super().__init__(max_length=max_length, min_length=0, seed=seed)

        def contains(self, x: Any) -> bool:
            """contains reports whether x is a string."""
            return isinstance(x, str)

        def __repr__(self) -> str:
            return "TextSpace()"

    class MessagesSpace(_spaces.Space):  # type: ignore[misc,name-defined]
        """MessagesSpace contains chat transcripts: lists of message dicts with a string ``role``.

        It is the observation space of ``RemoteEnv(observation="messages")``;
        ``sample`` draws one short user message.
        """

        def __init__(self, seed: Any = None) -> None:
            super().__init__(shape=None, dtype=None, seed=seed)

        @property
        def is_np_flattenable(self) -> bool:
            """is_np_flattenable is False: a transcript has no fixed numeric shape."""
            return False

        def contains(self, x: Any) -> bool:
            """contains reports whether x is a list of dicts that each have a string role."""
            return _is_messages(x)

        def sample(self, mask: Any = None, probability: Any = None) -> List[Dict[str, Any]]:
            """sample returns a one-message transcript with short random content."""
            n = int(self.np_random.integers(1, 17))
            text = "".join(_SAMPLE_CHARS[int(i)] for i in self.np_random.integers(0, len(_SAMPLE_CHARS), n))
            return [{"role": "user", "content": text}]

        def __repr__(self) -> str:
            return "MessagesSpace()"

    _EnvBase: Any = _gymnasium.Env  # type: ignore[union-attr]
else:

    class TextSpace:  # type: ignore[no-redef]
        """TextSpace is a minimal text space (used when gymnasium is not installed): it contains any ``str``."""

        shape = None
        dtype = str

        def __init__(self, max_length: int = _MAX_LENGTH, seed: Any = None) -> None:
            self.max_length = max_length
            self._rng = random.Random(seed)

        def seed(self, seed: Optional[int] = None) -> List[Optional[int]]:
            """seed reseeds the sampler."""
            self._rng = random.Random(seed)
            return [seed]

        def contains(self, x: Any) -> bool:
            """contains reports whether x is a string."""
            return isinstance(x, str)

        def __contains__(self, x: Any) -> bool:
            return self.contains(x)

        def sample(self, mask: Any = None) -> str:
            """sample returns a short random alphanumeric string."""
            n = self._rng.randint(1, 16)
            return "".join(self._rng.choice(_SAMPLE_CHARS) for _ in range(n))

        def __repr__(self) -> str:
            return "TextSpace()"

    class MessagesSpace(TextSpace):  # type: ignore[no-redef]
        """MessagesSpace contains chat transcripts: lists of message dicts with a string ``role``."""

        def contains(self, x: Any) -> bool:
            """contains reports whether x is a list of dicts that each have a string role."""
            return _is_messages(x)

        def sample(self, mask: Any = None) -> List[Dict[str, Any]]:  # type: ignore[override]
            """sample returns a one-message transcript with short random content."""
            return [{"role": "user", "content": super().sample()}]

        def __repr__(self) -> str:
            return "MessagesSpace()"

    class _EnvBase:  # type: ignore[no-redef]
        """_EnvBase stands in for gymnasium.Env: the attributes and seeding contract RemoteEnv relies on."""

        metadata: Dict[str, Any] = {"render_modes": []}
        render_mode: Optional[str] = None
        spec: Any = None
        _np_random: Any = None

        def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Any:
            """reset seeds np_random (numpy Generator when numpy is installed, else random.Random)."""
            if seed is not None or self._np_random is None:
                try:
                    import numpy as np

                    self._np_random = np.random.default_rng(seed)
                except ImportError:  # pragma: no cover
                    self._np_random = random.Random(seed)
            return None

        @property
        def np_random(self) -> Any:
            """np_random is the environment's random generator."""
            if self._np_random is None:
                self.reset(seed=None)
            return self._np_random

        @property
        def unwrapped(self) -> Any:
            """unwrapped is the environment itself."""
            return self

        def close(self) -> None:
            """close does nothing."""

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *args: Any) -> bool:
            self.close()
            return False


def _is_messages(x: Any) -> bool:
    """_is_messages reports whether x is a list of dicts that each have a string ``role``."""
    return isinstance(x, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in x)


Action = Union[str, Sequence[Mapping[str, Any]], Mapping[str, Any]]


class RemoteEnv(_EnvBase):  # type: ignore[misc,valid-type]
    """RemoteEnv is a Gymnasium environment whose episodes run on a gymserver.

    Each :meth:`reset` starts a new session (closing the previous one in the
    same request) on the server; :meth:`step` sends one action.

    Args:
        env: environment id on the server (for example ``"calculator_api"``).
        task: task id; ``None`` lets the reset seed pick one (a random task without a seed).
        url: server URL (default ``GYMSERVER_URL``), or several separated by
            commas: the env then holds a pool, each :meth:`reset` closes the
            previous episode and the pool places the new one (the server
            with the fewest of the pool's sessions, round robin on ties), and
            a server that goes away fails only the episode on it
            (:class:`~gymserver.errors.ConnectionLost`); the next reset goes
            to the others. Ignored when ``client`` is given.
        client: a shared :class:`~gymserver.sync.Client` (many RemoteEnvs
            can share one connection); otherwise the env opens its own and
            closes it in :meth:`close`.
        token: bearer token for ``url`` (default ``GYMSERVER_TOKEN``; with
            ``gymnasium.make`` leave it out of the kwargs, which end up in
            the env spec's JSON, and set the variable instead).
        parser: how raw-text actions are parsed on the server: ``"hermes"``,
            ``"json"`` or ``"react"``.
        options: environment options sent with every reset (merged with
            the ``options`` given to :meth:`reset`).
        observation: ``"text"`` (default: the task prompt on reset, the
            observation text after a step) or ``"messages"`` (the new chat
            messages as a list of dicts).

    Observations: on reset the task prompt; ``info`` carries
    ``session_id``, ``system_prompt``, ``prompt``, ``tools`` and
    ``messages``. After a step, the tool results as text; ``info`` is the
    server's StepInfo plus ``tool_calls`` parsed from text actions and
    ``mask`` (drop the sample: infrastructure failure).

    Seeding: ``reset(seed=s)`` seeds :attr:`np_random` (via
    ``super().reset(seed=seed)``) and sends ``s`` to the server, so the same
    seed gives the same initial observation. Without a seed the server
    picks.

    Stepping after ``terminated`` or ``truncated`` raises
    :class:`~gymserver.errors.EpisodeDone` (call :meth:`reset`); so does
    stepping before the first reset.
    """

    metadata: Dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        env: str,
        task: Optional[str] = None,
        *,
        url: Optional[str] = None,
        client: Optional[Client] = None,
        token: Optional[str] = None,
        parser: str = "hermes",
        options: Optional[Mapping[str, Any]] = None,
        observation: str = "text",
        render_mode: Optional[str] = None,
    ) -> None:
        url = url or os.environ.get("GYMSERVER_URL")
        token = token if token is not None else (os.environ.get("GYMSERVER_TOKEN") or None)
        if client is None and url is None:
            raise ValueError("RemoteEnv needs url= or client= (or GYMSERVER_URL)")
        if observation not in ("text", "messages"):
            raise ValueError(f"observation must be 'text' or 'messages', not {observation!r}")
        self.env_id = env
        self.task = task
        self.parser = parser
        self.options = dict(options or {})
        self.observation_kind = observation
        self.render_mode = render_mode
        self._owns_client = client is None
        if client is None:
            # several comma-separated URLs: a pool that spreads the env's sessions over the servers
            client = Client(url, token=token, pool=len(split_urls(url)) > 1)  # type: ignore[arg-type]
        self.client: Client = client
        self.session: Optional[Session] = None
        self._done = False
        self._last_text = ""
        self.observation_space = TextSpace() if observation == "text" else MessagesSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """reset starts a new episode and returns ``(observation, info)``."""
        super().reset(seed=seed)
        opts = dict(self.options)
        opts.update(options or {})
        task = opts.pop("task", None) or self.task
        old = self.session
        if old is not None and (old.done or self.client.pooled):
            # a pool places each episode anew (perhaps on another server)
            old.close()
            old = None
        self.session = self.client.reset(self.env_id, task, seed, opts or None, replace=old, parser=self.parser)
        self._done = False
        info = {
            "session_id": self.session.id,
            "env": self.session.env,
            "task": self.session.task,
            "system_prompt": self.session.system_prompt,
            "prompt": self.session.prompt,
            "tools": self.session.tools,
            "messages": list(self.session.messages),
            "limits": self.session.limits,
        }
        self._last_text = self.session.prompt
        obs: Any = self.session.prompt if self.observation_kind == "text" else list(self.session.messages)
        return obs, info

    def step(self, action: Action) -> Tuple[Any, float, bool, bool, Dict[str, Any]]:
        """step applies one action and returns ``(obs, reward, terminated, truncated, info)``.

        ``action`` is raw model text (parsed on the server with the env's
        parser) or tool calls (a list of dicts, one dict, or an assistant
        message with ``tool_calls``).
        """
        if self.session is None:
            raise EpisodeDone("step before reset: call reset() first", code="episode_done")
        if self._done:
            raise EpisodeDone("step after the episode ended: call reset()", code="episode_done")
        before = len(self.session.messages)
        res: StepResult = self.session.step(action)  # type: ignore[arg-type]
        self._done = res.terminated or res.truncated
        info = dict(res.info)
        info["mask"] = res.mask
        if res.tool_calls:
            info["tool_calls"] = res.tool_calls
        self._last_text = res.observation.text
        obs: Any = res.observation.text if self.observation_kind == "text" else self.session.messages[before + 1 :]
        return obs, float(res.reward), bool(res.terminated), bool(res.truncated), info

    def evaluate(self) -> Any:
        """evaluate ends the current episode and returns its :class:`~gymserver.results.Evaluation`."""
        if self.session is None:
            raise EpisodeDone("evaluate before reset", code="episode_done")
        self._done = True
        return self.session.evaluate()

    def render(self) -> Optional[str]:
        """render returns the last observation text in ``"ansi"`` mode."""
        return self._last_text if self.render_mode == "ansi" else None

    def close_session(self) -> None:
        """close_session ends the current episode and removes its sandbox, keeping the connection for the next reset. Idempotent."""
        if self.session is not None:
            try:
                self.session.close()
            finally:
                self.session = None
                self._done = True

    def close(self) -> None:
        """close closes the current session and, if the env opened it, the connection. Idempotent."""
        if self.session is not None:
            try:
                self.session.close()
            finally:
                self.session = None
        if self._owns_client:
            self.client.close()
        super().close()
