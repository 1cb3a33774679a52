"""VERL adapters: an agent loop and a tool backed by gymserver sessions.

Checked against VERL main b178a3cd56f58b2d502255daba591e92833930a7
(2026-01-29) and release v0.7.0 (f9c855f7cf04d603c9546bc01776c74806a879c1):
``verl/experimental/agent_loop/agent_loop.py``, ``tool_agent_loop.py``,
``verl/tools/base_tool.py``, ``schemas.py``, ``utils/tool_registry.py``.
Settings are read in ``__init__``, so ``GymServerAgentLoop`` should also
construct on the ``init_class`` releases (v0.5 … v0.6.1; not tested);
``GymServerTool`` needs v0.7.0 or later (``execute`` gets ``agent_data``).

``GymServerAgentLoop`` (recommended) is an ``AgentLoopBase``. Register it in
the agent-loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)::

    - name: gymserver
      _target_: gymserver.adapters.verl.GymServerAgentLoop
      gymserver_url: ws://gym-host:8080
      parser: hermes
      max_turns: 30

and give each dataset row ``agent_name: gymserver`` and
``extra_info: {gymserver: {env: calculator_api, task: ..., seed: ...}}``.
VERL builds one loop per sample (``hydra.utils.instantiate`` with the keys
above as keyword arguments) and awaits ``run(sampling_params, **row)``. The
loop resets a session, renders the server's messages and tool schemas with
the chat template, lets the model act through ``server_manager.generate``
(token ids in, token ids out), sends the decoded text to the server (parsed
there with ``parser``), appends the tool results as observation tokens
(``response_mask`` 0), evaluates, closes the session and returns an
``AgentLoopOutput`` whose ``reward_score`` is the hidden tests' reward.

What VERL's post-processing needs, and gets from every sample (also one
whose reset failed): ``response_logprobs`` is a list exactly when
``sampling_params["logprobs"]`` is set (VERL concatenates the batch's
log-probs only when the first sample has them), ``multi_modal_data`` is
``{}``, the prompt and the response hold at least one token, the prompt is
at most ``rollout.prompt_length`` tokens and the response at most
``rollout.response_length`` tokens (VERL pads to these lengths and never
cuts, so a longer one breaks the batch).

Masked samples (an infrastructure failure, not the agent's: a sandbox or
verifier error, a failed reset, a lost connection, a prompt longer than
``prompt_length``, a generation the rollout server kept aborting) get an
all-zero ``response_mask`` and ``reward_score`` 0. VERL drops such a
sequence from every loss: ``agg_loss`` in ``verl/trainer/ppo/core_algos.py``
excludes fully masked sequences, the mechanism VERL's own rejection
sampling uses (``rollout_corr_helper.py`` zeroes the ``response_mask`` of
rejected sequences). ``extra_fields["gymserver_masked"]`` and
``["gymserver_error_class"]`` say which and why (VERL copies extra fields
into ``non_tensor_batch``).

``GymServerTool`` exposes one gymserver tool as a VERL ``BaseTool`` for
VERL's own ``ToolAgentLoop``; ``GymServerToolAgentLoop`` is that loop with
the end-of-trajectory hook the tools need. See their docstrings.

Limits: text only (no images); the rollout server's ``max_tokens`` is not
set, so the last turn may generate past the response budget and is cut
(as in ``ToolAgentLoop``); a masked sample still counts in its GRPO
group's mean and standard deviation with reward 0 (VERL groups by ``uid``
and has no per-sample weight), only its own gradient is dropped.

When VERL is not installed the module still imports, but its classes
cannot be constructed (``HAVE_VERL`` is False).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple
from uuid import uuid4

from ..client import AsyncSession
from ..errors import GymServerError
from ._shared import episode_spec, loop_lock, shared_async_client, shared_client

__all__ = [
    "GymServerAgentLoop",
    "GymServerToolAgentLoop",
    "GymServerTool",
    "finish_trajectory",
    "HAVE_VERL",
]

log = logging.getLogger("gymserver.adapters.verl")


class _VerlMissing:
    """_VerlMissing is the base of this module's classes when VERL is not installed; it cannot be constructed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ImportError("gymserver.adapters.verl needs VERL (pip install verl)")


try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase as _AgentLoopBase  # type: ignore[import-not-found]
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput as _AgentLoopOutput  # type: ignore[import-not-found]
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as _ToolAgentLoop  # type: ignore[import-not-found]
    from verl.tools.base_tool import BaseTool as _BaseTool  # type: ignore[import-not-found]
    from verl.tools.schemas import OpenAIFunctionToolSchema as _ToolSchema  # type: ignore[import-not-found]
    from verl.tools.schemas import ToolResponse as _ToolResponse  # type: ignore[import-not-found]

    #: HAVE_VERL reports whether VERL is installed (else the classes here cannot be constructed).
    HAVE_VERL = True
except ImportError:
    HAVE_VERL = False
    _AgentLoopBase = _ToolAgentLoop = _BaseTool = _VerlMissing  # type: ignore[misc,assignment]
    _AgentLoopOutput = _ToolSchema = _ToolResponse = None  # type: ignore[misc,assignment]


def _row_spec(row: Mapping[str, Any], defaults: Mapping[str, Any]) -> Dict[str, Any]:
    """_row_spec finds env/task/seed/options of a dataset row (``extra_info`` or its ``gymserver`` dict, or ``gymserver``) over defaults."""
    extra = row.get("extra_info")
    nested = extra.get("gymserver") if isinstance(extra, Mapping) else None
    return episode_spec(defaults, extra, nested, row.get("gymserver"))


def _token_ids(ids: Any) -> List[int]:
    """_token_ids returns the ids of a chat template's output (a list, a batch of one, or a BatchEncoding)."""
    if isinstance(ids, Mapping):
        ids = ids["input_ids"]
    ids = list(ids)
    if len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])
    return [int(i) for i in ids]


def _system_prefix(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> List[int]:
    """_system_prefix returns the tokens a chat template puts before the first message (its default system prompt).

    It is computed as VERL's ``initialize_system_prompt`` does: the
    rendering of one empty user message minus what a second one adds.
    """
    one = _token_ids(tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=False, tokenize=True, **template_kwargs))
    two = _token_ids(tokenizer.apply_chat_template([{"role": "user", "content": ""}] * 2, add_generation_prompt=False, tokenize=True, **template_kwargs))
    return one[: len(one) - (len(two) - len(one))]


def _filler_id(tokenizer: Any) -> int:
    """_filler_id is the token that stands for an empty prompt or response (VERL's padding breaks on empty ones)."""
    for name in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, name, None)
        if isinstance(v, int):
            return v
    return 0


@dataclass
class _Sample:
    """_Sample is one trajectory as it is built: token ids, masks, log-probs and the outcome."""

    prompt_ids: List[int] = field(default_factory=list)
    response_ids: List[int] = field(default_factory=list)
    response_mask: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    assistant_turns: int = 0
    observation_turns: int = 0
    reward: float = 0.0
    termination: str = ""
    error_class: str = ""  # set when the sample is masked

    def add(self, ids: List[int], logprobs: Optional[List[float]], trained: bool) -> None:
        """add appends tokens: the model's (mask 1, its log-probs) or an observation's (mask 0, log-prob 0)."""
        self.response_ids += ids
        self.response_mask += [1 if trained else 0] * len(ids)
        self.logprobs += list(logprobs) if logprobs and len(logprobs) == len(ids) else [0.0] * len(ids)

    def fail(self, error_class: str) -> None:
        """fail masks the sample with the first error class that hit it."""
        if not self.error_class:
            self.error_class = error_class or "internal"


class GymServerAgentLoop(_AgentLoopBase):  # type: ignore[misc,valid-type]
    """GymServerAgentLoop is a VERL agent loop whose environment is a gymserver session.

    VERL constructs it once per sample with ``(trainer_config,
    server_manager, tokenizer, processor, dataset_cls, dataset_config)``
    plus the keys of its agent-loop config entry, read here:
    ``gymserver_url`` (or ``GYMSERVER_URL``), ``gymserver_token`` (or
    ``GYMSERVER_TOKEN``), ``env``/``task`` defaults for rows that name none,
    ``parser`` (how the server parses model text into tool calls:
    ``hermes``, ``json``, ``react``; default ``hermes``), ``max_turns``
    (assistant turns, default 30) and ``max_resumes`` (how often a
    generation the rollout server aborted is resumed, default 3). The
    token budgets are the trainer's ``actor_rollout_ref.rollout.prompt_length``
    and ``response_length``.
    """

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, *args: Any, **kwargs: Any) -> None:
        mine = {k: kwargs.pop(k, None) for k in ("gymserver_url", "gymserver_token", "env", "task", "parser", "max_turns", "max_resumes")}
        super().__init__(trainer_config, server_manager, tokenizer, processor, *args, **kwargs)
        rollout = trainer_config.config.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.response_length = int(rollout.response_length)
        self.url: Optional[str] = mine["gymserver_url"]
        self.token: Optional[str] = mine["gymserver_token"]
        self.defaults = {"env": mine["env"], "task": mine["task"]}
        self.parser = str(mine["parser"] or "hermes")
        self.max_turns = int(mine["max_turns"] or 30)
        self.max_resumes = int(3 if mine["max_resumes"] is None else mine["max_resumes"])
        self.template_kwargs: Dict[str, Any] = dict(getattr(self, "apply_chat_template_kwargs", None) or {})

    async def _encode(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None, strip_system: bool = False) -> List[int]:
        """_encode renders messages with the chat template and a generation prompt, as VERL's loops do.

        With strip_system the template's default system prompt is cut off,
        so a lone tool message becomes just its turn (VERL's
        ``remove_system_prompt``).
        """

        def _apply() -> List[int]:
            return _token_ids(self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, **self.template_kwargs))

        ids = await asyncio.get_running_loop().run_in_executor(None, _apply)
        if strip_system:
            prefix = getattr(self, "system_prompt", None)
            if prefix is None:
                prefix = self.system_prompt = _system_prefix(self.tokenizer, self.template_kwargs)
            ids = ids[len(prefix) :]
        return ids

    async def _generate(self, request_id: str, prompt_ids: List[int], sampling_params: Dict[str, Any]) -> Tuple[List[int], List[float], bool]:
        """_generate asks the rollout server for one assistant turn.

        A generation that stops with ``stop_reason == "aborted"`` (the
        server aborted it, e.g. to update weights: VERL's partial rollout)
        is resumed from its partial tokens up to ``max_resumes`` times.
        Returns the tokens, their log-probs and whether it was still aborted.
        """
        ids: List[int] = []
        logprobs: List[float] = []
        for _ in range(self.max_resumes + 1):
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids + ids, sampling_params=sampling_params)
            new = list(out.token_ids)
            lps = getattr(out, "log_probs", None)
            ids += new
            logprobs += list(lps) if lps and len(lps) == len(new) else [0.0] * len(new)
            if getattr(out, "stop_reason", None) != "aborted":
                return ids, logprobs, False
        return ids, logprobs, True

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> Any:
        """run plays one episode for one dataset row and returns VERL's AgentLoopOutput."""
        spec = _row_spec(kwargs, self.defaults)
        if not spec.get("env"):
            raise ValueError("gymserver: no env for this sample (set extra_info.gymserver.env or the loop's env)")
        sample = _Sample()
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0}
        session: Optional[AsyncSession] = None
        try:
            pool = await shared_async_client(self.url, self.token)
            session = await pool.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"), parser=self.parser)
            sample.prompt_ids = await self._encode(session.messages, tools=session.tools)
            if len(sample.prompt_ids) > self.prompt_length:
                sample.fail("prompt_too_long")
            else:
                await self._play(session, sample, sampling_params, metrics)
        except GymServerError as e:
            log.warning("gymserver: sample of env %s masked: %s", spec.get("env"), e)
            sample.fail(e.code)
        finally:
            if session is not None:
                try:
                    await session.close()
                except GymServerError:
                    pass
        return self._output(sample, bool(sampling_params.get("logprobs")), metrics, session)

    async def _play(self, session: AsyncSession, sample: _Sample, sampling_params: Dict[str, Any], metrics: Dict[str, float]) -> None:
        """_play runs the turns of one episode and evaluates it unless the server ended it."""
        request_id = uuid4().hex
        while True:
            t0 = time.monotonic()
            ids, logprobs, aborted = await self._generate(request_id, sample.prompt_ids + sample.response_ids, sampling_params)
            metrics["generate_sequences"] += time.monotonic() - t0
            sample.add(ids, logprobs, trained=True)
            sample.assistant_turns += 1
            if aborted:
                sample.fail("generation_aborted")
                return
            if len(sample.response_mask) >= self.response_length:
                sample.termination = "response_length"
                break
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            before = len(session.messages)
            t0 = time.monotonic()
            res = await session.step(text)
            metrics["tool_calls"] += time.monotonic() - t0
            ev = res.evaluation
            if res.mask:
                sample.fail((ev.error_class if ev is not None and ev.mask else "") or "sandbox_error")
                return
            if res.terminated or res.truncated:
                sample.reward = float(res.reward)
                sample.termination = res.termination_reason or ("completed" if res.terminated else "truncated")
                return
            if sample.assistant_turns >= self.max_turns:
                sample.termination = "max_turns"
                break
            obs = await self._encode(session.messages[before + 1 :], strip_system=True)
            if len(sample.response_mask) + len(obs) >= self.response_length:
                sample.termination = "response_length"
                break  # the last turn stays the model's, as in VERL's ToolAgentLoop
            sample.add(obs, None, trained=False)
            sample.observation_turns += 1
        ev = await session.evaluate()
        if ev.mask:
            sample.fail(ev.error_class or "verifier_error")
        sample.reward = float(ev.reward)

    def _output(self, sample: _Sample, want_logprobs: bool, metrics: Dict[str, float], session: Optional[AsyncSession]) -> Any:
        """_output builds the AgentLoopOutput in the shape VERL's post-processing needs (see the module docstring)."""
        masked = bool(sample.error_class)
        filler = _filler_id(self.tokenizer)
        prompt_ids = sample.prompt_ids[: self.prompt_length] or [filler]
        n = self.response_length
        response_ids = sample.response_ids[:n] or [filler]
        response_mask = sample.response_mask[:n] or [0]
        logprobs = sample.logprobs[:n] or [0.0]
        if masked:
            response_mask = [0] * len(response_mask)
        return _AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=logprobs if want_logprobs else None,
            multi_modal_data={},
            reward_score=0.0 if masked else sample.reward,
            num_turns=sample.assistant_turns + sample.observation_turns + 1,
            metrics=metrics,
            extra_fields={
                "gymserver_masked": masked,
                "gymserver_error_class": sample.error_class,
                "gymserver_session": session.id if session is not None else "",
                "gymserver_termination": sample.termination,
            },
        )


# --- tools for VERL's ToolAgentLoop ------------------------------------------


@dataclass
class _Trajectory:
    """_Trajectory is the gymserver session of one VERL trajectory and its outcome."""

    key: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: Optional[AsyncSession] = None
    last_used: float = field(default_factory=time.monotonic)
    ended: bool = False
    reward: float = 0.0
    termination: str = ""
    error_class: str = ""  # set when the trajectory is masked

    @property
    def masked(self) -> bool:
        """masked reports an infrastructure failure: the sample should be dropped."""
        return bool(self.error_class)

    def result(self) -> Dict[str, Any]:
        """result is the outcome as a dict (the keys GymServerToolAgentLoop puts into extra_fields)."""
        return {
            "gymserver_masked": self.masked,
            "gymserver_error_class": self.error_class,
            "gymserver_session": self.session.id if self.session is not None else "",
            "gymserver_termination": self.termination,
            "gymserver_reward": 0.0 if self.masked else self.reward,
        }


# _trajectories maps a trajectory key (VERL's agent_data.request_id) to its
# trajectory; the running loop's lock in _trajectory_locks guards it.
_trajectories: Dict[str, _Trajectory] = {}
_trajectory_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()

# _schemas caches the tool schemas of (url, env) fetched from the server; _schemas_lock guards it.
_schemas_lock = threading.Lock()
_schemas: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}


async def _end(traj: _Trajectory, evaluate: bool) -> None:
    """_end evaluates the trajectory's episode (when asked and it is still running) and closes its session."""
    session = traj.session
    if session is not None and not session.closed:
        try:
            if evaluate and not traj.ended:
                ev = await session.evaluate()
                traj.reward = float(ev.reward)
                traj.termination = traj.termination or "evaluated"
                if ev.mask:
                    traj.error_class = traj.error_class or ev.error_class or "verifier_error"
        except GymServerError as e:
            traj.error_class = traj.error_class or e.code
        finally:
            try:
                await session.close()
            except GymServerError:
                pass
    traj.ended = True


async def finish_trajectory(key: str) -> Optional[Dict[str, Any]]:
    """finish_trajectory ends the trajectory ``key`` (VERL's ``agent_data.request_id``) and returns its outcome.

    A running episode is evaluated first. The outcome has the keys
    ``gymserver_masked``, ``gymserver_error_class``, ``gymserver_session``,
    ``gymserver_termination`` and ``gymserver_reward`` (0 when masked);
    None when no tool of the trajectory ran. ``GymServerToolAgentLoop``
    calls it when its trajectory ends.
    """
    async with loop_lock(_trajectory_locks):
        traj = _trajectories.pop(key, None)
    if traj is None:
        return None
    async with traj.lock:
        await _end(traj, evaluate=True)
    return traj.result()


class GymServerTool(_BaseTool):  # type: ignore[misc,valid-type]
    """GymServerTool exposes one gymserver tool (``execute_command``, ``write_file``, ...) as a VERL ``BaseTool``.

    List one entry per tool in VERL's tool config file
    (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)::

        tools:
          - class_name: gymserver.adapters.verl.GymServerTool
            config: {type: native, tool: write_file, env: calculator_api, gymserver_url: "ws://gym-host:8080"}

    Config keys: ``tool`` (its name; not needed when the entry has a
    ``tool_schema``), ``gymserver_url``, ``gymserver_token``, ``env``,
    ``task``, ``seed``, ``options``, ``idle_timeout`` (seconds, default
    1800). Without a ``tool_schema`` the schema is fetched from the server
    (``envs()``), so the model sees the server's own tool descriptions.

    VERL's ``ToolAgentLoop`` makes a new instance for every call
    (``create`` → ``execute(..., agent_data=...)`` → ``release``; VERL
    passes ``agent_data`` since v0.7.0, so older releases are not
    supported). All calls of one trajectory share one session, keyed by
    ``agent_data.request_id`` (by the instance id when a caller passes no
    ``agent_data``; ``release`` then ends it);
    it starts at the first call (episode keys: the tool config, then the
    row's ``tools_kwargs[tool].create_kwargs``, then the row's
    ``extra_info.gymserver`` when ``GymServerToolAgentLoop`` runs). The
    session ends when the episode does (``mark_done``, action or time
    limit: the final reward is that call's tool reward), when
    ``GymServerToolAgentLoop`` finishes the trajectory, or after
    ``idle_timeout`` without a call (VERL's plain ``tool_agent`` has no
    end-of-trajectory hook; the server's idle-session TTL is the last resort).
    """

    def __init__(self, config: Dict[str, Any], tool_schema: Any) -> None:
        # _specs maps this tool's live instance ids to their create kwargs.
        self._specs: Dict[str, Dict[str, Any]] = {}
        super().__init__(config, tool_schema)
        self.idle_timeout = float((config or {}).get("idle_timeout") or 1800)

    def get_openai_tool_schema(self) -> Any:
        """get_openai_tool_schema returns the tool's schema: the configured one, else the server's (fetched once per url and env)."""
        schema = getattr(self, "tool_schema", None)
        if schema is not None:
            return schema
        cfg = self.config or {}
        name = cfg.get("tool")
        if not name:
            raise ValueError("GymServerTool: set config.tool (the gymserver tool name) or give a tool_schema")
        url, env = cfg.get("gymserver_url"), cfg.get("env")
        key = (str(url or ""), str(env or ""))
        with _schemas_lock:
            tools = _schemas.get(key)
        if tools is None:
            envs = shared_client(url, cfg.get("gymserver_token")).envs()
            tools = [t for e in envs if not env or e.get("id") == env for t in (e.get("tools") or [])]
            with _schemas_lock:
                _schemas[key] = tools
        for t in tools:
            if (t.get("function") or {}).get("name") == name:
                return _ToolSchema.model_validate(t)
        raise ValueError(f"GymServerTool: the server has no tool {name!r}" + (f" in env {env!r}" if env else ""))

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> Tuple[str, Any]:
        """create makes an instance for one call; ``create_kwargs`` (from the row's ``tools_kwargs``) may name the episode."""
        iid = instance_id or uuid4().hex
        spec = episode_spec(self.config, kwargs.get("create_kwargs"), kwargs)
        self._specs[iid] = spec
        return iid, _ToolResponse()

    async def _open(self, key: str, spec: Mapping[str, Any]) -> _Trajectory:
        """_open returns the trajectory ``key``, starting its session on first use; it also ends idle trajectories."""
        now = time.monotonic()
        idle: List[_Trajectory] = []
        async with loop_lock(_trajectory_locks):
            for t in list(_trajectories.values()):
                if t.key == key or now - t.last_used <= self.idle_timeout:
                    continue
                if t.ended:
                    del _trajectories[t.key]  # ended and unclaimed for idle_timeout: forget it
                else:
                    t.last_used = now  # end it now, forget it one idle_timeout later
                    idle.append(t)
            traj = _trajectories.get(key)
            if traj is None:
                traj = _trajectories[key] = _Trajectory(key)
            traj.last_used = now
        for t in idle:
            log.warning("gymserver: closing trajectory %s after %.0fs without a tool call", t.key, self.idle_timeout)
            async with t.lock:
                if not t.ended:
                    t.error_class = t.error_class or "idle_timeout"
                    await _end(t, evaluate=False)
        async with traj.lock:
            if traj.session is None and not traj.ended:
                try:
                    if not spec.get("env"):
                        raise ValueError("GymServerTool: no env in the tool config, create_kwargs or the row's extra_info.gymserver")
                    pool = await shared_async_client(self.config.get("gymserver_url"), self.config.get("gymserver_token"))
                    traj.session = await pool.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"))
                except GymServerError as e:
                    log.warning("gymserver: reset for trajectory %s failed: %s", key, e)
                    traj.error_class, traj.ended = e.code, True
        return traj

    async def execute(self, instance_id: str, parameters: Dict[str, Any], **kwargs: Any) -> Tuple[Any, float, Dict[str, Any]]:
        """execute runs this tool with ``parameters`` in the trajectory's sandbox.

        Returns ``(ToolResponse(text=observation), reward, metrics)``: the
        reward is the episode's final reward on the call that ended it (0
        before); metrics hold exit code, duration, error class,
        ``terminated`` and ``mask``.
        """
        agent_data = kwargs.get("agent_data")
        key = str(getattr(agent_data, "request_id", "") or instance_id)
        extra = getattr(agent_data, "extra_fields", None)
        spec = episode_spec(self._specs.get(instance_id) or episode_spec(self.config), extra.get("gymserver") if isinstance(extra, Mapping) else None)
        traj = await self._open(key, spec)
        async with traj.lock:
            traj.last_used = time.monotonic()
            if traj.ended or traj.session is None:
                why = traj.error_class or traj.termination or "ended"
                return _ToolResponse(text=f"Error: the episode is over ({why}); no more tool calls."), 0.0, {"terminated": True, "mask": traj.masked}
            args = parameters if isinstance(parameters, str) else json.dumps(parameters)
            try:
                res = await traj.session.step([{"name": self.name, "arguments": args}])
            except GymServerError as e:
                traj.error_class = traj.error_class or (e.code if e.mask else "")
                traj.termination = traj.termination or e.code
                await _end(traj, evaluate=not traj.masked)
                return _ToolResponse(text=f"Error: {e}"), 0.0, {"error_class": e.code, "terminated": True, "mask": traj.masked}
            done = res.terminated or res.truncated
            if res.mask:
                ev = res.evaluation
                traj.error_class = traj.error_class or (ev.error_class if ev is not None and ev.mask else "") or "sandbox_error"
            if done:
                traj.reward = float(res.reward)
                traj.termination = res.termination_reason or ("completed" if res.terminated else "truncated")
            if done or res.mask:
                await _end(traj, evaluate=False)
        call = (res.info.get("calls") or [{}])[0]
        metrics = {
            "exit_code": call.get("exit_code"),
            "duration": call.get("duration"),
            "error_class": call.get("error_class", ""),
            "terminated": done,
            "mask": res.mask,
        }
        return _ToolResponse(text=res.observation.text), float(res.reward) if done and not res.mask else 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """calc_reward evaluates the trajectory's episode (idempotent; 0 when masked). VERL's ToolAgentLoop does not call it."""
        agent_data = kwargs.get("agent_data")
        key = str(getattr(agent_data, "request_id", "") or instance_id)
        async with loop_lock(_trajectory_locks):
            traj = _trajectories.get(key)
        if traj is None:
            return 0.0
        async with traj.lock:
            if not traj.ended and traj.session is not None:
                try:
                    ev = await traj.session.evaluate()
                except GymServerError as e:
                    traj.error_class = traj.error_class or e.code
                else:
                    traj.reward = float(ev.reward)
                    if ev.mask:
                        traj.error_class = traj.error_class or ev.error_class or "verifier_error"
        return 0.0 if traj.masked else traj.reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """release forgets the call's instance; the trajectory's session lives on (see the class docstring).

        A trajectory keyed by the instance id itself (calls without
        ``agent_data``: the caller passes one instance id per trajectory
        and releases it at the end) is ended here.
        """
        self._specs.pop(instance_id, None)
        async with loop_lock(_trajectory_locks):
            traj = _trajectories.pop(instance_id, None)
        if traj is not None:
            async with traj.lock:
                await _end(traj, evaluate=False)


class GymServerToolAgentLoop(_ToolAgentLoop):  # type: ignore[misc,valid-type]
    """GymServerToolAgentLoop is VERL's ``ToolAgentLoop`` that ends each trajectory's gymserver session with the trajectory.

    Register it in the agent-loop config file instead of ``tool_agent``
    (``- name: gymserver_tool_agent`` / ``_target_:
    gymserver.adapters.verl.GymServerToolAgentLoop``) with
    ``GymServerTool`` entries in the tool config. Everything else is
    VERL's loop: VERL parses the tool calls (``multi_turn.format``) and the
    model sees the row's ``raw_prompt`` (put the task's prompt there).
    The row's ``extra_info.gymserver`` names the episode. After the loop
    ends, the episode is evaluated when still running, its session closed,
    and ``reward_score`` set to the hidden tests' reward; a masked
    trajectory gets an all-zero ``response_mask`` (see the module
    docstring) and ``extra_fields["gymserver_masked"]``.
    """

    async def _handle_pending_state(self, agent_data: Any, sampling_params: Dict[str, Any]) -> Any:
        """_handle_pending_state notes the trajectory (its request_id and episode) before VERL renders the prompt."""
        self._gym_agent_data = agent_data
        if self._gym_spec:
            agent_data.extra_fields["gymserver"] = dict(self._gym_spec)
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> Any:
        """run runs VERL's ToolAgentLoop, then ends the trajectory's session and reports its reward and mask."""
        self._gym_agent_data: Any = None
        self._gym_spec = _row_spec(kwargs, {})
        try:
            output = await super().run(sampling_params, **kwargs)
        finally:
            key = getattr(self._gym_agent_data, "request_id", None)
            result = await finish_trajectory(key) if key else None
        if result is None:
            result = {"gymserver_masked": False, "gymserver_error_class": "", "gymserver_session": "", "gymserver_termination": "no_tool_call", "gymserver_reward": 0.0}
        output.reward_score = float(result.pop("gymserver_reward"))
        output.extra_fields.update(result)
        if result["gymserver_masked"]:
            output.response_mask = [0] * len(output.response_mask)
        if sampling_params.get("logprobs") and output.response_logprobs is None:
            output.response_logprobs = [0.0] * len(output.response_ids)
        return output
