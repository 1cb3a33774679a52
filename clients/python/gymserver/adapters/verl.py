"""VERL adapters: an agent loop (``AgentLoopBase``) and a tool (``BaseTool``) backed by gymserver.

``GymServerAgentLoop`` is the recommended integration: register it in an
agent-loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)::

    - name: gymserver
      _target_: gymserver.adapters.verl.GymServerAgentLoop
      gymserver_url: ws://gym-host:8080
      parser: hermes
      max_turns: 30

and give each dataset row ``agent_name: gymserver`` and
``extra_info: {gymserver: {env: calculator_api, task: ..., seed: ...}}``.
For every sample VERL calls ``await loop.run(sampling_params, **row)``; the
loop resets a session, lets the model act through
``server_manager.generate`` (token ids in, token ids out), sends the decoded
text to the server (parsed there with ``parser``), appends the tool results
as non-trained tokens (``response_mask`` 0), and returns an
``AgentLoopOutput`` whose ``reward_score`` is the hidden tests' reward.
Infrastructure failures set ``extra_fields["gymserver_masked"] = True``.

``GymServerTool`` exposes one gymserver tool as a VERL ``BaseTool`` with
trajectory-scoped state: ``create(instance_id)`` starts a session (or joins
it when another tool of the same trajectory already created that
instance_id), ``execute`` runs the call, ``calc_reward`` evaluates,
``release`` closes the session when its last tool releases it.

VERL is imported lazily; without it the module uses small local stand-ins
with the same signatures, so it stays importable and testable.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from typing import Any, Dict, List, Mapping, Optional, Tuple
from uuid import uuid4

from ..client import AsyncSession
from ..errors import GymServerError
from ._shared import episode_spec, loop_lock, shared_async_client

__all__ = [
    "GymServerAgentLoop",
    "GymServerTool",
    "AgentLoopBase",
    "AgentLoopOutput",
    "BaseTool",
    "ToolResponse",
    "OpenAIFunctionToolSchema",
    "HAVE_VERL",
]

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput  # type: ignore[import-not-found]

    #: HAVE_VERL reports whether VERL's classes are used (else the local stand-ins).
    HAVE_VERL = True
except ImportError:
    HAVE_VERL = False

    class AgentLoopBase:  # type: ignore[no-redef]
        """AgentLoopBase stands in for ``verl.experimental.agent_loop.AgentLoopBase`` when VERL is not installed."""

        _class_initialized = False

        def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, **kwargs: Any) -> None:
            self.init_class(config=getattr(trainer_config, "config", trainer_config), tokenizer=tokenizer, processor=processor, **kwargs)
            self.config = getattr(trainer_config, "config", trainer_config)
            self.server_manager = server_manager
            self.tokenizer = tokenizer
            self.processor = processor
            self.loop = asyncio.get_running_loop()

        @classmethod
        def init_class(cls, config: Any, tokenizer: Any, processor: Any, **kwargs: Any) -> None:
            """init_class runs once per class (heavy shared set-up)."""
            if cls._class_initialized:
                return
            cls._class_initialized = True

        async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> Any:
            """run produces one sample's AgentLoopOutput."""
            raise NotImplementedError

    class AgentLoopOutput:  # type: ignore[no-redef]
        """AgentLoopOutput stands in for VERL's pydantic model of the same name (same fields)."""

        def __init__(
            self,
            *,
            prompt_ids: List[int],
            response_ids: List[int],
            response_mask: List[int],
            response_logprobs: Optional[List[float]] = None,
            multi_modal_data: Optional[Dict[str, Any]] = None,
            reward_score: Optional[float] = None,
            num_turns: int = 0,
            metrics: Any = None,
            extra_fields: Optional[Dict[str, Any]] = None,
        ) -> None:
            self.prompt_ids = prompt_ids
            self.response_ids = response_ids
            self.response_mask = response_mask
            self.response_logprobs = response_logprobs
            self.multi_modal_data = multi_modal_data
            self.reward_score = reward_score
            self.num_turns = num_turns
            self.metrics = metrics if metrics is not None else {}
            self.extra_fields = extra_fields if extra_fields is not None else {}


try:
    from verl.tools.base_tool import BaseTool  # type: ignore[import-not-found]
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse  # type: ignore[import-not-found]
except ImportError:

    class ToolResponse:  # type: ignore[no-redef]
        """ToolResponse stands in for ``verl.tools.schemas.ToolResponse`` (text only)."""

        def __init__(self, text: Optional[str] = None, image: Any = None, video: Any = None) -> None:
            self.text = text
            self.image = image
            self.video = video

    class _FunctionSchema:
        def __init__(self, d: Mapping[str, Any]) -> None:
            self.name = str(d.get("name") or "")
            self.description = str(d.get("description") or "")
            self.parameters = dict(d.get("parameters") or {})

    class OpenAIFunctionToolSchema:  # type: ignore[no-redef]
        """OpenAIFunctionToolSchema stands in for VERL's pydantic tool schema."""

        def __init__(self, d: Mapping[str, Any]) -> None:
            self._d = dict(d)
            self.type = str(d.get("type") or "function")
            self.function = _FunctionSchema(d.get("function") or {})

        @classmethod
        def model_validate(cls, d: Mapping[str, Any]) -> "OpenAIFunctionToolSchema":
            """model_validate builds the schema from its dict form."""
            return cls(d)

        def model_dump(self, **kwargs: Any) -> Dict[str, Any]:
            """model_dump returns the dict form."""
            return dict(self._d)

    class BaseTool:  # type: ignore[no-redef]
        """BaseTool stands in for ``verl.tools.base_tool.BaseTool`` when VERL is not installed."""

        def __init__(self, config: dict, tool_schema: Any) -> None:
            self.config = config
            self.tool_schema = tool_schema or self.get_openai_tool_schema()
            self.name = self.tool_schema.function.name

        def get_openai_tool_schema(self) -> Any:
            """get_openai_tool_schema returns the tool's OpenAI schema."""
            return self.tool_schema

        async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> Tuple[str, Any]:
            """create makes a tool instance for a trajectory."""
            return instance_id or str(uuid4()), ToolResponse()

        async def execute(self, instance_id: str, parameters: Dict[str, Any], **kwargs: Any) -> Tuple[Any, float, dict]:
            """execute runs the tool."""
            return ToolResponse(text=""), 0.0, {}

        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            """calc_reward returns the instance's reward."""
            return 0.0

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            """release frees the instance."""


def _episode_spec(kwargs: Mapping[str, Any], defaults: Mapping[str, Any]) -> Dict[str, Any]:
    """_episode_spec finds env/task/seed/options in a dataset row (``gymserver`` or ``extra_info.gymserver`` or ``extra_info``)."""
    extra = kwargs.get("extra_info")
    spec = episode_spec(defaults, extra, extra.get("gymserver") if isinstance(extra, Mapping) else None, kwargs.get("gymserver"))
    if not spec.get("env"):
        raise ValueError("gymserver: no env for this sample (set extra_info.gymserver.env or the loop's env=)")
    return spec


class GymServerAgentLoop(AgentLoopBase):  # type: ignore[misc,valid-type]
    """GymServerAgentLoop is a VERL agent loop whose environment is a gymserver session.

    Settings (keyword arguments from the agent-loop config, read once in
    ``init_class``): ``gymserver_url`` (or ``GYMSERVER_URL``),
    ``gymserver_token`` (or ``GYMSERVER_TOKEN``), ``env``/``task`` defaults
    for rows that name none, ``parser`` (how model text is parsed into tool
    calls: ``hermes``, ``json``, ``react``), ``max_turns`` (assistant turns,
    default 30), ``response_length`` (token budget; default from the
    trainer config ``actor_rollout_ref.rollout.response_length``, else
    8192).
    """

    settings: Dict[str, Any] = {}

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any, processor: Any, **kwargs: Any) -> None:
        """init_class reads the loop's settings once per process."""
        if cls._class_initialized:
            return
        super().init_class(config, tokenizer, processor, **kwargs)
        response_length = kwargs.get("response_length")
        if response_length is None:
            try:
                response_length = config.actor_rollout_ref.rollout.response_length
            except AttributeError:
                response_length = 8192
        cls.settings = {
            "url": kwargs.get("gymserver_url"),
            "token": kwargs.get("gymserver_token"),
            "env": kwargs.get("env"),
            "task": kwargs.get("task"),
            "parser": kwargs.get("parser") or "hermes",
            "max_turns": int(kwargs.get("max_turns") or 30),
            "response_length": int(response_length),
        }

    async def _template(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]], gen: bool) -> List[int]:
        def _apply() -> List[int]:
            kw: Dict[str, Any] = {"add_generation_prompt": gen, "tokenize": True}
            if tools is not None:
                kw["tools"] = tools
            ids = self.tokenizer.apply_chat_template(messages, **kw)
            if isinstance(ids, Mapping):  # newer tokenizers may return a BatchEncoding
                ids = ids["input_ids"]
            if len(ids) == 1 and isinstance(ids[0], list):
                ids = ids[0]
            return list(ids)

        return await self.loop.run_in_executor(None, _apply)

    async def _observation_ids(self, messages: List[Dict[str, Any]]) -> List[int]:
        # A chat template renders a lone tool/user message with its default
        # system prefix; strip that prefix so only the new turn remains.
        ids = await self._template(messages, None, True)
        prefix = await self._template([{}], None, False) if not hasattr(self, "_prefix") else self._prefix
        self._prefix = prefix
        if prefix and ids[: len(prefix)] == prefix:
            ids = ids[len(prefix) :]
        return ids

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> Any:
        """run plays one episode for one dataset row and returns VERL's AgentLoopOutput."""
        st = type(self).settings
        spec = _episode_spec(kwargs, st)
        client = await shared_async_client(st.get("url"), st.get("token"))
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0}
        session: Optional[AsyncSession] = None
        masked, error_class, reward, turns = False, "", 0.0, 0
        termination = ""
        prompt_ids: List[int] = []
        response_ids: List[int] = []
        response_mask: List[int] = []
        logprobs: List[float] = []
        try:
            session = await client.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"), parser=st["parser"])
            prompt_ids = await self._template(session.messages, session.tools, True)
            request_id = uuid4().hex
            done = False
            while turns < st["max_turns"] and len(response_mask) < st["response_length"]:
                t0 = time.monotonic()
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=prompt_ids + response_ids, sampling_params=sampling_params
                )
                metrics["generate_sequences"] += time.monotonic() - t0
                ids = list(getattr(out, "token_ids", out))
                lps = getattr(out, "log_probs", None)
                response_ids += ids
                response_mask += [1] * len(ids)
                logprobs += list(lps) if lps else [0.0] * len(ids)
                turns += 1
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                before = len(session.messages)
                t0 = time.monotonic()
                res = await session.step(text)
                metrics["tool_calls"] += time.monotonic() - t0
                if res.mask:
                    masked, error_class = True, "sandbox_error"
                if res.terminated or res.truncated:
                    done = True
                    reward = float(res.reward)
                    termination = res.termination_reason
                    ev = res.evaluation
                    if ev is not None and ev.mask:
                        masked, error_class = True, ev.error_class or "verifier_error"
                    break
                obs = await self._observation_ids(session.messages[before + 1 :])
                if len(response_mask) + len(obs) >= st["response_length"]:
                    break  # the last turn must be the model's
                response_ids += obs
                response_mask += [0] * len(obs)
                logprobs += [0.0] * len(obs)
            if not done and not masked:
                ev = await session.evaluate()
                reward, termination = ev.reward, "evaluated"
                if ev.mask:
                    masked, error_class = True, ev.error_class or "verifier_error"
        except GymServerError as e:
            masked, error_class = True, e.code
        finally:
            if session is not None:
                try:
                    await session.close()
                except GymServerError:
                    pass
        n = st["response_length"]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:n],
            response_mask=response_mask[:n],
            response_logprobs=logprobs[:n] if any(logprobs) else None,
            reward_score=0.0 if masked else reward,
            num_turns=2 * turns + 1,
            metrics=metrics,
            extra_fields={
                "gymserver_masked": masked,
                "gymserver_error_class": error_class,
                "gymserver_session": session.id if session else "",
                "gymserver_termination": termination,
            },
        )


class GymServerTool(BaseTool):  # type: ignore[misc,valid-type]
    """GymServerTool exposes one gymserver tool (``execute_command``, ``write_file``, ...) as a VERL BaseTool.

    Tool config keys: ``gymserver_url``, ``gymserver_token``, ``env``,
    ``task``, ``seed``, ``parser``. The tool schema comes from the VERL tool
    config; its function name selects the gymserver tool. All tools that
    ``create`` the same ``instance_id`` share one session (one sandbox), so
    a trajectory's calls see each other's effects.
    """

    # _sessions maps instance ids to [session, refcount]; the running loop's
    # lock in _locks guards it.
    _sessions: Dict[str, List[Any]] = {}
    _locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()

    def __init__(self, config: dict, tool_schema: Any) -> None:
        super().__init__(config, tool_schema)
        self.gym_config = dict(config or {})

    @classmethod
    def _guard(cls) -> asyncio.Lock:
        return loop_lock(GymServerTool._locks)

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> Tuple[str, Any]:
        """create starts the trajectory's session (or joins it) and returns ``(instance_id, ToolResponse)``.

        ``kwargs`` (or ``kwargs["create_kwargs"]``) may carry ``env``,
        ``task``, ``seed``, ``options`` overriding the tool config.
        """
        iid = instance_id or str(uuid4())
        ck = dict(self.gym_config)
        ck.update(kwargs.get("create_kwargs") or {})
        ck.update({k: v for k, v in kwargs.items() if k != "create_kwargs"})
        async with self._guard():
            entry = GymServerTool._sessions.get(iid)
            if entry is not None:
                entry[1] += 1
                return iid, ToolResponse()
            client = await shared_async_client(ck.get("gymserver_url"), ck.get("gymserver_token"))
            if not ck.get("env"):
                raise ValueError("GymServerTool: no env in the tool config or create kwargs")
            session = await client.reset(ck["env"], ck.get("task"), ck.get("seed"), ck.get("options"), parser=ck.get("parser"))
            GymServerTool._sessions[iid] = [session, 1]
        return iid, ToolResponse()

    def session(self, instance_id: str) -> AsyncSession:
        """session returns the live session of an instance (KeyError when unknown)."""
        return GymServerTool._sessions[instance_id][0]

    async def execute(self, instance_id: str, parameters: Dict[str, Any], **kwargs: Any) -> Tuple[Any, float, dict]:
        """execute runs this tool with ``parameters`` in the instance's sandbox.

        Returns ``(ToolResponse(text=observation), step_reward, metrics)``;
        ``metrics`` holds exit code, duration, error class, ``terminated``
        and ``mask``.
        """
        session = self.session(instance_id)
        args = parameters if isinstance(parameters, str) else json.dumps(parameters)
        try:
            res = await session.step([{"name": self.name, "arguments": args}])
        except GymServerError as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {"error_class": e.code, "mask": e.mask}
        call = (res.info.get("calls") or [{}])[0]
        metrics = {
            "exit_code": call.get("exit_code"),
            "duration": call.get("duration"),
            "error_class": call.get("error_class", ""),
            "terminated": res.terminated or res.truncated,
            "mask": res.mask,
        }
        return ToolResponse(text=res.observation.text), float(res.reward), metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """calc_reward evaluates the episode (idempotent) and returns the hidden tests' reward."""
        ev = await self.session(instance_id).evaluate()
        return ev.reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """release drops this tool's reference; the last release closes the session."""
        async with self._guard():
            entry = GymServerTool._sessions.get(instance_id)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del GymServerTool._sessions[instance_id]
        try:
            await entry[0].close()
        except GymServerError:
            pass
