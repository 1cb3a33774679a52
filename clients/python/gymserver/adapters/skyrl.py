"""SkyRL adapter: a gymserver session as a ``skyrl_gym`` text environment.

Checked against SkyRL main a9564572eb8e91076be43c1bd5e4615e3de17265
(2026-08-21) and tag skyrl-v0.3.0 f5bc3b78dfddfb352870d5d7430cd226e5785838
(skyrl-gym 0.4.0). The files read: ``skyrl-gym/skyrl_gym/core.py``,
``envs/registration.py``, ``envs/base_text_env.py``, ``metrics.py``;
``skyrl/train/generators/skyrl_gym_generator.py``, ``generators/utils.py``,
``skyrl/train/config/config.py``, ``skyrl/train/trainer.py``,
``skyrl/train/entrypoints/main_base.py``. Both versions agree on everything
used here.

How SkyRL drives an environment (``SkyRLGymGenerator.agent_loop``): it sets
``extras["max_turns"] = generator.max_turns``, builds the env with
``skyrl_gym.make(env_class, env_config=getattr(environment.skyrl_gym,
env_class, {}), extras=extras)`` (``make`` then sets ``env.spec``), calls
``init(prompt)`` and templates the returned chat with
``tokenizer.apply_chat_template`` *without* ``tools=`` (the metadata ``init``
returns is dropped), then loops: when the input is longer than
``generator.max_input_length`` it stops with ``stop_reason == "length"``;
otherwise it generates and calls ``step(text)``. After the loop it calls
``get_metrics()`` then ``close()``. An exception from the env ends the whole
generation batch, and the env's own ``close`` is not called.

What this module provides:

* :class:`GymServerTextEnv`: the environment, one gymserver session per
  trajectory. It never raises from ``init``/``step``/``close`` on a server or
  connection failure: the session is closed and the sample is marked masked.
  It honours ``extras["max_turns"]`` (at the limit it evaluates the episode),
  puts the server's tool schemas into the system message of the chat
  ``init`` returns (the only place the model sees them, since the generator
  templates without tools), and evaluates an episode the generator stopped
  early (cut by ``max_input_length``) in ``get_metrics``/``close``, before
  closing the session.
* :class:`GymServerGenerator`: ``SkyRLGymGenerator`` with its two subclass
  hooks filled in. ``_setup_env_extras`` gives each env an outcome record
  (``extras["gymserver_outcome"]``, a JSON-safe dict);
  ``_post_process_agent_loop_output`` zeroes the loss mask of a masked
  sample (the way SkyRL itself drops samples: ``apply_overlong_filtering``
  and ``zero_variance_filter`` set every loss-mask entry to 0) and puts the
  hidden tests' reward of a length-cut episode on its last response token,
  since the stock generator only ever sees rewards returned by ``step``.
* :class:`GymServerEnvConfig`: the typed config of the env, and
  :func:`train_config_class`, a ``SkyRLTrainConfig`` subclass that declares
  it at ``environment.skyrl_gym.gymserver`` (the stock ``SkyRLGymConfig``
  rejects unknown keys). :func:`register_env` registers the env.

Limits: with the stock ``SkyRLGymGenerator`` masked samples train as reward
0 and a length-cut episode's reward only reaches the metrics
(``environment/gymserver_reward``), not the loss; use
:class:`GymServerGenerator`. ``generator.batched=True`` (single-turn
batched generation) has no post-processing hook, so the same applies there.
In step-wise training a length-cut reward goes on the last generated token
of the last step. ``generator.zero_reward_on_non_stop`` zeroes the reward of
length-cut episodes after the hook, as it does for every environment. The
env's methods block on the server: keep ``environment.skyrl_gym.max_env_workers``
above 0 (the default, 32) so they run in SkyRL's thread pool.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Tuple

from ..errors import GymServerError
from ..sync import Session
from ._shared import episode_spec, shared_client

__all__ = [
    "GymServerTextEnv",
    "GymServerGenerator",
    "GymServerEnvConfig",
    "train_config_class",
    "register_env",
    "tool_instructions",
    "OUTCOME_KEY",
    "ENTRY_POINT",
    "HAVE_SKYRL",
    "HAVE_SKYRL_TRAIN",
]

log = logging.getLogger("gymserver")

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv as _TextEnvBase  # type: ignore[import-not-found]

    #: HAVE_SKYRL reports whether skyrl_gym is installed (GymServerTextEnv is then a real BaseTextEnv).
    HAVE_SKYRL = True
except ImportError:
    HAVE_SKYRL = False

    class _TextEnvBase:  # type: ignore[no-redef]
        """_TextEnvBase is the private base used when skyrl_gym is not installed (not a BaseTextEnv)."""

        def __init__(self) -> None:
            self.turns = 0
            self.max_turns = 1


try:
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator as _GeneratorBase  # type: ignore[import-not-found]

    #: HAVE_SKYRL_TRAIN reports whether SkyRL's trainer is installed (GymServerGenerator is then a SkyRLGymGenerator).
    HAVE_SKYRL_TRAIN = True
except ImportError:
    HAVE_SKYRL_TRAIN = False

    class _GeneratorBase:  # type: ignore[no-redef]
        """_GeneratorBase is the private base used when SkyRL's trainer is not installed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError("GymServerGenerator needs SkyRL (skyrl.train) installed")


#: ENTRY_POINT is the ``skyrl_gym`` entry point of :class:`GymServerTextEnv`.
ENTRY_POINT = "gymserver.adapters.skyrl:GymServerTextEnv"

#: OUTCOME_KEY is the extras key under which :class:`GymServerGenerator`
#: hands each env a dict to record how its episode ended: ``ended``,
#: ``reward``, ``masked``, ``cut`` (evaluated after the generator stopped
#: early), ``error``, ``session_id``.
OUTCOME_KEY = "gymserver_outcome"


@dataclass
class GymServerEnvConfig:
    """GymServerEnvConfig is the env_config of :class:`GymServerTextEnv`.

    Declare it in SkyRL's typed config with :func:`train_config_class`
    (``environment.skyrl_gym.gymserver.url=ws://...``); a plain dict with the
    same keys works too.

    Attributes:
        url: the server's ``ws://`` URL (default ``GYMSERVER_URL``).
        token: bearer token (default ``GYMSERVER_TOKEN``).
        parser: how the server reads tool calls from the model's text:
            ``hermes``, ``json`` or ``react``; the tool instructions in the
            system message follow it.
        observation_role: ``user`` (the step's results as one user message)
            or ``tool`` (one tool message per call).
        use_server_prompt: the server's system and task messages replace the
            dataset prompt.
        tools_in_prompt: add the tool schemas and the call format to the
            system message (turn off when the chat template gets them another
            way).
        env, task: the episode when the dataset row does not name one.
        max_turns: the turn limit when the driver does not pass
            ``extras["max_turns"]`` (SkyRL's generator always does).
    """

    url: Optional[str] = None
    token: Optional[str] = None
    parser: str = "hermes"
    observation_role: str = "user"
    use_server_prompt: bool = True
    tools_in_prompt: bool = True
    env: Optional[str] = None
    task: Optional[str] = None
    max_turns: int = 30


def _setting(env_config: Any, name: str) -> Any:
    """_setting reads one setting from a dict, a dataclass or an OmegaConf node, with GymServerEnvConfig's default."""
    default = getattr(GymServerEnvConfig, name)
    if env_config is None:
        return default
    if isinstance(env_config, Mapping):
        value = env_config.get(name)
    else:
        value = getattr(env_config, name, None)
    return default if value is None else value


def tool_instructions(tools: List[Dict[str, Any]], parser: str) -> str:
    """tool_instructions is the text that tells the model its tools and how ``parser`` expects calls.

    For ``hermes`` it follows the Hermes/Qwen chat templates' tool section
    (schemas inside ``<tools>``, calls inside ``<tool_call>``).
    """
    if not tools:
        return ""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    if parser == "react":
        how = (
            'To call a function, write a line "Action: " with its name, then a line "Action Input: " with its '
            "arguments as one JSON object. Repeat both lines to call several functions."
        )
    elif parser == "json":
        how = (
            'To call a function, answer with a JSON object {"name": <function-name>, "arguments": '
            "<args-json-object>}, or a JSON array of such objects to call several."
        )
    else:
        how = (
            "To call a function, write a JSON object with its name and arguments inside <tool_call></tool_call> "
            'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )
    return (
        "# Tools\n\nYou can call the functions below. Their signatures, one JSON object per line, are inside "
        "<tools></tools> tags:\n<tools>\n" + schemas + "\n</tools>\n\n" + how
    )


def _with_tools(chat: List[Dict[str, Any]], tools: List[Dict[str, Any]], parser: str) -> List[Dict[str, Any]]:
    """_with_tools returns chat with the tool instructions appended to its system message (or a new one first)."""
    text = tool_instructions(tools, parser)
    if not text:
        return chat
    if chat and chat[0].get("role") == "system":
        first = dict(chat[0])
        first["content"] = (str(first.get("content") or "") + "\n\n" + text).lstrip()
        return [first] + chat[1:]
    return [{"role": "system", "content": text}] + chat


class GymServerTextEnv(_TextEnvBase):  # type: ignore[misc,valid-type]
    """GymServerTextEnv is a SkyRL text environment backed by one gymserver session per trajectory.

    SkyRL builds it as ``GymServerTextEnv(env_config=..., extras=...)``.
    ``env_config`` is a :class:`GymServerEnvConfig` (or a dict with its
    keys). ``extras`` is the dataset row: the episode is
    ``extras["gymserver"]`` or ``extras["extra_info"]["gymserver"]``
    (``env``, ``task``, ``seed``, ``options``), defaulting to env_config's
    ``env``/``task``; ``extras["max_turns"]`` bounds the turns.

    The attributes it owns are ``config``, ``episode``, ``session`` and
    ``outcome``; ``turns`` and ``max_turns`` keep BaseTextEnv's meaning, and
    ``spec`` is left to ``skyrl_gym.make``.
    """

    def __init__(self, env_config: Any = None, extras: Optional[MutableMapping[str, Any]] = None) -> None:
        super().__init__()
        extras = extras if extras is not None else {}
        self.config = GymServerEnvConfig(**{f.name: _setting(env_config, f.name) for f in dataclasses.fields(GymServerEnvConfig)})
        info = extras.get("extra_info")
        defaults = {"env": self.config.env, "task": self.config.task}
        self.episode = episode_spec(defaults, info.get("gymserver") if isinstance(info, Mapping) else None, extras.get("gymserver"))
        if not self.episode.get("env"):
            raise ValueError("GymServerTextEnv: no env in extras['gymserver'], extras['extra_info']['gymserver'] or env_config.env")
        self.max_turns = int(extras["max_turns"]) if extras.get("max_turns") is not None else int(self.config.max_turns)
        self.turns = 0
        self.session: Optional[Session] = None
        sink = extras.get(OUTCOME_KEY)
        self.outcome: Dict[str, Any] = sink if isinstance(sink, dict) else {}
        self.outcome.update(ended=False, reward=0.0, masked=False, cut=False, error="", session_id="")

    def init(self, prompt: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
        """init starts the session and returns the first chat (with the tool schemas in its system message) and metadata.

        When the session cannot be started the episode is over before it
        began: init returns the dataset prompt, the sample is masked, and
        the first step ends the episode.
        """
        self.turns = 0
        try:
            client = shared_client(self.config.url, self.config.token)
            ep = self.episode
            self.session = client.reset(ep["env"], ep.get("task"), ep.get("seed"), ep.get("options"), parser=self.config.parser)
        except Exception as e:  # any failure: the sample says nothing about the agent
            self._fail("reset", e)
            return list(prompt), {"error": self.outcome["error"]}
        self.outcome["session_id"] = self.session.id
        chat = [dict(m) for m in self.session.messages] if self.config.use_server_prompt else [dict(m) for m in prompt]
        if self.config.tools_in_prompt:
            chat = _with_tools(chat, self.session.tools, self.config.parser)
        return chat, {"session_id": self.session.id, "env": self.session.env, "task": self.session.task, "tools": self.session.tools}

    def step(self, action: str) -> Dict[str, Any]:
        """step sends the model's text to the server (parsed there) and returns SkyRL's step output.

        At ``max_turns`` an episode still running is evaluated and ends.
        Masked (infrastructure-failed) steps end the episode with reward 0
        and ``metadata["masked"]``.
        """
        if self.outcome["ended"]:
            return self._output([], done=True)
        if self.session is None:
            raise RuntimeError("GymServerTextEnv: step() before init()")
        self.turns += 1
        before = len(self.session.messages)
        try:
            res = self.session.step(action, parser=self.config.parser)
            done, reward, masked = res.done, float(res.reward), res.mask
            if not done and self.turns >= self.max_turns:
                ev = self.session.evaluate()
                done, reward, masked = True, float(ev.reward), masked or ev.mask
        except Exception as e:
            self._fail("step", e)
            return self._output([], done=True)
        if masked or done:
            self._end(reward, masked=masked, error="step reported an infrastructure failure" if masked else "")
            self._close_session()
            return self._output([], done=True)
        return self._output(self._observations(self.session.messages[before + 1 :], res.observation.text), done=False)

    def get_metrics(self) -> Dict[str, Any]:
        """get_metrics finishes the episode (evaluating it when the generator stopped early) and reports it.

        SkyRL averages these per env class into ``environment/<key>``.
        """
        self._finish()
        return {
            "gymserver_reward": float(self.outcome["reward"]),
            "gymserver_masked": float(self.outcome["masked"]),
            "gymserver_cut": float(self.outcome["cut"]),
            "gymserver_turns": float(self.turns),
        }

    def close(self) -> None:
        """close finishes the episode like :meth:`get_metrics` and closes the session (removing the sandbox). Idempotent."""
        self._finish()
        self._close_session()

    # --- internals -------------------------------------------------------

    def _output(self, observations: List[Dict[str, Any]], done: bool) -> Dict[str, Any]:
        """_output builds a BaseTextEnvStepOutput (a TypedDict, so a plain dict)."""
        o = self.outcome
        reward = float(o["reward"]) if done else 0.0
        meta = {"session_id": o["session_id"], "turns": self.turns, "masked": o["masked"], "error": o["error"]}
        return {"observations": observations, "reward": reward, "done": done, "metadata": meta}

    def _observations(self, messages: List[Dict[str, Any]], text: str) -> List[Dict[str, Any]]:
        """_observations turns a step's transcript messages into the next input for the model."""
        if self.config.observation_role == "tool":
            tool_msgs = [{"role": "tool", "content": str(m.get("content") or "")} for m in messages if m.get("role") == "tool"]
            if tool_msgs:
                return tool_msgs
        return [{"role": "user", "content": text}] if text else []

    def _end(self, reward: float, *, masked: bool = False, error: str = "") -> None:
        """_end records how the episode ended."""
        self.outcome.update(ended=True, reward=0.0 if masked else float(reward), masked=masked, error=error)

    def _fail(self, where: str, err: BaseException) -> None:
        """_fail ends the episode after an error: masked, session closed."""
        msg = f"{where}: {type(err).__name__}: {err}"
        if isinstance(err, GymServerError) and not err.mask:
            log.warning("gymserver: episode %s ended by a non-infrastructure error (sample dropped): %s", self.episode, msg)
        else:
            log.warning("gymserver: episode %s failed (sample dropped): %s", self.episode, msg)
        self._end(0.0, masked=True, error=msg)
        self._close_session()

    def _finish(self) -> None:
        """_finish evaluates an episode that is still running (the generator stopped before it ended)."""
        if self.outcome["ended"] or self.session is None:
            return
        self.outcome["cut"] = True
        try:
            ev = self.session.evaluate()
        except Exception as e:
            self._fail("evaluate", e)
            return
        self._end(ev.reward, masked=ev.mask, error="evaluation reported an infrastructure failure" if ev.mask else "")

    def _close_session(self) -> None:
        """_close_session closes the session once; a failure is logged (the server closes it with the connection)."""
        session, self.session = self.session, None
        if session is None:
            return
        try:
            session.close()
        except Exception as e:
            log.warning("gymserver: closing session %s: %s", session.id, e)


class GymServerGenerator(_GeneratorBase):  # type: ignore[misc,valid-type]
    """GymServerGenerator is SkyRL's ``SkyRLGymGenerator`` with the outcomes of gymserver episodes applied.

    Construct it exactly like ``SkyRLGymGenerator`` (return it from
    ``BasePPOExp.get_generator``). Per trajectory it hands the env an
    outcome record (:data:`OUTCOME_KEY`) and then:

    * masked sample: every loss-mask entry set to 0 and the reward to 0, so
      the sample adds no gradient (SkyRL drops overlong and zero-variance
      samples the same way);
    * episode cut by ``max_input_length``: the hidden tests' reward (the
      env evaluated it before closing) added on the last response token.

    Envs of other classes ignore the record and are left as they are.
    """

    def _setup_env_extras(self, env_class: str, env_extras: Dict[str, Any], sampling_params: Any, trajectory_id: Any) -> Dict[str, Any]:
        """_setup_env_extras adds an empty outcome record to the env's extras."""
        env_extras = super()._setup_env_extras(env_class, env_extras, sampling_params, trajectory_id)
        env_extras[OUTCOME_KEY] = {}
        return env_extras

    def _post_process_agent_loop_output(self, agent_loop_output: Any, env_extras: Dict[str, Any], trajectory_id: Any) -> Any:
        """_post_process_agent_loop_output applies the env's outcome record to the trajectory's loss mask and reward."""
        out = super()._post_process_agent_loop_output(agent_loop_output, env_extras, trajectory_id)
        outcome = env_extras.get(OUTCOME_KEY)
        if isinstance(outcome, dict) and outcome.get("ended"):
            apply_outcome(out, outcome)
        return out


def apply_outcome(output: Any, outcome: Mapping[str, Any]) -> None:
    """apply_outcome edits one agent_loop output (TrajectoryOutput or StepWiseOutput) in place for outcome.

    A masked outcome zeroes every loss mask and reward; a cut outcome's
    reward goes on the last response token (the generator put the last
    turn's reward, 0 here, at that index) or, for step-wise output, on the
    last generated token of the last step.
    """
    steps = list(getattr(output, "step_outputs", None) or [output])
    if outcome.get("masked"):
        for s in steps:
            s.loss_mask = [0] * len(s.loss_mask)
            s.reward = [0.0] * len(s.reward) if isinstance(s.reward, list) else 0.0
        return
    if not outcome.get("cut"):
        return
    last = steps[-1]
    reward = float(outcome.get("reward") or 0.0)
    if not isinstance(last.reward, list):
        last.reward = reward
        return
    if not last.reward:
        return
    at = len(last.reward) - 1
    if hasattr(output, "step_outputs"):
        ones = [i for i, m in enumerate(last.loss_mask) if m]
        at = ones[-1] if ones else 0
    last.reward[at] = reward


def register_env(env_id: str = "gymserver") -> None:
    """register_env registers :class:`GymServerTextEnv` with skyrl_gym as env_id (once per process).

    Call it inside SkyRL's entrypoint Ray task, before the trainer builds
    the generator.
    """
    from skyrl_gym.envs import register  # type: ignore[import-not-found]
    from skyrl_gym.envs.registration import registry  # type: ignore[import-not-found]

    if env_id not in registry:
        register(id=env_id, entry_point=ENTRY_POINT)


def train_config_class(env_class: str = "gymserver") -> type:
    """train_config_class returns a ``SkyRLTrainConfig`` subclass with :class:`GymServerEnvConfig` at ``environment.skyrl_gym.<env_class>``.

    SkyRL's generator passes ``getattr(cfg.environment.skyrl_gym, env_class)``
    to the env as ``env_config``, and its typed config rejects unknown keys,
    so the field has to be declared. Use it like ``SkyRLTrainConfig``:
    ``train_config_class().from_cli_overrides(sys.argv[1:])``.
    """
    from skyrl.train.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig  # type: ignore[import-not-found]

    gym_cls = dataclasses.make_dataclass(
        "GymServerSkyRLGymConfig", [(env_class, GymServerEnvConfig, field(default_factory=GymServerEnvConfig))], bases=(SkyRLGymConfig,)
    )
    env_cls = dataclasses.make_dataclass(
        "GymServerEnvironmentConfig", [("skyrl_gym", gym_cls, field(default_factory=gym_cls))], bases=(EnvironmentConfig,)
    )
    return dataclasses.make_dataclass(
        "GymServerTrainConfig", [("environment", env_cls, field(default_factory=env_cls))], bases=(SkyRLTrainConfig,)
    )
