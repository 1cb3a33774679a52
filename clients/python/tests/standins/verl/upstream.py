"""Loads VERL's real agent-loop and tool modules from a git mirror, with minimal stubs for their heavy imports (twin test).

Real files, read with ``git --git-dir MIRROR show COMMIT:path``:
``verl/experimental/agent_loop/{agent_loop,tool_agent_loop,tool_parser,utils}.py``,
``verl/tools/{base_tool,schemas}.py``, ``verl/tools/utils/tool_registry.py``,
``verl/utils/{chat_template,rollout_trace}.py``, ``verl/interactions/base.py``.
So the real ``AgentLoopWorker`` (its ``__init__`` reading the agent-loop
config, ``generate_sequences``, ``_run_agent_loop`` with
``hydra.utils.instantiate``, ``_agent_loop_postprocess``, ``_postprocess``),
the real ``AsyncLLMServerManager``, ``AgentLoopBase``, ``ToolAgentLoop``,
hermes parser, ``BaseTool``, schemas and tool registry run.

Stubbed (not installed here, or too heavy): pydantic (a small BaseModel:
annotated fields, per-instance copies of defaults, nested models from
dicts, ``model_dump(exclude_unset, exclude_none)``, ``before`` validators),
hydra (``utils.instantiate``), ray, cachetools, PIL (when missing), omegaconf (over
:class:`~.config.Config`), tensordict, transformers, regex (Python's
``re``), and the VERL modules outside the list above: ``verl.protocol``
(:class:`~.agent_loop.DataProto`), ``verl.utils`` (``hf_tokenizer`` returns
:data:`TOKENIZER`), the dataset class, ``copy_to_local``,
``compute_position_id_with_mask``, ``get_event_loop``, ``tqbridge``,
``simple_timer``, ``TokenOutput``, the reward loop, the interaction
registry, prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import typing
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from . import agent_loop as standin
from . import with_modules
from .config import Config, unwrap

#: COMMITS are the upstream commits the twin test runs against.
COMMITS = {
    "main-b178a3cd": "b178a3cd56f58b2d502255daba591e92833930a7",
    "v0.7.0": "f9c855f7cf04d603c9546bc01776c74806a879c1",
}

#: REAL lists the real upstream files, in load order, with their module names.
REAL = [
    ("verl.utils.chat_template", "verl/utils/chat_template.py"),
    ("verl.utils.rollout_trace", "verl/utils/rollout_trace.py"),
    ("verl.tools.schemas", "verl/tools/schemas.py"),
    ("verl.tools.base_tool", "verl/tools/base_tool.py"),
    ("verl.tools.utils.tool_registry", "verl/tools/utils/tool_registry.py"),
    ("verl.interactions.base", "verl/interactions/base.py"),
    ("verl.experimental.agent_loop.utils", "verl/experimental/agent_loop/utils.py"),
    ("verl.experimental.agent_loop.tool_parser", "verl/experimental/agent_loop/tool_parser.py"),
    ("verl.experimental.agent_loop.agent_loop", "verl/experimental/agent_loop/agent_loop.py"),
    ("verl.experimental.agent_loop.tool_agent_loop", "verl/experimental/agent_loop/tool_agent_loop.py"),
]

#: TOKENIZER is what the stubbed ``hf_tokenizer`` returns; set it before building a worker.
TOKENIZER: Any = None


# --- a minimal pydantic ------------------------------------------------------

_MISSING = object()


class _FieldInfo:
    def __init__(self, default: Any = _MISSING, default_factory: Optional[Callable[[], Any]] = None) -> None:
        self.default = default
        self.default_factory = default_factory


def _field(default: Any = _MISSING, *, default_factory: Optional[Callable[[], Any]] = None, **kwargs: Any) -> Any:
    return _FieldInfo(default, default_factory)


def _model_validator(*, mode: str) -> Callable[[Any], Any]:
    def deco(f: Any) -> Any:
        getattr(f, "__func__", f).__validator_mode__ = mode
        return f

    return deco


def _coerce(ann: Any, v: Any) -> Any:
    if v is None:
        return None
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(ann):
            if isinstance(a, type) and issubclass(a, _BaseModel) and isinstance(v, Mapping):
                return a(**v)
        return v
    if isinstance(ann, type) and issubclass(ann, _BaseModel):
        return v if isinstance(v, ann) else ann(**dict(v))
    if origin is dict and isinstance(v, Mapping):
        vt = typing.get_args(ann)[1] if typing.get_args(ann) else Any
        return {k: _coerce(vt, x) for k, x in v.items()}
    if origin is list and isinstance(v, (list, tuple)):
        et = typing.get_args(ann)[0] if typing.get_args(ann) else Any
        return [_coerce(et, x) for x in v]
    return v


def _dump(v: Any, exclude_unset: bool, exclude_none: bool) -> Any:
    if isinstance(v, _BaseModel):
        return v.model_dump(exclude_unset=exclude_unset, exclude_none=exclude_none)
    if isinstance(v, dict):
        return {k: _dump(x, exclude_unset, exclude_none) for k, x in v.items()}
    if isinstance(v, list):
        return [_dump(x, exclude_unset, exclude_none) for x in v]
    return v


class _BaseModel:
    """_BaseModel is the part of pydantic.BaseModel VERL's models use."""

    __model_fields__: Dict[str, Any] = {}
    __model_defaults__: Dict[str, Any] = {}
    __model_before__: List[str] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: Dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name, ann in vars(klass).get("__annotations__", {}).items():
                if name != "model_config" and not name.startswith("_"):
                    fields[name] = ann
        defaults: Dict[str, Any] = {}
        for name in fields:
            for klass in cls.__mro__:
                if name in vars(klass):
                    defaults[name] = vars(klass)[name]
                    break
        cls.__model_fields__, cls.__model_defaults__ = fields, defaults
        cls.__model_before__ = [
            n for klass in cls.__mro__ for n, v in vars(klass).items() if getattr(getattr(v, "__func__", v), "__validator_mode__", None) == "before"
        ]

    def __init__(self, **data: Any) -> None:
        cls = type(self)
        for name in cls.__model_before__:
            data = getattr(cls, name)(data)
        self.__dict__["__fields_set__"] = set()
        for name, ann in cls.__model_fields__.items():
            if name in data:
                value = _coerce(ann, data[name])
                self.__fields_set__.add(name)
            elif name in cls.__model_defaults__:
                d = cls.__model_defaults__[name]
                if isinstance(d, _FieldInfo):
                    value = d.default_factory() if d.default_factory is not None else copy.deepcopy(d.default)
                else:
                    value = copy.deepcopy(d)
            else:
                raise TypeError(f"{cls.__name__}: field {name!r} is required")
            self.__dict__[name] = value

    @classmethod
    def model_validate(cls, obj: Any) -> Any:
        """model_validate builds the model from a dict (or returns an instance as is)."""
        return obj if isinstance(obj, cls) else cls(**dict(obj))

    def model_dump(self, exclude_unset: bool = False, exclude_none: bool = False, **kwargs: Any) -> Dict[str, Any]:
        """model_dump returns the fields as a dict, nested models too."""
        out: Dict[str, Any] = {}
        for name in type(self).__model_fields__:
            if exclude_unset and name not in self.__fields_set__:
                continue
            v = getattr(self, name)
            if exclude_none and v is None:
                continue
            out[name] = _dump(v, exclude_unset, exclude_none)
        return out


# --- other stubs -------------------------------------------------------------


def _module(name: str, package: bool = False, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name)
    if package:
        m.__path__ = []
    m.__dict__.update(attrs)
    return m


def _identity_decorator(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    return lambda f: f


@contextlib.contextmanager
def _simple_timer(name: str, timing_raw: Dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


def _get_event_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


class _TensorDict(dict):
    def __init__(self, source: Dict[str, torch.Tensor], batch_size: Any = None) -> None:
        super().__init__(source)
        self.batch_size = batch_size


class _LRUCache(dict):
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize


class _OmegaConf:
    @staticmethod
    def load(path: str) -> Any:
        """load reads a config file into a Config (the tests write JSON, a subset of YAML)."""
        with open(path) as f:
            return Config.wrap(json.load(f))

    @staticmethod
    def to_container(cfg: Any, resolve: bool = True) -> Any:
        """to_container returns plain dicts and lists."""
        return unwrap(cfg)


def _remote(obj: Any = None, **kwargs: Any) -> Any:
    """_remote stands in for ray.remote: the class or function itself (no actors)."""
    return obj if obj is not None else (lambda o: o)


def _stubs() -> Dict[str, types.ModuleType]:
    class TokenOutput(_BaseModel):
        """TokenOutput has the fields of verl.workers.rollout.replica.TokenOutput."""

        token_ids: list[int]
        log_probs: Optional[list[float]] = None
        routed_experts: Optional[Any] = None
        stop_reason: Optional[str] = None
        num_preempted: Optional[int] = None

    class _Anything:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    ray = _module(
        "ray",
        remote=_remote,
        actor=_module("ray.actor", ActorHandle=object),
        util=_module("ray.util", scheduling_strategies=_module("ray.util.scheduling_strategies", NodeAffinitySchedulingStrategy=_Anything)),
    )
    utils = _module(
        "verl.utils",
        package=True,
        hf_tokenizer=lambda path, **kw: TOKENIZER,
        hf_processor=lambda path, **kw: None,
    )
    mods = {
        "pydantic": _module("pydantic", BaseModel=_BaseModel, ConfigDict=dict, Field=_field, model_validator=_model_validator),
        "hydra": _module("hydra", package=True, utils=_module("hydra.utils", instantiate=standin.instantiate)),
        "hydra.utils": _module("hydra.utils", instantiate=standin.instantiate),
        "ray": ray,
        "ray.actor": ray.actor,
        "ray.util": ray.util,
        "ray.util.scheduling_strategies": ray.util.scheduling_strategies,
        "cachetools": _module("cachetools", LRUCache=_LRUCache),
        "omegaconf": _module("omegaconf", DictConfig=Config, OmegaConf=_OmegaConf),
        "tensordict": _module("tensordict", TensorDict=_TensorDict),
        "transformers": _module("transformers", AutoProcessor=object, AutoTokenizer=object),
        "regex": re,
        "verl": _module("verl", package=True),
        "verl.protocol": _module("verl.protocol", DataProto=standin.DataProto),
        "verl.single_controller": _module("verl.single_controller", package=True),
        "verl.single_controller.ray": _module("verl.single_controller.ray", package=True),
        "verl.single_controller.ray.base": _module("verl.single_controller.ray.base", RayResourcePool=_Anything, RayWorkerGroup=_Anything),
        "verl.utils": utils,
        "verl.utils.dataset": _module("verl.utils.dataset", package=True),
        "verl.utils.dataset.rl_dataset": _module("verl.utils.dataset.rl_dataset", RLHFDataset=_Anything, get_dataset_class=lambda cfg: _Anything),
        "verl.utils.fs": _module("verl.utils.fs", copy_to_local=lambda path, **kw: path),
        "verl.utils.model": _module("verl.utils.model", compute_position_id_with_mask=standin.compute_position_id_with_mask),
        "verl.utils.ray_utils": _module("verl.utils.ray_utils", get_event_loop=_get_event_loop),
        "verl.utils.transferqueue_utils": _module("verl.utils.transferqueue_utils", tqbridge=_identity_decorator),
        "verl.utils.profiler": _module("verl.utils.profiler", simple_timer=_simple_timer),
        "verl.workers": _module("verl.workers", package=True),
        "verl.workers.rollout": _module("verl.workers.rollout", package=True),
        "verl.workers.rollout.replica": _module("verl.workers.rollout.replica", TokenOutput=TokenOutput, get_rollout_replica_class=lambda name: _Anything),
        "verl.experimental": _module("verl.experimental", package=True),
        "verl.experimental.reward_loop": _module("verl.experimental.reward_loop", RewardLoopWorker=_Anything),
        "verl.experimental.agent_loop": _module("verl.experimental.agent_loop", package=True),
        "verl.experimental.agent_loop.prometheus_utils": _module("verl.experimental.agent_loop.prometheus_utils", update_prometheus_config=lambda *a, **k: None),
        "verl.tools": _module("verl.tools", package=True),
        "verl.tools.utils": _module("verl.tools.utils", package=True),
        "verl.interactions": _module("verl.interactions", package=True),
        "verl.interactions.utils": _module("verl.interactions.utils", package=True),
        "verl.interactions.utils.interaction_registry": _module(
            "verl.interactions.utils.interaction_registry", initialize_interactions_from_config=lambda path: {}
        ),
    }
    if importlib.util.find_spec("PIL") is None:
        mods["PIL"] = _module("PIL", package=True, Image=_module("PIL.Image", Image=object))
    return mods


def load(mirror: str, commit: str, workdir: str) -> Dict[str, types.ModuleType]:
    """load returns the stubs plus the real upstream modules of commit, executed against them.

    mirror is the directory holding ``volcengine+verl/repo`` (a bare git
    mirror); the files are written under workdir.
    """
    git_dir = os.path.join(mirror, "volcengine+verl", "repo")
    mods = _stubs()
    saved = {n: sys.modules.get(n) for n in list(mods) + [n for n, _ in REAL]}
    try:
        sys.modules.update(mods)
        for name, path in REAL:
            src = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True, check=True).stdout
            file = os.path.join(workdir, commit[:12], path)
            os.makedirs(os.path.dirname(file), exist_ok=True)
            with open(file, "w") as f:
                f.write(src)
            spec = importlib.util.spec_from_file_location(name, file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            mods[name] = module
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return mods


@contextlib.contextmanager
def installed(mirror: str, commit: str) -> Iterator[Tuple[types.ModuleType, Dict[str, types.ModuleType]]]:
    """installed loads upstream at commit, installs it and yields (the adapter imported against it, the modules)."""
    with tempfile.TemporaryDirectory(prefix="verl-upstream-") as tmp:
        mods = load(mirror, commit, tmp)
        with with_modules(mods) as adapter:
            yield adapter, mods
