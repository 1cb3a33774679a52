"""Real Work plugin modules under gymserver: the seed's plugin base classes and the adapter that runs them.

A Real Work config names plugin modules by their dotted path::

    {"plugins": ["my_custom_plugins.analyzer"]}

``gymserver rollout`` loads such an entry (a dotted name that is not a built-in) by running this
file with Python as an external plugin: for every hook call it imports the module, instantiates
every seed-style plugin class in it with the entry's ``config`` (``{}`` without one), calls the
methods the seed's plugin kinds define, and answers the hook with what they return. The module
is found through the config's directory and ``PYTHONPATH``; the Python is ``GYMSERVER_PYTHON``
or ``python3`` on ``PATH``. Only the standard library is needed: the gymserver binary carries a
copy of this file, so the package need not be installed where the plugin runs.

Plugin classes are those the seed's ``PluginManager.load_plugins_from_module`` finds: classes
in the module's namespace that derive from a class named ``BasePlugin`` and are not abstract.
Their modules may import the base classes the seed's way (``from src.plugins.base import
TrajectoryAnalyzerPlugin, PluginHookType``, made importable here when no Real Work checkout
is), or from ``gymserver.seedplugins``.

How each kind is called (hook: method → answer):

* every class, for the hooks in ``supported_hooks``: ``execute(hook, context)``; the keys the
  plugin sets or changes in the context become its data;
* ``TrajectoryAnalyzerPlugin`` (post_episode): ``analyze_trajectory(trajectory)`` → data,
  ``suggest_improvements(trajectory)`` → ``suggestions``;
* ``EpisodeEvaluatorPlugin`` (post_test): ``evaluate_episode(episode_result, trajectory)`` →
  ``score`` (its ``final_score`` or ``score`` key) and data (the other keys);
* ``EnvironmentModifierPlugin`` (pre_episode): ``modify_environment(env_config, context)`` →
  ``episode`` (what changed: ``prompt``, ``environment_variables``, ``max_actions``,
  ``timeout_config.global_timeout`` / ``command_timeout``);
* ``RolloutManagerPlugin``: ``should_continue_rollout(context)`` (pre_episode; false →
  ``stop``) and ``modify_rollout_strategy(context)`` (pre_rollout, post_episode;
  ``max_parallel_rollouts`` or ``parallel`` → ``parallel``, ``more_episodes``,
  ``additional_episodes`` or ``extra_episodes`` → ``more_episodes``, the rest → data);
* ``ActionFilterPlugin`` (pre_action): ``filter_actions([action], context)``: an empty list
  blocks the call, a changed command replaces it.

Each class's data is saved under its ``name`` inside the entry's data. Each hook call is a new
process, so plugin instances are rebuilt every call; their attributes are kept between calls
(pickled into the run's state file, ``GYMSERVER_SEEDPLUGIN_STATE``), so a plugin that counts
episodes in ``self`` works as in the seed. ``initialize()`` runs once per run, ``cleanup()``
never.

Command line (what the gymserver binary runs)::

    python3 seedplugins.py describe MODULE   # JSON: the plugin classes, their kinds and hooks
    python3 seedplugins.py handle MODULE     # one event (JSON) on stdin, one answer on stdout

Exit status 2 with a message on stderr means the module cannot be used (it does not import, or
holds no plugin class); 1 means a plugin failed on this event.
"""

from __future__ import annotations

import abc
import asyncio
import copy
import dataclasses
import enum
import importlib
import importlib.util
import inspect
import json
import math
import os
import pickle
import sys
import types
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "PluginType",
    "PluginHookType",
    "PluginContext",
    "PluginResult",
    "BasePlugin",
    "RolloutManagerPlugin",
    "TrajectoryAnalyzerPlugin",
    "EnvironmentModifierPlugin",
    "ActionFilterPlugin",
    "EpisodeEvaluatorPlugin",
    "ActionType",
    "Action",
    "ActionResult",
    "TestResult",
    "EpisodeResult",
    "TimeoutConfig",
    "EnvironmentConfig",
    "TrajectoryStep",
    "Trajectory",
    "ModuleError",
    "find_plugins",
    "describe",
    "handle",
    "main",
]


# ---------------------------------------------------------------------------
# The seed's plugin API (src/plugins/base.py), as its plugin modules use it.


class PluginType(str, enum.Enum):
    """PluginType is the kind of a seed plugin."""

    ROLLOUT_MANAGER = "rollout_manager"
    TRAJECTORY_ANALYZER = "trajectory_analyzer"
    ENVIRONMENT_MODIFIER = "environment_modifier"
    ACTION_FILTER = "action_filter"
    EPISODE_EVALUATOR = "episode_evaluator"


class PluginHookType(str, enum.Enum):
    """PluginHookType names a hook; the values are gymserver's hook names."""

    PRE_ROLLOUT = "pre_rollout"
    POST_ROLLOUT = "post_rollout"
    PRE_ACTION = "pre_action"
    POST_ACTION = "post_action"
    PRE_EPISODE = "pre_episode"
    POST_EPISODE = "post_episode"
    PRE_TEST = "pre_test"
    POST_TEST = "post_test"


class PluginContext:
    """PluginContext is the seed's bag of named values passed to ``execute``."""

    def __init__(self, **kwargs: Any) -> None:
        self.data: Dict[str, Any] = kwargs

    def get(self, key: str, default: Any = None) -> Any:
        """get returns the value of key, or default."""
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """set stores value under key."""
        self.data[key] = value

    def update(self, data: Dict[str, Any]) -> None:
        """update stores every item of data."""
        self.data.update(data)


class PluginResult:
    """PluginResult is the seed's result of a plugin execution."""

    def __init__(self, success: bool = True, data: Optional[Dict[str, Any]] = None, error: Optional[str] = None) -> None:
        self.success = success
        self.data = data or {}
        self.error = error

    def __bool__(self) -> bool:
        return self.success


class BasePlugin(abc.ABC):
    """BasePlugin is the base of every seed plugin.

    Unlike the seed, ``name``, ``version`` and ``execute`` have defaults here (the class name,
    "0", and a no-op), so the seed README's example analyzer, which defines no ``execute``,
    loads.
    """

    def __init__(self, config: Optional[Dict[str, Any]] = None) -> None:
        self.config = config or {}
        self.enabled = True
        self.priority = 0

    @property
    def name(self) -> str:
        """name is the plugin's name; its data is saved under it."""
        return type(self).__name__

    @property
    def version(self) -> str:
        """version is the plugin's version."""
        return "0"

    @property
    def plugin_type(self) -> Optional[PluginType]:
        """plugin_type is the plugin's kind."""
        return None

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        """supported_hooks lists the hooks ``execute`` is called for."""
        return []

    async def execute(self, hook: PluginHookType, context: PluginContext) -> PluginContext:
        """execute runs the plugin at hook; values it sets in context become its data."""
        return context

    async def initialize(self) -> bool:
        """initialize prepares the plugin once per run; False fails it."""
        return True

    async def cleanup(self) -> None:
        """cleanup is kept for the seed's API; gymserver never calls it."""

    def is_enabled(self) -> bool:
        """is_enabled reports whether the plugin runs."""
        return self.enabled

    def enable(self) -> None:
        """enable turns the plugin on."""
        self.enabled = True

    def disable(self) -> None:
        """disable turns the plugin off."""
        self.enabled = False


class RolloutManagerPlugin(BasePlugin):
    """RolloutManagerPlugin decides whether an environment's rollouts go on, and their strategy."""

    @property
    def plugin_type(self) -> PluginType:
        return PluginType.ROLLOUT_MANAGER

    @abc.abstractmethod
    async def should_continue_rollout(self, context: PluginContext) -> bool:
        """should_continue_rollout is asked before each episode; False stops its environment."""

    @abc.abstractmethod
    async def modify_rollout_strategy(self, context: PluginContext) -> Dict[str, Any]:
        """modify_rollout_strategy may ask for more episodes or another parallelism."""


class TrajectoryAnalyzerPlugin(BasePlugin):
    """TrajectoryAnalyzerPlugin analyses each finished trajectory."""

    @property
    def plugin_type(self) -> PluginType:
        return PluginType.TRAJECTORY_ANALYZER

    @abc.abstractmethod
    async def analyze_trajectory(self, trajectory: "Trajectory") -> Dict[str, Any]:
        """analyze_trajectory returns insights, saved in the trajectory."""

    async def suggest_improvements(self, trajectory: "Trajectory") -> List[str]:
        """suggest_improvements returns suggestions, saved in the trajectory."""
        return []


class EnvironmentModifierPlugin(BasePlugin):
    """EnvironmentModifierPlugin changes an episode's environment before it starts."""

    @property
    def plugin_type(self) -> PluginType:
        return PluginType.ENVIRONMENT_MODIFIER

    @abc.abstractmethod
    async def modify_environment(self, env_config: "EnvironmentConfig", context: PluginContext) -> "EnvironmentConfig":
        """modify_environment returns the episode's environment config, changed."""


class ActionFilterPlugin(BasePlugin):
    """ActionFilterPlugin filters or changes actions before they run."""

    @property
    def plugin_type(self) -> PluginType:
        return PluginType.ACTION_FILTER

    @abc.abstractmethod
    async def filter_actions(self, actions: List["Action"], context: PluginContext) -> List["Action"]:
        """filter_actions returns the actions to run."""


class EpisodeEvaluatorPlugin(BasePlugin):
    """EpisodeEvaluatorPlugin scores an episode once its tests ran."""

    @property
    def plugin_type(self) -> PluginType:
        return PluginType.EPISODE_EVALUATOR

    @abc.abstractmethod
    async def evaluate_episode(self, episode_result: "EpisodeResult", trajectory: "Trajectory") -> Dict[str, Any]:
        """evaluate_episode returns scoring: ``final_score`` (or ``score``) replaces the reward."""


# ---------------------------------------------------------------------------
# The seed's records (src/core/config.py, src/core/trajectory.py), filled from gymserver's.


class ActionType(str, enum.Enum):
    """ActionType is the seed's action type; other tools keep their tool name as type."""

    COMMAND = "command"
    FILE_WRITE = "file_write"
    FILE_READ = "file_read"
    DONE = "done"


class _Record:
    """_Record gives the seed's pydantic-style dump methods to the dataclasses below."""

    def model_dump(self) -> Dict[str, Any]:
        """model_dump returns the record as plain data."""
        return _plain(self)

    dict = model_dump


@dataclasses.dataclass
class Action(_Record):
    """Action is one tool call in the seed's shape."""

    type: Any
    content: str = ""
    timeout: Optional[float] = None
    working_directory: Optional[str] = None
    tool_call: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class ActionResult(_Record):
    """ActionResult is the outcome of an action."""

    success: bool = False
    output: str = ""
    error: str = ""
    exit_code: Optional[int] = None
    duration: float = 0.0
    timestamp: str = ""
    error_class: str = ""
    blocked: bool = False


@dataclasses.dataclass
class TestResult(_Record):
    """TestResult is one unit_tests command's outcome."""

    __test__ = False  # not a pytest class

    command: str = ""
    success: bool = False
    output: str = ""
    error: str = ""
    exit_code: int = 0
    duration: float = 0.0
    timestamp: str = ""


@dataclasses.dataclass
class EpisodeResult(_Record):
    """EpisodeResult summarises an episode; gymserver's extra fields follow the seed's."""

    environment_id: str = ""
    success: bool = False
    total_actions: int = 0
    duration: float = 0.0
    test_results: List[TestResult] = dataclasses.field(default_factory=list)
    terminated_reason: str = ""
    final_score: float = 0.0
    task_id: str = ""
    mask: bool = False
    error_class: str = ""
    tests_passed: int = 0
    tests_total: int = 0


@dataclasses.dataclass
class TimeoutConfig(_Record):
    """TimeoutConfig holds an environment's timeouts in seconds."""

    global_timeout: Optional[float] = None
    command_timeout: Optional[float] = None
    test_timeout: Optional[float] = None


@dataclasses.dataclass
class EnvironmentConfig(_Record):
    """EnvironmentConfig is the episode's environment as EnvironmentModifierPlugin sees it.

    Changes to prompt, environment_variables, max_actions and timeout_config's
    global_timeout and command_timeout take effect; the rest is for reading.
    """

    id: str = ""
    docker_image: str = ""
    init_commands: List[str] = dataclasses.field(default_factory=list)
    unit_tests: List[str] = dataclasses.field(default_factory=list)
    prompt: str = ""
    timeout_config: Optional[TimeoutConfig] = None
    working_directory: str = "/workspace"
    environment_variables: Dict[str, str] = dataclasses.field(default_factory=dict)
    max_retries: int = 3
    max_actions: Optional[int] = None
    task_id: str = ""


@dataclasses.dataclass
class TrajectoryStep(_Record):
    """TrajectoryStep is one action and its result."""

    step_id: str = ""
    timestamp: str = ""
    action: Action = dataclasses.field(default_factory=lambda: Action(type=""))
    result: ActionResult = dataclasses.field(default_factory=ActionResult)
    state_snapshot: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        """to_dict returns the step as plain data."""
        return _plain(self)


@dataclasses.dataclass
class Trajectory(_Record):
    """Trajectory is an episode in the seed's shape, plus gymserver's transcript."""

    trajectory_id: str = ""
    environment_id: str = ""
    start_time: str = ""
    end_time: Optional[str] = None
    steps: List[TrajectoryStep] = dataclasses.field(default_factory=list)
    test_results: List[TestResult] = dataclasses.field(default_factory=list)
    episode_result: Optional[EpisodeResult] = None
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)
    task_id: str = ""
    messages: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """to_dict returns the trajectory as plain data."""
        return _plain(self)


def _action_type(t: str) -> Any:
    try:
        return ActionType(t)
    except ValueError:
        return t


def _action_of_call(call: Dict[str, Any]) -> Action:
    """_action_of_call describes a gymserver tool call as the seed's Action."""
    fn = call.get("function") or {}
    name = fn.get("name", "")
    raw = fn.get("arguments") or ""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    kinds = {"execute_command": "command", "write_file": "file_write", "read_file": "file_read", "mark_done": "done"}
    t = kinds.get(name, name)
    content = raw
    if t == "command":
        content = str(args.get("command", ""))
    elif t in ("file_write", "file_read"):
        content = str(args.get("filepath", ""))
    elif t == "done":
        content = str(args.get("message", ""))
    return Action(type=_action_type(t), content=content, timeout=args.get("timeout"),
                  working_directory=args.get("working_directory"), tool_call=call)


def _test_results(cmds: Optional[List[Dict[str, Any]]]) -> List[TestResult]:
    out = []
    for c in cmds or []:
        out.append(TestResult(command=c.get("command", ""), success=bool(c.get("success")), output=c.get("output", ""),
                              exit_code=int(c.get("exit_code", 0)), duration=float(c.get("duration", 0.0))))
    return out


def _episode_result(env: str, er: Dict[str, Any], tests: List[TestResult]) -> EpisodeResult:
    return EpisodeResult(
        environment_id=env,
        success=bool(er.get("success")),
        total_actions=int(er.get("actions", 0)),
        duration=float(er.get("duration_seconds", 0.0)),
        test_results=tests,
        terminated_reason=str(er.get("terminated_reason", "")),
        final_score=float(er.get("final_score", 0.0)),
        task_id=str(er.get("task_id", "")),
        mask=bool(er.get("mask")),
        error_class=str(er.get("error_class", "")),
        tests_passed=int(er.get("tests_passed", 0)),
        tests_total=int(er.get("tests_total", 0)),
    )


def _trajectory(t: Dict[str, Any]) -> Trajectory:
    """_trajectory converts a gymserver trajectory (JSON) to the seed's Trajectory."""
    steps = []
    for s in t.get("steps") or []:
        a, r = s.get("action") or {}, s.get("result") or {}
        steps.append(TrajectoryStep(
            step_id=s.get("step_id", ""),
            timestamp=s.get("timestamp", ""),
            action=Action(type=_action_type(a.get("type", "")), content=a.get("content", ""), timeout=a.get("timeout"),
                          tool_call=a.get("tool_call")),
            result=ActionResult(success=bool(r.get("success")), output=r.get("output", ""), error=r.get("error", ""),
                                exit_code=r.get("exit_code"), duration=float(r.get("duration", 0.0)),
                                timestamp=s.get("timestamp", ""), error_class=r.get("error_class", ""),
                                blocked=bool(r.get("blocked"))),
        ))
    tests = _test_results(t.get("test_results"))
    env = t.get("environment_id", "")
    er = t.get("episode_result")
    return Trajectory(
        trajectory_id=t.get("trajectory_id", ""),
        environment_id=env,
        start_time=t.get("start_time", ""),
        end_time=t.get("end_time"),
        steps=steps,
        test_results=tests,
        episode_result=_episode_result(env, dict(er, task_id=t.get("task_id", "")), tests) if er else None,
        metadata={"episode": t.get("episode", 0), "session_id": t.get("session_id", ""), "policy": t.get("policy", "")},
        task_id=t.get("task_id", ""),
        messages=t.get("messages") or [],
    )


def _environment(ev: Dict[str, Any]) -> EnvironmentConfig:
    e = ev.get("environment") or {}
    return EnvironmentConfig(
        id=ev.get("env", ""),
        docker_image=e.get("docker_image", ""),
        unit_tests=list(e.get("unit_tests") or []),
        prompt=e.get("prompt", ""),
        timeout_config=TimeoutConfig(global_timeout=e.get("global_timeout"), command_timeout=e.get("command_timeout"),
                                     test_timeout=e.get("test_timeout")),
        working_directory=e.get("working_directory", ""),
        environment_variables=dict(e.get("environment_variables") or {}),
        max_actions=e.get("max_actions"),
        task_id=ev.get("task", ""),
    )


def _plain(v: Any, depth: int = 0) -> Any:
    """_plain turns a plugin's value into JSON-ready data."""
    if depth > 50:
        return str(v)
    if isinstance(v, enum.Enum):
        return _plain(v.value, depth + 1)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        return {str(_plain(k, depth + 1)): _plain(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x, depth + 1) for x in v]
    for m in ("model_dump", "to_dict", "dict"):
        f = getattr(v, m, None)
        if callable(f):
            try:
                return _plain(f(), depth + 1)
            except Exception:  # noqa: BLE001 - fall back to the text
                break
    return str(v)


# ---------------------------------------------------------------------------
# Loading a plugin module.


class ModuleError(Exception):
    """ModuleError is a plugin module that cannot be used: it does not import, or holds no plugin class."""


_KIND_BASES = {
    "RolloutManagerPlugin": PluginType.ROLLOUT_MANAGER,
    "TrajectoryAnalyzerPlugin": PluginType.TRAJECTORY_ANALYZER,
    "EnvironmentModifierPlugin": PluginType.ENVIRONMENT_MODIFIER,
    "ActionFilterPlugin": PluginType.ACTION_FILTER,
    "EpisodeEvaluatorPlugin": PluginType.EPISODE_EVALUATOR,
}

# The hooks at which each kind's methods are called.
_KIND_HOOKS = {
    PluginType.ROLLOUT_MANAGER: ["pre_rollout", "pre_episode", "post_episode"],
    PluginType.TRAJECTORY_ANALYZER: ["post_episode"],
    PluginType.ENVIRONMENT_MODIFIER: ["pre_episode"],
    PluginType.ACTION_FILTER: ["pre_action"],
    PluginType.EPISODE_EVALUATOR: ["post_test"],
}

_HOOK_ORDER = [h.value for h in (PluginHookType.PRE_ROLLOUT, PluginHookType.PRE_EPISODE, PluginHookType.PRE_ACTION,
                                 PluginHookType.POST_ACTION, PluginHookType.PRE_TEST, PluginHookType.POST_TEST,
                                 PluginHookType.POST_EPISODE, PluginHookType.POST_ROLLOUT)]


def _install_seed_modules() -> None:
    """_install_seed_modules makes ``src.plugins.base`` and friends import this module's API.

    Only when no Real Work checkout provides them; a real ``src`` package is left alone.
    ``gymserver.seedplugins`` is aliased too when the gymserver package is not importable.
    """
    me = sys.modules[__name__]
    try:
        real = importlib.util.find_spec("src.plugins.base") is not None
    except (ImportError, ValueError):
        real = False
    if not real and "src" not in sys.modules:
        for name in ("src", "src.plugins", "src.core"):
            pkg = types.ModuleType(name)
            pkg.__path__ = []  # a package, so submodules resolve from sys.modules
            sys.modules[name] = pkg
        for name in ("src.plugins.base", "src.core.config", "src.core.trajectory"):
            sys.modules[name] = me
        sys.modules["src"].plugins = sys.modules["src.plugins"]  # type: ignore[attr-defined]
        sys.modules["src"].core = sys.modules["src.core"]  # type: ignore[attr-defined]
        sys.modules["src.plugins"].base = me  # type: ignore[attr-defined]
        sys.modules["src.core"].config = me  # type: ignore[attr-defined]
        sys.modules["src.core"].trajectory = me  # type: ignore[attr-defined]
    if __name__ != "gymserver.seedplugins" and "gymserver.seedplugins" not in sys.modules:
        try:
            importlib.import_module("gymserver.seedplugins")
        except Exception:  # noqa: BLE001 - not installed, or its client needs missing packages
            pkg = sys.modules.get("gymserver")
            if pkg is None:
                pkg = types.ModuleType("gymserver")
                pkg.__path__ = []
                sys.modules["gymserver"] = pkg
            sys.modules["gymserver.seedplugins"] = me
            pkg.seedplugins = me  # type: ignore[attr-defined]


def _is_plugin_class(obj: Any) -> bool:
    if not inspect.isclass(obj) or inspect.isabstract(obj):
        return False
    names = [c.__name__ for c in obj.__mro__]
    if "BasePlugin" not in names[1:]:
        return False
    # The seed's own base classes are never plugins, whichever module they come from.
    return obj.__name__ not in _KIND_BASES and obj.__name__ != "BasePlugin"


def _kind_of(cls: type) -> Optional[PluginType]:
    for c in cls.__mro__:
        if c.__name__ in _KIND_BASES:
            return _KIND_BASES[c.__name__]
    return None


def find_plugins(module_name: str) -> List[type]:
    """find_plugins imports module_name and returns its plugin classes, by name.

    It raises ModuleError when the module does not import or holds no plugin class.
    """
    _install_seed_modules()
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ModuleError(f"module {module_name} not found (searched the config's directory and PYTHONPATH: "
                              f"{os.pathsep.join(p or '.' for p in sys.path)})") from e
        raise ModuleError(f"module {module_name} does not import: {type(e).__name__}: {e}") from e
    except BaseException as e:  # noqa: BLE001 - a module may fail in any way, SystemExit included
        raise ModuleError(f"module {module_name} does not import: {type(e).__name__}: {e}") from e
    classes = [obj for _, obj in inspect.getmembers(mod) if _is_plugin_class(obj)]
    if not classes:
        abstract = [n for n, obj in inspect.getmembers(mod)
                    if inspect.isclass(obj) and inspect.isabstract(obj) and obj.__module__ == mod.__name__]
        hint = ""
        if abstract:
            hint = f"; these classes are abstract (a required method is missing): {', '.join(abstract)}"
        raise ModuleError(f"module {module_name} has no plugin class (a non-abstract subclass of BasePlugin, "
                          f"e.g. of TrajectoryAnalyzerPlugin){hint}")
    return classes


def _instantiate(cls: type, config: Dict[str, Any]) -> Any:
    try:
        return cls(copy.deepcopy(config))
    except TypeError:
        return cls()


async def _call(f: Any, *args: Any) -> Any:
    v = f(*args)
    if inspect.isawaitable(v):
        v = await v
    return v


def _hooks_of(p: Any, kind: Optional[PluginType]) -> List[str]:
    hooks = set()
    for h in getattr(p, "supported_hooks", None) or []:
        hooks.add(h.value if isinstance(h, enum.Enum) else str(h))
    if kind is not None:
        hooks.update(_KIND_HOOKS[kind])
    return [h for h in _HOOK_ORDER if h in hooks]


def describe(module_name: str, config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """describe returns the plugin classes of module_name: name, version, kind and hooks."""
    out = []
    hooks: set = set()
    for cls in find_plugins(module_name):
        kind = _kind_of(cls)
        p = _instantiate(cls, config or {})
        hs = _hooks_of(p, kind)
        unknown = [h for h in hs if h not in _HOOK_ORDER]
        if unknown:
            raise ModuleError(f"{cls.__name__}: unknown hooks {unknown}")
        hooks.update(hs)
        out.append({"class": cls.__name__, "name": str(p.name), "version": str(getattr(p, "version", "")),
                    "kind": kind.value if kind else "", "hooks": hs})
    return {"module": module_name, "plugins": out, "hooks": [h for h in _HOOK_ORDER if h in hooks]}


# ---------------------------------------------------------------------------
# Handling one event.


class _State:
    """_State keeps the plugins' attributes between calls in a pickle file, locked while a call runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = None
        self.saved: Dict[str, Dict[str, Any]] = {}
        self.warnings: List[str] = []

    def __enter__(self) -> "_State":
        if not self.path:
            return self
        import fcntl

        self.lock = open(self.path + ".lock", "a")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            with open(self.path, "rb") as f:
                self.saved = pickle.load(f)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - a broken state file starts the plugins afresh
            self.warnings.append(f"state file unreadable, plugins start afresh: {e}")
        return self

    def save(self, plugins: List[Tuple[str, Any]]) -> None:
        if not self.path:
            return
        out = {}
        for key, p in plugins:
            try:
                pickle.dumps(p.__dict__)
                out[key] = p.__dict__
            except Exception as e:  # noqa: BLE001 - such a plugin forgets its state between calls
                self.warnings.append(f"{key}: attributes not kept between calls (not picklable: {e})")
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(out, f)
        os.replace(tmp, self.path)

    def __exit__(self, *exc: Any) -> None:
        if self.lock is not None:
            self.lock.close()


def _context(ev: Dict[str, Any]) -> Dict[str, Any]:
    """_context fills the seed's PluginContext keys from a gymserver event."""
    hook = ev.get("hook", "")
    ctx: Dict[str, Any] = {
        "hook": hook,
        "environment_id": ev.get("env", ""),
        "task_id": ev.get("task", ""),
        "episode": ev.get("episode", 0),
        "episode_count": ev.get("episode", 0),
        "episode_id": ev.get("session_id") or f"{ev.get('env', '')}/{ev.get('task', '')}/{ev.get('episode', 0)}",
        "trajectory_id": ev.get("session_id", ""),
        "results": [],
    }
    if hook == "pre_rollout":
        plan = ev.get("plan") or {}
        ctx["environments"] = [e.get("id") for e in plan.get("environments") or []]
        ctx["config"] = plan
        ctx["plan"] = plan
    if ev.get("tool_call"):
        action = _action_of_call(ev["tool_call"])
        ctx["action"] = action
        if hook == "pre_action":
            ctx["actions"] = [action]
    if ev.get("result"):
        r, call = ev["result"], ev["result"].get("call") or {}
        ctx["result"] = ActionResult(success=not call.get("error_class") and call.get("exit_code", 0) == 0,
                                     output=r.get("output", ""), error=call.get("error", ""),
                                     exit_code=call.get("exit_code"), duration=float(call.get("duration", 0.0)),
                                     error_class=call.get("error_class", ""), blocked=bool(call.get("blocked")))
    if ev.get("messages") is not None:
        ctx["messages"] = ev.get("messages")
    if ev.get("termination_reason"):
        ctx["terminated_reason"] = ev["termination_reason"]
    traj = _trajectory(ev["trajectory"]) if ev.get("trajectory") else None
    if traj is not None:
        ctx["trajectory"] = traj
        ctx["test_results"] = traj.test_results
        if traj.episode_result is not None:
            ctx["episode_result"] = traj.episode_result
    if ev.get("evaluation"):
        e = ev["evaluation"]
        tests = _test_results(e.get("commands"))
        ctx["evaluation"] = e
        ctx["test_results"] = tests
        base = traj.episode_result if traj is not None and traj.episode_result else EpisodeResult()
        ctx["episode_result"] = dataclasses.replace(
            base, environment_id=ev.get("env", ""), success=bool(e.get("success")), test_results=tests,
            terminated_reason=ev.get("termination_reason", ""),
            final_score=float(ev["score"]) if ev.get("score") is not None else float(e.get("reward", 0.0)),
            tests_passed=int(e.get("passed", 0)), tests_total=int(e.get("total", 0)))
        if traj is not None:
            traj.test_results = tests
            traj.episode_result = ctx["episode_result"]
    if ev.get("environment") is not None:
        ctx["env_config"] = _environment(ev)
    if hook == "post_rollout":
        ctx["rollout_stats"] = ev.get("stats") or {}
    return ctx


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number, got {v!r}")
    return float(v)


def _count(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what} must be an integer, got {v!r}")
    return v


def _episode_change(before: EnvironmentConfig, after: Any) -> Dict[str, Any]:
    """_episode_change returns what modify_environment changed, as the answer's ``episode``."""
    if isinstance(after, dict):
        after = dataclasses.replace(before, **{k: v for k, v in after.items() if k in {f.name for f in dataclasses.fields(before)}})
    change: Dict[str, Any] = {}
    if getattr(after, "prompt", before.prompt) != before.prompt:
        change["prompt"] = str(after.prompt)
    vars_after = dict(getattr(after, "environment_variables", None) or {})
    set_vars = {str(k): str(v) for k, v in vars_after.items() if before.environment_variables.get(k) != v}
    if set_vars:
        change["environment_variables"] = set_vars
    if getattr(after, "max_actions", before.max_actions) != before.max_actions:
        change["max_actions"] = _count(after.max_actions, "max_actions")
    tb, ta = before.timeout_config or TimeoutConfig(), getattr(after, "timeout_config", None)
    if ta is not None:
        if isinstance(ta, dict):
            ta = TimeoutConfig(**ta)
        for k in ("global_timeout", "command_timeout"):
            if getattr(ta, k, None) != getattr(tb, k):
                change[k] = _number(getattr(ta, k), f"timeout_config.{k}")
    return change


async def _handle(ev: Dict[str, Any], plugins: List[Tuple[str, Any, Optional[PluginType]]]) -> Dict[str, Any]:
    hook = ev.get("hook", "")
    answer: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    suggestions: List[str] = []
    for name, p, kind in plugins:
        if hasattr(p, "is_enabled") and not p.is_enabled():
            continue
        ctx = _context(ev)
        if "score" in answer and "episode_result" in ctx:
            ctx["episode_result"].final_score = answer["score"]
        mine: Dict[str, Any] = {}
        # The call as it came, to tell what a filter changed in place.
        orig_action = copy.deepcopy(ctx["action"]) if hook == "pre_action" and "action" in ctx else None
        supported = [h.value if isinstance(h, enum.Enum) else str(h) for h in (getattr(p, "supported_hooks", None) or [])]
        if hook in supported:
            before = dict(ctx)
            pc = PluginContext(**ctx)
            got = await _call(p.execute, PluginHookType(hook), pc)
            if isinstance(got, PluginContext):
                pc = got
            for k, v in pc.data.items():
                if k not in before or v is not before[k]:
                    if k == "actions":
                        continue
                    mine[k] = v
            if orig_action is not None and "actions" in pc.data:
                _filter_answer(answer, name, orig_action, list(pc.data.get("actions") or []))
        if kind == PluginType.TRAJECTORY_ANALYZER and hook == "post_episode" and ctx.get("trajectory") is not None:
            analysis = await _call(p.analyze_trajectory, ctx["trajectory"])
            if isinstance(analysis, dict):
                mine.update(analysis)
            elif analysis is not None:
                mine["analysis"] = analysis
            got = await _call(p.suggest_improvements, ctx["trajectory"]) if hasattr(p, "suggest_improvements") else None
            if got:
                mine["suggestions"] = [str(s) for s in got]
                suggestions.extend(str(s) for s in got)
        elif kind == PluginType.EPISODE_EVALUATOR and hook == "post_test" and ctx.get("episode_result") is not None:
            traj = ctx.get("trajectory") or Trajectory(environment_id=ctx["environment_id"], task_id=ctx["task_id"],
                                                       test_results=ctx["test_results"], episode_result=ctx["episode_result"])
            scoring = await _call(p.evaluate_episode, ctx["episode_result"], traj)
            if isinstance(scoring, (int, float)) and not isinstance(scoring, bool):
                scoring = {"final_score": scoring}
            if isinstance(scoring, dict):
                scoring = dict(scoring)
                for key in ("final_score", "score"):
                    if key in scoring:
                        answer["score"] = _number(scoring.pop(key), f"{name}: {key}")
                        mine["final_score"] = answer["score"]
                        break
                mine.update(scoring)
        elif kind == PluginType.ENVIRONMENT_MODIFIER and hook == "pre_episode" and ctx.get("env_config") is not None:
            before = copy.deepcopy(ctx["env_config"])
            after = await _call(p.modify_environment, ctx["env_config"], PluginContext(**ctx))
            change = _episode_change(before, after if after is not None else ctx["env_config"])
            if change:
                ep = answer.setdefault("episode", {})
                if "environment_variables" in change:
                    ep.setdefault("environment_variables", {}).update(change.pop("environment_variables"))
                ep.update(change)
                mine["modified"] = sorted(set(change) | ({"environment_variables"} if "environment_variables" in ep else set()))
        elif kind == PluginType.ACTION_FILTER and orig_action is not None and not answer.get("block"):
            kept = await _call(p.filter_actions, [ctx["action"]], PluginContext(**ctx))
            _filter_answer(answer, name, orig_action, list(kept or []))
        elif kind == PluginType.ROLLOUT_MANAGER:
            if hook == "pre_episode":
                go_on = await _call(p.should_continue_rollout, PluginContext(**ctx))
                if go_on is False:
                    answer["stop"] = True
                    mine["stopped"] = True
            if hook in ("pre_rollout", "post_episode"):
                strategy = await _call(p.modify_rollout_strategy, PluginContext(**ctx)) or {}
                strategy = dict(strategy) if isinstance(strategy, dict) else {"strategy": strategy}
                for key in ("max_parallel_rollouts", "parallel"):
                    if key in strategy:
                        answer["parallel"] = _count(strategy.pop(key), f"{name}: {key}")
                for key in ("more_episodes", "additional_episodes", "extra_episodes"):
                    if key in strategy:
                        answer["more_episodes"] = answer.get("more_episodes", 0) + _count(strategy.pop(key), f"{name}: {key}")
                if strategy:
                    mine["strategy"] = strategy
        if mine:
            data[name] = _plain(mine)
    if data:
        answer["data"] = data
    if suggestions:
        answer["suggestions"] = suggestions
    return answer


def _filter_answer(answer: Dict[str, Any], name: str, action: Action, kept: List[Any]) -> None:
    """_filter_answer turns an action filter's verdict on one action into block or tool_call."""
    if not kept:
        answer["block"] = True
        answer["reason"] = f"filtered by {name}"
        answer.pop("tool_call", None)
        return
    new = kept[0]
    if not isinstance(new, Action) or (new.type == action.type and new.content == action.content and new.timeout == action.timeout):
        return
    t = new.type.value if isinstance(new.type, enum.Enum) else str(new.type)
    if t != "command":
        return  # only commands can be rewritten from an Action; other changes are ignored
    args: Dict[str, Any] = {"command": new.content}
    if new.timeout is not None:
        args["timeout"] = new.timeout
    if new.working_directory:
        args["working_directory"] = new.working_directory
    answer["tool_call"] = {"type": "function", "function": {"name": "execute_command", "arguments": json.dumps(args)}}


def handle(module_name: str, event: Dict[str, Any], config: Optional[Dict[str, Any]] = None,
           state_path: str = "") -> Dict[str, Any]:
    """handle answers one gymserver plugin event with the plugin classes of module_name."""
    classes = find_plugins(module_name)
    with _State(state_path) as state:
        plugins: List[Tuple[str, Any, Optional[PluginType]]] = []
        keyed: List[Tuple[str, Any]] = []

        async def run() -> Dict[str, Any]:
            for cls in classes:
                p = _instantiate(cls, config or {})
                key = f"{cls.__module__}.{cls.__qualname__}"
                if key in state.saved:
                    p.__dict__.update(state.saved[key])
                else:
                    init = getattr(p, "initialize", None)
                    if init is not None and await _call(init) is False:
                        raise RuntimeError(f"{cls.__name__}: initialize() returned False")
                plugins.append((str(p.name), p, _kind_of(cls)))
                keyed.append((key, p))
            return await _handle(event, plugins)

        answer = asyncio.run(run())
        state.save(keyed)
        if state.warnings:
            answer.setdefault("data", {})["warnings"] = state.warnings
    return answer


def main(argv: Optional[List[str]] = None) -> int:
    """main is the command line: ``describe MODULE`` or ``handle MODULE`` (event on stdin)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("describe", "handle"):
        print("usage: seedplugins.py describe|handle MODULE", file=sys.stderr)
        return 2
    cmd, module_name = argv
    # Modules are found from the working directory (the config's), as with ``python -m``, and
    # never from this file's folder, whose modules would shadow the plugin's imports.
    here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else None
    if sys.path and here and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.getcwd()
    elif os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        config = json.loads(os.environ.get("GYMSERVER_SEEDPLUGIN_CONFIG") or "{}")
    except ValueError as e:
        print(f"GYMSERVER_SEEDPLUGIN_CONFIG: {e}", file=sys.stderr)
        return 2
    # Whatever the plugins print goes to stderr: stdout carries the answer alone.
    out, sys.stdout = sys.stdout, sys.stderr
    try:
        if cmd == "describe":
            result = describe(module_name, config)
        else:
            event = json.loads(sys.stdin.read() or "{}")
            result = handle(module_name, event, config, os.environ.get("GYMSERVER_SEEDPLUGIN_STATE", ""))
    except ModuleError as e:
        print(str(e), file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a plugin failed on this event
        import traceback

        traceback.print_exc(limit=-3)
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = out
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
