"""gymserver.seedplugins: Real Work plugin modules, their kinds mapped to gymserver hook answers, state between calls, and the adapter's command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Dict

import pytest

from gymserver import seedplugins
from gymserver.seedplugins import ModuleError

ADAPTER = Path(seedplugins.__file__)

SEED_MODULE = '''
from typing import Any, Dict, List

from src.plugins.base import (ActionFilterPlugin, BasePlugin, EnvironmentModifierPlugin, EpisodeEvaluatorPlugin,
                              PluginHookType, RolloutManagerPlugin, TrajectoryAnalyzerPlugin)
from src.core.config import ActionType


class CustomAnalyzerPlugin(TrajectoryAnalyzerPlugin):
    @property
    def name(self) -> str:
        return "custom_analyzer"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.POST_EPISODE]

    async def analyze_trajectory(self, trajectory) -> Dict[str, Any]:
        commands = [s.action.content for s in trajectory.steps if s.action.type == ActionType.COMMAND]
        return {"commands": commands, "failed": sum(1 for s in trajectory.steps if not s.result.success),
                "score": trajectory.episode_result.final_score}

    async def suggest_improvements(self, trajectory) -> List[str]:
        return ["check the output"]


class Evaluator(EpisodeEvaluatorPlugin):
    name = "evaluator"

    def evaluate_episode(self, episode_result, trajectory):  # a plain method works too
        bonus = 0.1 if len(trajectory.steps) < 3 else 0.0
        return {"final_score": min(1.0, episode_result.final_score + bonus), "bonus": bonus}


class Modifier(EnvironmentModifierPlugin):
    name = "modifier"

    async def modify_environment(self, env_config, context):
        env_config.prompt = "Short: " + env_config.prompt
        env_config.environment_variables["LEVEL"] = str(self.config.get("level", 1))
        env_config.timeout_config.global_timeout = 120
        return env_config


class Manager(RolloutManagerPlugin):
    name = "manager"

    def __init__(self, config=None):
        super().__init__(config)
        self.seen = 0

    async def should_continue_rollout(self, context) -> bool:
        self.seen += 1
        return self.seen < 3

    async def modify_rollout_strategy(self, context) -> Dict[str, Any]:
        if context.get("trajectory") is None:
            return {"max_parallel_rollouts": 2}
        return {"additional_episodes": 1, "max_retries": 5}


class Filter(ActionFilterPlugin):
    name = "filter"

    async def filter_actions(self, actions, context):
        kept = []
        for a in actions:
            if a.type == ActionType.COMMAND and "sudo" in a.content:
                continue
            if a.type == ActionType.COMMAND and a.content.startswith("pip "):
                a.content = "python3 -m " + a.content
            kept.append(a)
        return kept


class Watcher(BasePlugin):
    name = "watcher"

    @property
    def supported_hooks(self):
        return [PluginHookType.POST_ACTION, PluginHookType.POST_ROLLOUT]

    async def execute(self, hook, context):
        if hook == PluginHookType.POST_ACTION:
            context.set("last_exit", context.get("result").exit_code)
        else:
            context.set("episodes", context.get("rollout_stats")["overall"]["episodes"])
        return context
'''


@pytest.fixture
def seed_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """seed_module writes SEED_MODULE as a fresh package on sys.path and returns its module name."""
    pkg = "seedpkg_" + uuid.uuid4().hex[:8]
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "plugins.py").write_text(SEED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg + ".plugins"


def call(name: str, args: Dict[str, Any], id: str = "c1") -> Dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


TRAJECTORY = {
    "trajectory_id": "t1",
    "environment_id": "calc",
    "task_id": "calc",
    "episode": 0,
    "steps": [
        {"step_id": "s1", "action": {"type": "command", "content": "ls"}, "result": {"success": True, "output": "app.py", "duration": 0.1}},
        {"step_id": "s2", "action": {"type": "file_write", "content": "app.py"}, "result": {"success": False, "error": "denied", "duration": 0.2}},
    ],
    "test_results": [{"command": "pytest", "success": True, "exit_code": 0, "output": "ok", "duration": 1.5}],
    "episode_result": {"success": True, "final_score": 0.5, "terminated_reason": "completed", "actions": 2},
}


def test_describe_lists_classes_kinds_and_hooks(seed_module: str) -> None:
    d = seedplugins.describe(seed_module)
    by_class = {p["class"]: p for p in d["plugins"]}
    assert by_class["CustomAnalyzerPlugin"] == {"class": "CustomAnalyzerPlugin", "name": "custom_analyzer", "version": "1.0.0",
                                                "kind": "trajectory_analyzer", "hooks": ["post_episode"]}
    assert by_class["Evaluator"]["kind"] == "episode_evaluator" and by_class["Evaluator"]["hooks"] == ["post_test"]
    assert by_class["Modifier"]["hooks"] == ["pre_episode"]
    assert by_class["Manager"]["hooks"] == ["pre_rollout", "pre_episode", "post_episode"]
    assert by_class["Filter"]["hooks"] == ["pre_action"]
    assert by_class["Watcher"] == {"class": "Watcher", "name": "watcher", "version": "0", "kind": "",
                                   "hooks": ["post_action", "post_rollout"]}
    assert d["hooks"] == ["pre_rollout", "pre_episode", "pre_action", "post_action", "post_test", "post_episode", "post_rollout"]


def test_analyzer_gets_a_seed_trajectory_and_returns_suggestions(seed_module: str) -> None:
    a = seedplugins.handle(seed_module, {"hook": "post_episode", "env": "calc", "trajectory": TRAJECTORY})
    assert a["suggestions"] == ["check the output"]
    assert a["data"]["custom_analyzer"] == {"commands": ["ls"], "failed": 1, "score": 0.5, "suggestions": ["check the output"]}
    assert a["data"]["manager"] == {"strategy": {"max_retries": 5}}
    assert a["more_episodes"] == 1
    assert "parallel" not in a and "stop" not in a


def test_evaluator_changes_the_score(seed_module: str) -> None:
    ev = {"hook": "post_test", "env": "calc", "score": 0.5, "termination_reason": "completed",
          "evaluation": {"reward": 0.5, "success": False, "passed": 1, "total": 2, "commands": TRAJECTORY["test_results"]},
          "trajectory": dict(TRAJECTORY, episode_result={"final_score": 0.5})}
    a = seedplugins.handle(seed_module, ev)
    assert a["score"] == pytest.approx(0.6)
    assert a["data"]["evaluator"] == {"final_score": pytest.approx(0.6), "bonus": 0.1}


def test_modifier_answers_what_changed(seed_module: str) -> None:
    ev = {"hook": "pre_episode", "env": "calc", "task": "calc",
          "environment": {"prompt": "Build it.", "environment_variables": {"A": "1"}, "global_timeout": 900, "command_timeout": 120, "max_actions": 60}}
    a = seedplugins.handle(seed_module, ev, config={"level": 3})
    assert a["episode"] == {"prompt": "Short: Build it.", "environment_variables": {"LEVEL": "3"}, "global_timeout": 120.0}
    assert a["data"]["modifier"] == {"modified": ["environment_variables", "global_timeout", "prompt"]}


def test_filter_blocks_and_rewrites_commands(seed_module: str) -> None:
    a = seedplugins.handle(seed_module, {"hook": "pre_action", "tool_call": call("execute_command", {"command": "sudo rm x"})})
    assert a["block"] is True and "filter" in a["reason"]
    a = seedplugins.handle(seed_module, {"hook": "pre_action", "tool_call": call("execute_command", {"command": "pip list", "timeout": 5})})
    assert json.loads(a["tool_call"]["function"]["arguments"]) == {"command": "python3 -m pip list", "timeout": 5}
    a = seedplugins.handle(seed_module, {"hook": "pre_action", "tool_call": call("write_file", {"filepath": "a", "content": "b"})})
    assert "block" not in a and "tool_call" not in a


def test_execute_context_values_become_data(seed_module: str) -> None:
    ev = {"hook": "post_action", "tool_call": call("execute_command", {"command": "false"}),
          "result": {"output": "", "call": {"exit_code": 1, "duration": 0.01}}}
    assert seedplugins.handle(seed_module, ev)["data"] == {"watcher": {"last_exit": 1}}
    ev = {"hook": "post_rollout", "stats": {"overall": {"episodes": 4}}}
    assert seedplugins.handle(seed_module, ev)["data"] == {"watcher": {"episodes": 4}}


def test_rollout_manager_keeps_its_state_between_calls(seed_module: str, tmp_path: Path) -> None:
    state = str(tmp_path / "state.pickle")
    assert seedplugins.handle(seed_module, {"hook": "pre_rollout", "plan": {"environments": [{"id": "calc"}]}}, state_path=state)["parallel"] == 2
    ev = {"hook": "pre_episode", "env": "calc"}
    assert "stop" not in seedplugins.handle(seed_module, ev, state_path=state)
    assert "stop" not in seedplugins.handle(seed_module, ev, state_path=state)
    third = seedplugins.handle(seed_module, ev, state_path=state)
    assert third["stop"] is True and third["data"]["manager"] == {"stopped": True}
    # Without the state file every call starts afresh.
    assert "stop" not in seedplugins.handle(seed_module, ev)


@pytest.mark.parametrize(
    "source,want",
    [
        (None, "not found"),
        ("def broken(:\n", "does not import: SyntaxError"),
        ("import not_a_real_package_xyz\n", "does not import: ModuleNotFoundError: No module named 'not_a_real_package_xyz'"),
        ("raise SystemExit(3)\n", "does not import: SystemExit: 3"),
        ("class Helper:\n    pass\n", "has no plugin class"),
        ("from src.plugins.base import EpisodeEvaluatorPlugin\nclass Half(EpisodeEvaluatorPlugin):\n    pass\n", "abstract (a required method is missing): Half"),
    ],
)
def test_unusable_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: Any, want: str) -> None:
    name = "bad_" + uuid.uuid4().hex[:8]
    if source is not None:
        (tmp_path / (name + ".py")).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleError, match=want.replace("(", r"\(").replace(")", r"\)")):
        seedplugins.find_plugins(name)


def test_gymserver_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "gs_" + uuid.uuid4().hex[:8]
    (tmp_path / (name + ".py")).write_text(textwrap.dedent('''
        from gymserver.seedplugins import TrajectoryAnalyzerPlugin

        class Steps(TrajectoryAnalyzerPlugin):
            name = "steps"

            async def analyze_trajectory(self, trajectory):
                return {"n": len(trajectory.steps)}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert seedplugins.handle(name, {"hook": "post_episode", "trajectory": TRAJECTORY})["data"] == {"steps": {"n": 2}}


def run_adapter(cwd: Path, *args: str, stdin: str = "", env: Any = None) -> subprocess.CompletedProcess:
    """run_adapter runs the adapter file as the gymserver binary does (with the Python running the tests)."""
    return subprocess.run([sys.executable, "-c", ADAPTER.read_text(), *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=60, env=env)


def test_command_line(tmp_path: Path) -> None:
    (tmp_path / "loud.py").write_text(textwrap.dedent('''
        from src.plugins.base import TrajectoryAnalyzerPlugin

        print("imported")  # plugin output must not reach stdout

        class Loud(TrajectoryAnalyzerPlugin):
            name = "loud"

            async def analyze_trajectory(self, trajectory):
                print("analysing")
                if not trajectory.steps:
                    raise ValueError("no steps")
                return {"ok": True}
    '''))
    p = run_adapter(tmp_path, "describe", "loud")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["plugins"][0]["name"] == "loud"
    p = run_adapter(tmp_path, "handle", "loud", stdin=json.dumps({"hook": "post_episode", "trajectory": TRAJECTORY}))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"data": {"loud": {"ok": True}}}
    assert "analysing" in p.stderr
    p = run_adapter(tmp_path, "handle", "loud", stdin=json.dumps({"hook": "post_episode", "trajectory": dict(TRAJECTORY, steps=[])}))
    assert p.returncode == 1 and p.stdout == "" and "ValueError: no steps" in p.stderr
    p = run_adapter(tmp_path, "describe", "missing_mod")
    assert p.returncode == 2 and "module missing_mod not found" in p.stderr
    p = run_adapter(tmp_path, "bogus")
    assert p.returncode == 2 and "usage" in p.stderr
