"""TRL adapter: gymserver episodes as the environments of TRL's GRPOTrainer and AsyncGRPOTrainer.

Pass :func:`tool_env_factory` as ``environment_factory``; the environment
owns its reward, so no reward function is needed::

    from gymserver.adapters.trl import tool_env_factory
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=ds,
                          environment_factory=tool_env_factory(url="ws://gym:8080", env="calculator_api"))

``AsyncGRPOTrainer`` (``trl.experimental.async_grpo``) takes the same
argument. A dataset row may pick the episode with ``env``, ``task``,
``seed``, ``options`` columns or a ``gymserver`` dict column; every other
column is ignored. Prompts must be conversational; leave the user message
empty (or end it with whitespace): ``reset`` returns the server's task
prompt, which TRL appends to it.

How TRL drives this module (checked against TRL main f2cd5771 of
2026-07-24, v1.9.0 35def3ee and v1.8.0 95809b94; line numbers are main's):

* ``GRPOTrainer.__init__`` calls the factory once to probe an instance and
  takes every public bound method except ``reset`` and ``get_reward`` as a
  tool (trl/trainer/grpo_trainer.py:640-658). transformers turns each method
  into a JSON schema from its signature, type hints and Google docstring
  (``get_json_schema``, called by ``apply_chat_template`` for callables). The
  factory fetches the environment's tool schemas from the server and every
  instance gets one method per server tool with a matching signature and
  docstring, so the model sees the server's tools, not a fixed list.
* A ``get_reward`` method makes the environment a reward source of its own
  (grpo_trainer.py:660-683, since TRL 1.8.0). :class:`GymServerRewardEnv`
  defines an async ``get_reward``: it evaluates the episode (hidden tests)
  unless it already ended, closes the session and returns the reward, or
  None for a masked (infrastructure) failure.
* Per batch, instances are drawn from a pool (reused, never closed by TRL),
  ``reset(**row)`` is called with the dataset row (grpo_trainer.py:2288-2333),
  and the model's parsed tool calls run as ``method(**arguments)``; an
  exception becomes the tool message ``{"error": ...}``
  (grpo_trainer.py:1962-1978).
* None rewards become NaN; a completion for which every reward source gave
  None is "unscorable": left out of the group baseline and given advantage 0
  (grpo_trainer.py:1662-1674, 2676-2730). That is how masked samples are
  dropped. A second reward function that returns a number for such a sample
  (a format reward, say) makes it scorable again: return None there too
  when ``environments[i].masked`` is set.
* ``AsyncGRPOTrainer`` pickles the factory into a spawned worker process
  (trl/experimental/async_grpo/async_rollout_worker.py:942, 979), calls
  ``reset`` and the tools there, and calls ``get_reward`` as soon as each
  rollout completes (async_rollout_worker.py:600-606). Its reward functions
  get no ``environments`` (``_score_group``, async_rollout_worker.py:798-805),
  so ``get_reward`` is the only gymserver reward path there. The factory
  is therefore a module-level class holding plain data; the connection is
  made lazily, in the process that uses it.

For GRPOTrainer with TRL older than 1.8, or to evaluate a batch
concurrently, use ``tool_env_factory(owns_reward=False)`` with
``reward_funcs=[gymserver_reward]``.

Limits: tool parameters are rendered through Python type hints, so a nested
object or array schema reaches the model as plain ``object``/``array`` (item
types of simple arrays are kept), and only string enums survive (as
transformers' ``(choices: ...)``). Tools whose name or parameter names are
not Python identifiers, or that clash with ``reset``/``get_reward``/this
class's attributes, are skipped with a warning. GRPOTrainer calls
``reset``, the tools and ``get_reward`` one rollout after another, so a
batch starts its sandboxes in turn and evaluates the episodes that did not
call ``mark_done`` in turn (``gymserver_reward`` evaluates concurrently). In
AsyncGRPOTrainer, ``reset`` and the tools are synchronous calls that block
the worker's event loop while a sandbox starts or a command runs (TRL does
not support async tools there); ``get_reward`` does not block it.

``HAVE_TRL`` reports whether TRL is importable. TRL defines no base class for
environments (the contract is the ``_SupportsReset`` protocol,
grpo_trainer.py:136), so the classes here subclass nothing either way; with
TRL installed, the factory refuses ``owns_reward=True`` on releases that
predate ``get_reward``, and each generated tool is checked with
transformers' ``get_json_schema``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import keyword
import logging
import re
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import GymServerError
from ..sync import Client, Session
from ._shared import episode_spec, shared_client

try:
    import trl as _trl  # type: ignore[import-not-found]
except ImportError:
    _trl = None

__all__ = [
    "GymServerEnvFactory",
    "GymServerToolEnv",
    "GymServerRewardEnv",
    "tool_env_factory",
    "gymserver_reward",
    "gymserver_reward_async",
    "HAVE_TRL",
    "TRL_VERSION",
]

#: HAVE_TRL reports whether TRL is importable.
HAVE_TRL = _trl is not None
#: TRL_VERSION is the installed TRL's version string, or None.
TRL_VERSION: Optional[str] = str(getattr(_trl, "__version__", "unknown")) if _trl is not None else None

log = logging.getLogger("gymserver")

#: GET_REWARD_SINCE is the first TRL release that calls an environment's ``get_reward``.
GET_REWARD_SINCE = (1, 8)

_JSON_TYPES: Dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}
_SIMPLE_ITEM_TYPES: Dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# transformers reads a docstring's sections by these headings wherever they
# appear, so they must not occur inside server text.
_DOC_HEADINGS = re.compile(r"\b(Args|Returns|Raises):")
# _CONFIG_ERRORS are the reset errors that are the caller's mistake: they raise instead of masking the sample.
_CONFIG_ERRORS = frozenset({"invalid_argument", "not_found", "unauthenticated"})


def _trl_calls_get_reward() -> bool:
    """_trl_calls_get_reward reports False only when the installed TRL is known to predate ``get_reward``."""
    if TRL_VERSION is None:
        return True
    m = re.match(r"(\d+)\.(\d+)", TRL_VERSION)
    if m is None:
        return True
    return (int(m.group(1)), int(m.group(2))) >= GET_REWARD_SINCE


class GymServerEnvFactory:
    """GymServerEnvFactory is the ``environment_factory`` for GRPOTrainer and AsyncGRPOTrainer.

    Calling it returns a new environment: a :class:`GymServerRewardEnv`
    (``owns_reward=True``, the default) or a :class:`GymServerToolEnv`. It
    holds only plain data (strings, numbers, dicts), so it pickles into
    AsyncGRPOTrainer's worker process; connections are made by the
    environments, in the process that uses them.

    Args:
        url, token: the server (default: ``GYMSERVER_URL`` /
            ``GYMSERVER_TOKEN`` of the process that connects).
        env, task, seed, options: the default episode; a dataset row's
            columns override them.
        tools: the OpenAI tool schemas to expose; by default those of
            ``env`` from the server's ``envs`` list, fetched on the first
            call (without ``env``, every environment must have the same
            tools).
        return_prompt: ``reset`` returns the server's task prompt (TRL
            appends it to the row's last message); False returns None.
        owns_reward: the environments define ``get_reward`` (TRL >= 1.8);
            False leaves the reward to :func:`gymserver_reward`.
    """

    def __init__(
        self,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        env: Optional[str] = None,
        task: Optional[str] = None,
        seed: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        return_prompt: bool = True,
        owns_reward: bool = True,
    ) -> None:
        if owns_reward and not _trl_calls_get_reward():
            raise ValueError(
                f"TRL {TRL_VERSION} does not call get_reward (added in TRL 1.8.0) and would offer it to the model "
                "as a tool: use tool_env_factory(owns_reward=False) with reward_funcs=[gymserver_reward]"
            )
        self.url = url
        self.token = token
        self.env = env
        self.task = task
        self.seed = seed
        self.options: Optional[Dict[str, Any]] = dict(options) if options is not None else None
        self.tools: Optional[List[Dict[str, Any]]] = [dict(t) for t in tools] if tools is not None else None
        self.return_prompt = return_prompt
        self.owns_reward = owns_reward

    def __repr__(self) -> str:
        return f"GymServerEnvFactory(url={self.url!r}, env={self.env!r}, owns_reward={self.owns_reward})"

    def __call__(self) -> "GymServerToolEnv":
        """__call__ returns a new environment, fetching the tool schemas from the server on first use."""
        if self.tools is None:
            self.tools = self._fetch_tools()
        if self.owns_reward:
            return GymServerRewardEnv(self)
        return GymServerToolEnv(self)

    def _fetch_tools(self) -> List[Dict[str, Any]]:
        listed = shared_client(self.url, self.token).envs()
        by_env = {str(e.get("id") or ""): [dict(t) for t in (e.get("tools") or [])] for e in listed}
        if self.env:
            if self.env not in by_env:
                raise ValueError(f"gymserver environment {self.env!r} is unknown; the server has {sorted(by_env)}")
            return by_env[self.env]
        distinct = {json.dumps(t, sort_keys=True) for t in by_env.values()}
        if len(distinct) != 1:
            raise ValueError("the server's environments have different tools: pass env= (or tools=) to tool_env_factory")
        return next(iter(by_env.values()))


def tool_env_factory(
    *,
    url: Optional[str] = None,
    token: Optional[str] = None,
    env: Optional[str] = None,
    task: Optional[str] = None,
    seed: Optional[int] = None,
    options: Optional[Mapping[str, Any]] = None,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    return_prompt: bool = True,
    owns_reward: bool = True,
) -> GymServerEnvFactory:
    """tool_env_factory returns the :class:`GymServerEnvFactory` to pass as TRL's ``environment_factory``.

    For several gymserver environments with different tools, pass TRL a
    dict of factories (one per ``env``) and give each row an
    ``environment`` column naming its factory.
    """
    return GymServerEnvFactory(
        url=url,
        token=token,
        env=env,
        task=task,
        seed=seed,
        options=options,
        tools=tools,
        return_prompt=return_prompt,
        owns_reward=owns_reward,
    )


class GymServerToolEnv:
    """GymServerToolEnv is one gymserver episode per rollout; its public methods are the server's tools.

    Made by :class:`GymServerEnvFactory`. ``reset(**row)`` closes the
    previous episode and starts a new one; every tool call is one step.
    State after a call, for reward functions and logs: ``done``,
    ``masked`` (an infrastructure failure: the sample should be dropped),
    ``reward``, ``evaluation``, ``termination_reason``, ``error``,
    ``session_id`` and ``prompt``.

    The reward comes from :func:`gymserver_reward` (GRPOTrainer only); the
    subclass :class:`GymServerRewardEnv` scores itself with ``get_reward``.
    """

    def __init__(self, config: GymServerEnvFactory) -> None:
        self._config = config
        self._session: Optional[Session] = None
        self._score: Optional[float] = None
        self._scored = False
        self._tool_names: List[str] = []
        self._warned_tools = False
        self.session_id = ""
        self.prompt = ""
        self.done = False
        self.masked = False
        self.reward = 0.0
        self.evaluation: Any = None
        self.termination_reason = ""
        self.error = ""
        for schema in config.tools or []:
            self._bind_tool(schema)

    def reset(self, **kwargs: Any) -> Optional[str]:
        """reset starts a new episode for the dataset row ``kwargs`` and returns the task prompt.

        The episode is the factory's default overridden by the row's
        ``env``/``task``/``seed``/``options`` columns and its ``gymserver``
        dict. A configuration error (unknown environment or task, bad
        options, bad token) raises, which stops TRL's training step. Any
        other failure (no free capacity, a sandbox that does not start, a
        lost connection) says nothing about the model: the episode is
        marked ``masked``, the tools answer with an error and the reward is
        None.
        """
        self._end_session()
        self._score, self._scored = None, False
        self.session_id, self.prompt, self.error, self.termination_reason = "", "", "", ""
        self.done, self.masked, self.reward, self.evaluation = False, False, 0.0, None
        cfg = self._config
        defaults = {"env": cfg.env, "task": cfg.task, "seed": cfg.seed, "options": cfg.options}
        spec = episode_spec(defaults, kwargs, kwargs.get("gymserver"))
        if not spec.get("env"):
            raise ValueError("GymServerToolEnv: no env (tool_env_factory(env=...) or an 'env' column)")
        try:
            client: Client = shared_client(cfg.url, cfg.token)
            session = client.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"))
        except GymServerError as e:
            if e.code in _CONFIG_ERRORS:
                raise
            self.done, self.masked, self.error = True, True, f"reset: {e}"
            log.warning("gymserver: reset of %s failed, the sample is masked: %s", spec["env"], e)
            return None
        self._session = session
        self.session_id, self.prompt = session.id, session.prompt
        served = sorted(str((t.get("function") or {}).get("name") or "") for t in session.tools)
        if served != sorted(self._tool_names) and not self._warned_tools:
            self._warned_tools = True
            log.warning("gymserver: %s/%s serves tools %s but the model was given %s", session.env, session.task, served, sorted(self._tool_names))
        if not cfg.return_prompt:
            return None
        return _separated(kwargs.get("prompt"), session.prompt)

    # --- private: not tools ------------------------------------------------

    def _bind_tool(self, schema: Mapping[str, Any]) -> None:
        fn = schema.get("function") if isinstance(schema.get("function"), Mapping) else schema
        name = str(fn.get("name") or "")
        why = ""
        if not _IDENTIFIER.match(name) or keyword.iskeyword(name):
            why = "its name is not a Python identifier"
        elif name in ("reset", "get_reward") or hasattr(self, name):
            why = "its name is taken by the environment class"
        if not why:
            try:
                tool = _tool_method(name, fn)
            except ValueError as e:
                why = str(e)
        if why:
            log.warning("gymserver: tool %r is not offered to the model: %s", name, why)
            return
        method = types.MethodType(tool, self)
        try:
            _check_schema(method)
        except Exception as e:  # transformers' own exception classes
            log.warning("gymserver: tool %r is not offered to the model: transformers cannot describe it: %s", name, e)
            return
        setattr(self, name, method)
        self._tool_names.append(name)

    def _call(self, name: str, args: Dict[str, Any]) -> str:
        """_call runs one tool call as one step and returns the observation text the model sees."""
        if self.masked:
            return f"Error: the environment failed ({self.error}); the episode cannot continue."
        if self.done:
            return "Error: the episode has ended; no more tool calls are accepted."
        if self._session is None:
            raise RuntimeError("GymServerToolEnv: reset() was not called")
        try:
            res = self._session.step([{"name": name, "arguments": json.dumps(args)}])
        except GymServerError as e:
            if e.mask:
                self.done, self.masked, self.error = True, True, f"{name}: {e}"
            elif e.code == "episode_done":
                self.done = True
            return f"Error: {e}"
        if res.mask:
            self.done, self.masked = True, True
            self.error = f"{name}: infrastructure failure ({res.termination_reason or 'masked step'})"
        if res.done:
            self.done = True
            self.reward = float(res.reward)
            self.evaluation = res.evaluation
            self.termination_reason = res.termination_reason
        return res.observation.text

    def _finish(self) -> Optional[float]:
        """_finish evaluates the episode unless it ended, closes the session and returns the reward (None: masked).

        It is idempotent per episode and blocking; the reward paths run it
        in worker threads.
        """
        if self._scored:
            return self._score
        if self._session is not None:
            try:
                if not self.masked and self.evaluation is None:
                    self.evaluation = self._session.evaluate()
                    self.done = True
                    self.reward = float(self.evaluation.reward)
            except GymServerError as e:
                self.masked, self.error = True, f"evaluate: {e}"
            finally:
                self._end_session()
        if self.evaluation is not None and self.evaluation.mask:
            self.masked = True
            self.error = self.error or f"evaluation: {self.evaluation.error_class or 'masked'} {self.evaluation.error}".strip()
        self._scored = True
        self._score = None if self.masked or self.evaluation is None else self.reward
        return self._score

    def _end_session(self) -> None:
        s, self._session = self._session, None
        if s is None:
            return
        try:
            s.close()
        except GymServerError as e:
            log.warning("gymserver: closing session %s: %s", s.id, e)


class GymServerRewardEnv(GymServerToolEnv):
    """GymServerRewardEnv is a :class:`GymServerToolEnv` that owns its reward through TRL's ``get_reward``."""

    async def get_reward(self) -> Optional[float]:
        """get_reward evaluates the episode unless it ended, closes it and returns the reward; None when masked.

        TRL (>= 1.8) calls it once per completed rollout. It is async so
        that AsyncGRPOTrainer's worker keeps serving other rollouts while
        the hidden tests run.
        """
        return await asyncio.to_thread(self._finish)


def _tool_method(name: str, fn: Mapping[str, Any]) -> Callable[..., str]:
    """_tool_method builds the function behind one tool: keyword-only parameters typed after the JSON schema.

    Its signature, annotations and Google-style docstring are what
    transformers' ``get_json_schema`` reads; the parameters keep the
    schema's order (keyword-only, so a required one may follow an optional
    one). Optional parameters default to None and are left out of the call,
    so the server applies its own default. Raises ValueError when a
    parameter name cannot be a Python parameter.
    """
    params = fn.get("parameters") if isinstance(fn.get("parameters"), Mapping) else {}
    props = params.get("properties") if isinstance(params.get("properties"), Mapping) else {}
    required = set(str(r) for r in (params.get("required") or []))
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: Dict[str, Any] = {}
    arg_lines: List[str] = []
    for pname, pschema in props.items():
        pname = str(pname)
        if not pname.isidentifier() or keyword.iskeyword(pname) or pname == "self":
            raise ValueError(f"its parameter {pname!r} is not a Python identifier")
        pschema = pschema if isinstance(pschema, Mapping) else {}
        ptype, choices = _param_type(pschema)
        default = inspect.Parameter.empty if pname in required else None
        sig_params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ptype))
        annotations[pname] = ptype
        desc = _doc_text(str(pschema.get("description") or pschema.get("title") or "")) or f"The {pname} argument."
        if choices:
            desc += " (choices: " + json.dumps(choices) + ")"
        arg_lines.append(f"    {pname}: {desc}")
    # No return annotation: transformers would add a "return" entry that the server's schema does not have.
    signature = inspect.Signature(sig_params)
    doc = _doc_text(str(fn.get("description") or "")) or f"Call the {name} tool."
    if arg_lines:
        doc += "\n\nArgs:\n" + "\n".join(arg_lines)

    def tool(self: GymServerToolEnv, **kwargs: Any) -> str:
        signature.bind(self, **kwargs)  # the TypeError a Python function raises for missing or unknown arguments
        return self._call(name, {k: v for k, v in kwargs.items() if v is not None})

    tool.__name__ = name
    tool.__qualname__ = f"GymServerToolEnv.{name}"
    tool.__doc__ = doc
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def _param_type(schema: Mapping[str, Any]) -> Tuple[Any, List[str]]:
    """_param_type maps one JSON-schema property to a type hint, plus its string enum values (else [])."""
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if t is None:
        for key in ("anyOf", "oneOf"):
            for alt in schema.get(key) or []:
                if isinstance(alt, Mapping) and alt.get("type") not in (None, "null"):
                    return _param_type(alt)
    ptype = _JSON_TYPES.get(str(t), Any) if t is not None else Any
    if ptype is list:
        items = schema.get("items")
        item_type = _SIMPLE_ITEM_TYPES.get(str(items.get("type"))) if isinstance(items, Mapping) else None
        if item_type is not None:
            ptype = list[item_type]  # type: ignore[index]
    enum = schema.get("enum")
    choices = [str(v) for v in enum] if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum) else []
    return ptype, choices


def _doc_text(text: str) -> str:
    """_doc_text makes server text safe for a Google docstring: one line, no section headings."""
    return _DOC_HEADINGS.sub(r"\1 -", " ".join(text.split()))


def _check_schema(method: Callable[..., str]) -> None:
    """_check_schema runs transformers' get_json_schema on a bound tool method when TRL is installed.

    TRL would run it on the first prompt anyway; failing here names the tool.
    """
    if not HAVE_TRL:
        return
    try:
        from transformers.utils import get_json_schema  # type: ignore[import-not-found]
    except ImportError:
        return
    get_json_schema(method)


def _separated(row_prompt: Any, text: str) -> str:
    """_separated returns text, after a blank line when the row's last message does not end in whitespace.

    TRL appends reset's string to the last prompt message as is.
    """
    if isinstance(row_prompt, list) and row_prompt and isinstance(row_prompt[-1], Mapping):
        last = row_prompt[-1].get("content")
        if isinstance(last, str) and last and not last[-1].isspace():
            return "\n\n" + text
    return text


def _check(environments: Optional[Sequence[Any]], completions: Sequence[Any]) -> List[Any]:
    if environments is None:
        raise ValueError(
            "gymserver_reward needs environments=, which only GRPOTrainer passes (with environment_factory); "
            "AsyncGRPOTrainer's reward functions get none: use tool_env_factory() (owns_reward=True), whose get_reward it calls"
        )
    envs = list(environments)
    if len(envs) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(envs)} environments")
    for e in envs:
        if isinstance(e, GymServerRewardEnv):
            raise ValueError(
                "these environments own their reward (get_reward); passing gymserver_reward too would count it twice: "
                "drop it from reward_funcs or use tool_env_factory(owns_reward=False)"
            )
    return envs


def _finish_or_none(env: Any) -> Optional[float]:
    """_finish_or_none scores a gymserver environment; other environments (TRL multi-environment runs) get None."""
    if isinstance(env, GymServerToolEnv):
        return env._finish()
    return None


def gymserver_reward(completions: Sequence[Any], environments: Optional[Sequence[Any]] = None, **kwargs: Any) -> List[Optional[float]]:
    """gymserver_reward is a GRPOTrainer reward function: each episode's hidden-test reward, None when masked.

    Use it with ``tool_env_factory(owns_reward=False)``. Episodes still
    running are evaluated concurrently and every session is closed.
    Environments that are not gymserver's get None (not applicable).
    """
    envs = _check(environments, completions)
    if not envs:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(envs), 32), thread_name_prefix="gymserver-reward") as pool:
        return list(pool.map(_finish_or_none, envs))


async def gymserver_reward_async(
    completions: Sequence[Any], environments: Optional[Sequence[Any]] = None, **kwargs: Any
) -> List[Optional[float]]:
    """gymserver_reward_async is the async form of :func:`gymserver_reward` (TRL runs async reward functions on its own loop)."""
    envs = _check(environments, completions)
    return list(await asyncio.gather(*(asyncio.to_thread(_finish_or_none, e) for e in envs)))
