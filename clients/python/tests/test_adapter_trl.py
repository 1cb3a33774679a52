"""TRL adapter tests: the adapter driven by stand-ins of TRL's GRPOTrainer and AsyncGRPOTrainer worker, on both backends.

The stand-ins (tests/standins/trl) are importable packages named ``trl`` and
``transformers``; each test puts them first on ``sys.path``, imports the
adapter afresh (so its "TRL installed" path runs) and restores
``sys.modules`` afterwards. The model is scripted (``scripted_policy``):
the dataset prompt names a plan, e.g. ``[plan:solve|idle]`` (the two
generations of a group take one alternative each).

``test_twin_*`` run the same episodes through TRL's real code from the
mirror when ``GYMSERVER_UPSTREAM_MIRROR`` is set (see the twin section).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import pickle
import queue as queue_mod
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pytest

from conftest import Backend, wait_no_sessions
from gymserver import Client
from gymserver.adapters import _shared
from gymserver.errors import GymServerError

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins" / "trl"
TWIN_STUBS = STANDINS / "twin"
ADAPTER = "gymserver.adapters.trl"
# STANDIN_TOP are the top-level modules the stand-ins provide, TWIN_TOP those the twin stubs add; each use
# of them removes them from sys.modules afterwards (and puts back whatever was there).
STANDIN_TOP = ("trl", "transformers", "scripted_policy", "json_schema_rules")
TWIN_TOP = STANDIN_TOP + (
    "twin_grpo", "_twin_stub", "accelerate", "aiohttp", "datasets", "huggingface_hub", "jinja2", "jmespath", "pandas", "pyarrow", "vllm",
)


def _ours(name: str, tops: Sequence[str]) -> bool:
    return name == ADAPTER or any(name == top or name.startswith(top + ".") for top in tops)


@contextlib.contextmanager
def installed(paths: Sequence[Path], version: Optional[str] = None, tops: Sequence[str] = STANDIN_TOP) -> Iterator[types.ModuleType]:
    """installed puts paths first on sys.path (TRL importable from them), imports the adapter afresh and yields it.

    With no paths, TRL is not importable. Afterwards sys.path, sys.modules,
    sys.meta_path and the ``gymserver.adapters.trl`` attribute are as before.
    """
    import gymserver.adapters as adapters_pkg

    saved = {n: m for n, m in sys.modules.items() if _ours(n, tops)}
    had_attr = hasattr(adapters_pkg, "trl")
    saved_attr = getattr(adapters_pkg, "trl", None)
    finders_before = set(map(id, sys.meta_path))
    for n in saved:
        del sys.modules[n]
    entries = [str(p) for p in paths]
    sys.path[0:0] = entries
    try:
        if entries:
            trl = importlib.import_module("trl")
            if version is not None:
                trl.__version__ = version
        yield importlib.import_module(ADAPTER)
    finally:
        for e in entries:
            sys.path.remove(e)
        for n in [n for n in sys.modules if _ours(n, tops)]:
            del sys.modules[n]
        sys.modules.update(saved)
        # the twin stubs' finder goes; finders other imports installed meanwhile (six's, say) stay
        sys.meta_path[:] = [f for f in sys.meta_path if id(f) in finders_before or type(f).__module__ != "_twin_stub"]
        if had_attr:
            adapters_pkg.trl = saved_attr
        elif hasattr(adapters_pkg, "trl"):
            del adapters_pkg.trl


@pytest.fixture
def adapter() -> Iterator[types.ModuleType]:
    """adapter is gymserver.adapters.trl imported with the TRL stand-ins installed."""
    with installed([STANDINS]) as mod:
        import scripted_policy

        scripted_policy.reset_choices()
        yield mod


@pytest.fixture(autouse=True)
def _fresh_shared_clients() -> Iterator[None]:
    yield
    _shared.close_shared()


def row(plan: str, **columns: Any) -> Dict[str, Any]:
    """row is one dataset row whose (conversational) prompt names a scripted plan."""
    return {"prompt": [{"role": "user", "content": f"[plan:{plan}]"}], **columns}


def server_tools(b: Backend, env: str) -> List[Dict[str, Any]]:
    """server_tools are the OpenAI tool schemas the server lists for env."""
    with Client(b.url) as c:
        return [dict(t) for e in c.envs() if e["id"] == env for t in e["tools"]]


def shown(schema: Dict[str, Any]) -> Dict[str, Any]:
    """shown is what a tool schema tells the model: name, description, parameter types/descriptions/enums, required."""
    fn = schema["function"]
    params = fn.get("parameters") or {}
    props = {}
    for k, v in (params.get("properties") or {}).items():
        props[k] = {"type": v.get("type"), "description": v.get("description", "")}
        if "enum" in v:
            props[k]["enum"] = v["enum"]
    return {"name": fn["name"], "description": fn.get("description", ""), "properties": props, "required": sorted(params.get("required") or [])}


def decode(ids: Any) -> str:
    """decode turns (padded) ids back into text, without padding."""
    return "".join(chr(int(i)) for i in ids if int(i) != 0)


def masked_row(b: Backend) -> Dict[str, Any]:
    """masked_row is a group whose samples fail for infrastructure reasons: a sandbox error (fake) or a broken verifier (live)."""
    if b.kind == "fake":
        return row("sandbox|write")
    return row("solve|write", env="verifier_broken")


def make_trainer(adapter: types.ModuleType, b: Backend, **config: Any) -> Any:
    """make_trainer builds the stand-in GRPOTrainer with gymserver's environment_factory and nothing else as reward."""
    from scripted_policy import ScriptedModel, ToyTokenizer
    from trl.trainer.grpo_trainer import GRPOConfig, GRPOTrainer

    factory_kw = config.pop("factory", {})
    reward_funcs = config.pop("reward_funcs", None)
    args = GRPOConfig(**{"num_generations": 2, "max_completion_length": 20000, **config})
    factory = adapter.tool_env_factory(**{"url": b.url, "env": b.env, **factory_kw})
    return GRPOTrainer(model=ScriptedModel(), reward_funcs=reward_funcs, args=args, processing_class=ToyTokenizer(), environment_factory=factory)


# --- without TRL -------------------------------------------------------------


def test_importable_without_trl() -> None:
    with installed([]) as mod:
        assert mod.HAVE_TRL is False and mod.TRL_VERSION is None
        assert not hasattr(mod, "GRPOTrainer")
        assert mod.GymServerRewardEnv.__mro__[1:] == (mod.GymServerToolEnv, object)


def test_old_trl_gets_no_get_reward() -> None:
    with installed([STANDINS], version="1.7.1") as mod:
        assert mod.HAVE_TRL and mod.TRL_VERSION == "1.7.1"
        with pytest.raises(ValueError, match="owns_reward=False"):
            mod.tool_env_factory(url="ws://127.0.0.1:1", env="calculator_api")
        f = mod.tool_env_factory(url="ws://127.0.0.1:1", env="calculator_api", owns_reward=False, tools=[])
        assert not hasattr(f(), "get_reward")


# --- tools --------------------------------------------------------------------


def test_tool_methods_follow_the_schemas(adapter: types.ModuleType) -> None:
    from transformers.utils import get_json_schema

    tools = [
        {"type": "function", "function": {"name": "search", "description": "Search the\n  index.  Args: none", "parameters": {
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "description": "Most results."},
                "query": {"type": "string", "description": "Words."},
                "ratio": {"type": ["number", "null"], "description": "A ratio."},
                "exact": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
                "filters": {"type": "object", "description": "Filters."},
                "mode": {"type": "string", "enum": ["fast", "full"], "description": "How."},
            },
            "required": ["query", "mode"],
        }}},
        {"type": "function", "function": {"name": "bad-name", "description": "x", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "kw", "description": "x", "parameters": {"type": "object", "properties": {"from": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "done", "description": "clashes with the state attribute", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "get_reward", "description": "reserved", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "noargs", "description": "", "parameters": {"type": "object", "properties": {}}}},
    ]
    env = adapter.tool_env_factory(url="ws://127.0.0.1:1", env="x", tools=tools)()
    import inspect

    public = sorted(n for n, _ in inspect.getmembers(env, inspect.ismethod) if not n.startswith("_"))
    assert public == ["get_reward", "noargs", "reset", "search"]
    assert env.done is False
    schema = get_json_schema(env.search)
    assert schema == {"type": "function", "function": {
        "name": "search",
        "description": "Search the index. Args - none",
        "parameters": {"type": "object", "properties": {
            "limit": {"type": "integer", "description": "Most results."},
            "query": {"type": "string", "description": "Words."},
            "ratio": {"type": "number", "description": "A ratio."},
            "exact": {"type": "boolean", "description": "The exact argument."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
            "filters": {"type": "object", "description": "Filters."},
            "mode": {"type": "string", "enum": ["fast", "full"], "description": "How."},
        }, "required": ["query", "mode"]},
    }}
    assert get_json_schema(env.noargs)["function"] == {"name": "noargs", "description": "Call the noargs tool.", "parameters": {"type": "object", "properties": {}}}
    # Python's own argument errors, which TRL turns into {"error": ...} tool messages
    with pytest.raises(TypeError, match="query"):
        env.search(mode="fast")
    with pytest.raises(TypeError, match="bogus"):
        env.search(query="q", mode="fast", bogus=1)
    with pytest.raises(RuntimeError, match="reset"):
        env.search(query="q", mode="fast")


def test_factory_pickles_as_plain_data(adapter: types.ModuleType) -> None:
    f = adapter.tool_env_factory(url="ws://127.0.0.1:1", env="calculator_api", seed=3, options={"a": 1})
    g = pickle.loads(pickle.dumps(f))  # no connection is made: the URL is dead
    assert type(g) is adapter.GymServerEnvFactory and vars(g) == vars(f)


# --- GRPOTrainer ----------------------------------------------------------------


def test_grpo_shows_the_servers_tools(adapter: types.ModuleType, backend: Backend) -> None:
    trainer = make_trainer(adapter, backend)
    try:
        assert trainer.reward_func_names == ["GymServerRewardEnv"]
        assert sorted(t.__name__ for t in trainer._env_tools[None]) == sorted(t["function"]["name"] for t in server_tools(backend, backend.env))
        out = trainer._generate_and_score_completions([row("idle")] * 2)
        from scripted_policy import rendered_tools

        prompt = decode(out["prompt_ids"][0])
        want = sorted((shown(t) for t in server_tools(backend, backend.env)), key=lambda s: s["name"])
        got = sorted((shown(t) for t in rendered_tools(prompt)), key=lambda s: s["name"])
        assert got == want
        # reset's task prompt follows the dataset prompt after a blank line
        assert "[plan:idle]\n\n" + trainer.environments[0].prompt in prompt
    finally:
        trainer.close()
    wait_no_sessions(backend)


def episode_rows(b: Backend) -> List[Dict[str, Any]]:
    """episode_rows is one generation batch (2 groups of 2): [solve|idle] and a masked group."""
    return [row("solve|idle")] * 2 + [masked_row(b)] * 2


def check_grpo_episode(trainer: Any, out: Dict[str, Any], b: Backend) -> None:
    """check_grpo_episode asserts what GRPOTrainer made of episode_rows: rewards, advantages, masks."""
    rewards = list(trainer._logs["rewards"]["GymServerRewardEnv"])
    envs = trainer.environments
    # solve: mark_done ended the episode with the hidden tests' reward; idle: the starter is evaluated
    assert rewards[0] == pytest.approx(1.0) and envs[0].termination_reason == "completed"
    assert rewards[1] < 1.0 and not envs[1].masked and envs[1].evaluation is not None
    # the masked samples: None for TRL, so NaN, unscorable, advantage 0 (fake: the group's other sample is
    # scored alone, so its advantage is 0 too; live: the broken verifier masks both)
    masked = [2] if b.kind == "fake" else [2, 3]
    for i in masked:
        assert envs[i].masked and math.isnan(rewards[i]) and envs[i].error
    if b.kind == "fake":
        assert not envs[3].masked and rewards[3] == pytest.approx(1.0)
    adv = out["advantages"].tolist()
    assert adv[0] > 0 > adv[1] and adv[2] == 0.0 and adv[3] == 0.0
    # tool outputs are context (tool_mask 0), model tokens are trained (1); shapes line up
    cm, tm, ids = out["completion_mask"], out["tool_mask"], out["completion_ids"]
    assert cm.shape == tm.shape == ids.shape
    model_text = decode(t for t, m, c in zip(ids[0], tm[0], cm[0]) if m == 1 and c == 1)
    context = decode(t for t, m, c in zip(ids[0], tm[0], cm[0]) if m == 0 and c == 1)
    assert model_text.startswith("[chose:solve]<tool_call>") and '"mark_done"' in model_text and "<tool_response>" not in model_text
    assert context.count("<tool_response>") == 2 and "Wrote 2632 bytes" in context
    assert decode(ids[1]).startswith("[chose:idle]") and tm[1].min() == 1
    # the model was shown the server's tools, after the dataset prompt and the task prompt
    from scripted_policy import rendered_tools

    prompt = decode(out["prompt_ids"][0])
    want = sorted((shown(t) for t in server_tools(b, b.env)), key=lambda s: s["name"])
    assert sorted((shown(t) for t in rendered_tools(prompt)), key=lambda s: s["name"]) == want
    assert "[plan:solve|idle]\n\n" + envs[0].prompt in prompt
    assert all(e._session is None for e in envs)


def test_grpo_episodes(adapter: types.ModuleType, backend: Backend) -> None:
    trainer = make_trainer(adapter, backend)
    try:
        out = trainer._generate_and_score_completions(episode_rows(backend))
        check_grpo_episode(trainer, out, backend)
    finally:
        trainer.close()
    wait_no_sessions(backend)


def test_grpo_trainer_side_cuts(adapter: types.ModuleType, backend: Backend) -> None:
    # max_tool_calling_iterations=1: the mark_done call is generated but never run; the reward evaluates what is there
    trainer = make_trainer(adapter, backend, max_tool_calling_iterations=1)
    try:
        trainer._generate_and_score_completions([row("solve")] * 2)
        env = trainer.environments[0]
        text = trainer._logs["completion"][0]
        assert '"mark_done"' in text and text.count("<tool_response>") == 1
        assert trainer._logs["rewards"]["GymServerRewardEnv"] == [pytest.approx(1.0)] * 2
        assert env.termination_reason == "" and env.evaluation is not None and not env.masked
    finally:
        trainer.close()
    wait_no_sessions(backend)
    # cut by length: read_file's output would overflow max_completion_length, so TRL drops it and ends the rollout
    trainer = make_trainer(adapter, backend, max_completion_length=4500)
    try:
        out = trainer._generate_and_score_completions([row("long")] * 2)
        text = trainer._logs["completion"][0]
        assert '"read_file"' in text and text.count("<tool_response>") == 1
        assert len(out["completion_ids"][0]) <= 4500 and out["tool_mask"][0].tolist().count(0) > 0
        assert trainer._logs["rewards"]["GymServerRewardEnv"] == [pytest.approx(1.0)] * 2
    finally:
        trainer.close()
    wait_no_sessions(backend)


def test_grpo_server_budget(adapter: types.ModuleType, backend: Backend) -> None:
    if backend.kind == "fake":
        pytest.skip("the fake server does not enforce max_actions")
    trainer = make_trainer(adapter, backend)
    try:
        trainer._generate_and_score_completions([row("budget")] * 2)
        env = trainer.environments[0]
        assert env.termination_reason == "max_actions" and env.done and not env.masked
        assert trainer._logs["rewards"]["GymServerRewardEnv"] == [pytest.approx(1.0)] * 2
        assert trainer._logs["completion"][0].count("the episode has ended") == 2  # calls 61 and 62 never reach the server
    finally:
        trainer.close()
    wait_no_sessions(backend)


def test_grpo_bad_arguments(adapter: types.ModuleType, backend: Backend) -> None:
    trainer = make_trainer(adapter, backend)
    try:
        trainer._generate_and_score_completions([row("bad-args")] * 2)
        text = trainer._logs["completion"][0]
        assert "{'error': \"missing a required argument: 'content'\"}" in text
        assert "{'error': \"got an unexpected keyword argument 'shell'\"}" in text
        assert trainer._metrics["train"]["tools/failure_frequency"] == [pytest.approx(4 / 6)]
        assert trainer._logs["rewards"]["GymServerRewardEnv"] == [pytest.approx(1.0)] * 2
    finally:
        trainer.close()
    wait_no_sessions(backend)


def dead_url() -> str:
    """dead_url is a ws:// URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


def test_grpo_reset_errors(adapter: types.ModuleType, backend: Backend) -> None:
    # an unknown environment is a configuration error: it raises, as TRL would crash the step
    trainer = make_trainer(adapter, backend)
    try:
        with pytest.raises(GymServerError, match="not_found"):
            trainer._generate_and_score_completions([row("idle", env="no_such_env")] * 2)
    finally:
        trainer.close()
    wait_no_sessions(backend)
    # an infrastructure failure (here: no server to reach) masks the sample instead
    trainer = make_trainer(adapter, backend, factory={"tools": server_tools(backend, backend.env), "url": dead_url()})
    try:
        out = trainer._generate_and_score_completions([row("solve")] * 2)
        env = trainer.environments[0]
        assert env.masked and env.error.startswith("reset: connection_lost")
        assert "environment failed" in trainer._logs["completion"][0]
        assert all(math.isnan(r) for r in trainer._logs["rewards"]["GymServerRewardEnv"])
        assert out["advantages"].tolist() == [0.0, 0.0]
    finally:
        trainer.close()
    wait_no_sessions(backend)


def test_grpo_reward_function_path(adapter: types.ModuleType, backend: Backend) -> None:
    trainer = make_trainer(adapter, backend, factory={"owns_reward": False}, reward_funcs=[adapter.gymserver_reward])
    try:
        assert trainer.reward_func_names == ["gymserver_reward"]
        trainer._generate_and_score_completions([row("write|idle"), row("write|idle"), masked_row(backend), masked_row(backend)])
        rewards = trainer._logs["rewards"]["gymserver_reward"]
        assert rewards[0] == pytest.approx(1.0) and rewards[1] < 1.0 and math.isnan(rewards[2])
        assert math.isnan(rewards[3]) if backend.kind == "live" else rewards[3] == pytest.approx(1.0)
    finally:
        trainer.close()
    wait_no_sessions(backend)
    trainer = make_trainer(adapter, backend, factory={"owns_reward": False}, reward_funcs=[adapter.gymserver_reward_async])
    try:
        trainer._generate_and_score_completions([row("solve|write")] * 2)
        assert trainer._logs["rewards"]["gymserver_reward_async"] == [pytest.approx(1.0)] * 2
    finally:
        trainer.close()
    wait_no_sessions(backend)


def test_reward_function_misuse(adapter: types.ModuleType) -> None:
    with pytest.raises(ValueError, match="AsyncGRPOTrainer"):
        adapter.gymserver_reward(["c"])  # what AsyncGRPOTrainer's _score_group passes: no environments
    owning = adapter.tool_env_factory(url="ws://127.0.0.1:1", env="x", tools=[])()
    with pytest.raises(ValueError, match="twice"):
        adapter.gymserver_reward(["c"], environments=[owning])
    other = adapter.tool_env_factory(url="ws://127.0.0.1:1", env="x", tools=[], owns_reward=False)()
    assert adapter.gymserver_reward(["c", "d"], environments=[other, object()]) == [None, None]  # never reset; not gymserver's


# --- AsyncGRPOTrainer ------------------------------------------------------------


def row_plans(sample: Any) -> List[str]:
    """row_plans are the alternatives of the plan named in a sample's prompt."""
    import re

    return re.search(r"\[plan:([\w|-]+)\]", sample.prompt[-1]["content"]).group(1).split("|")


def run_async_worker(adapter: types.ModuleType, b: Backend, rows: List[Dict[str, Any]], groups: int, worker_cls: Any = None) -> List[Any]:
    """run_async_worker starts AsyncGRPOTrainer's (stand-in) rollout worker in a spawned process and collects groups*2 samples."""
    from scripted_policy import ToyTokenizer
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    worker_cls = worker_cls or AsyncRolloutWorker
    worker = worker_cls(
        model_name="scripted",
        dataset=rows,
        reward_funcs=[],
        processing_class=ToyTokenizer(),
        environment_factory=adapter.tool_env_factory(url=b.url, env=b.env),
        num_generations=2,
        max_inflight_tasks=2,
        max_tokens=20000,
    )
    worker.start()
    samples = []
    deadline = time.monotonic() + 300
    try:
        while len(samples) < groups * 2:
            try:
                samples.append(worker.rollout_buffer.get(timeout=5))
            except queue_mod.Empty:
                worker.check_health(stale_after_s=120)
                assert worker._process is not None and worker._process.is_alive(), "the rollout worker died"
                assert time.monotonic() < deadline, f"only {len(samples)} samples after 300 s"
    finally:
        # Keep reading while the child winds down: a process exits only once its queued samples are flushed.
        # (Setting the event of a child that died would block: multiprocessing waits for its sleepers to wake.)
        if worker._process is not None and worker._process.is_alive():
            worker._stop_event_mp.set()
        deadline = time.monotonic() + 60
        while worker._process is not None and worker._process.is_alive() and time.monotonic() < deadline:
            try:
                worker.rollout_buffer.get(timeout=0.2)
            except queue_mod.Empty:
                pass
        worker.stop()
    return samples


def check_async_samples(samples: List[Any], b: Backend) -> None:
    """check_async_samples asserts what AsyncGRPOTrainer gets from the rows [solve|idle] and masked_row."""
    by_group: Dict[int, List[Any]] = {}
    for s in samples:  # groups by row (TRL 1.8 has no group_id); in a group, in the order the plans were chosen
        by_group.setdefault(0 if row_plans(s) == ["solve", "idle"] else 1, []).append(s)
    for group in by_group.values():
        group.sort(key=lambda s: s.completion[0]["content"] != "[chose:" + row_plans(s)[0] + "]")
    solved, idle = by_group[0]
    assert solved.metrics["rewards/GymServerRewardEnv"] == pytest.approx(1.0) and idle.metrics["rewards/GymServerRewardEnv"] < 1.0
    assert solved.advantage > 0 > idle.advantage
    masked = by_group[1][:1] if b.kind == "fake" else by_group[1]
    for s in masked:  # NaN reward, advantage 0
        assert math.isnan(s.metrics["rewards/GymServerRewardEnv"]) and s.advantage == 0.0
    from scripted_policy import rendered_tools

    text = decode(solved.input_ids)
    want = sorted((shown(t) for t in server_tools(b, b.env)), key=lambda s: s["name"])
    assert sorted((shown(t) for t in rendered_tools(text)), key=lambda s: s["name"]) == want
    assert [m["role"] for m in solved.completion][:4] == ["assistant", "tool", "assistant", "tool"]
    assert "Wrote 2632 bytes" in solved.completion[1]["content"]
    assert len(solved.input_ids) == len(solved.completion_mask) and 0 in solved.completion_mask


def test_async_grpo_worker(adapter: types.ModuleType, backend: Backend) -> None:
    samples = run_async_worker(adapter, backend, [row("solve|idle"), masked_row(backend)], groups=2)
    check_async_samples(samples, backend)
    wait_no_sessions(backend)


# --- twins: TRL's real code from the mirror ------------------------------------------
#
# With GYMSERVER_UPSTREAM_MIRROR set (to the directory holding huggingface+trl/repo), TRL's own
# package at each of TRL_COMMITS is extracted into a temporary directory and imported from there; its heavy
# dependencies are stubs (standins/trl/twin: transformers, accelerate, datasets, vLLM, ...; torch is
# the real 1.13). The model is the same scripted policy. What runs is upstream's: GRPOTrainer.__init__
# (config, environment probe, get_reward wiring) and _generate_and_score_completions (pool, reset,
# tool loop, rewards, advantages); AsyncRolloutWorker.start (pickle check, spawn) and the child's
# _AsyncRolloutLoop (probe, pool, reset, tools, get_reward, scoring, and its vLLM requests, which the
# aiohttp stub answers with the scripted policy). The one upstream file changed is the async_grpo
# package __init__, emptied (see upstream_trl).

#: TRL_COMMITS are the TRL versions the twins run: main of 2026-07-24, v1.9.0 and v1.8.0 (the first with get_reward).
TRL_COMMITS = {
    "main-f2cd5771": "f2cd57710ae345ea6428ae95363267fcf38a3dc8",
    "v1.9.0": "35def3ee000a87f6839e66f4b7749b06274ed1b3",
    "v1.8.0": "95809b942eb5d11d0b06d749510d88be99230b73",
}


@pytest.fixture(scope="module", params=sorted(TRL_COMMITS))
def upstream_trl(request: pytest.FixtureRequest) -> Iterator[Path]:
    """upstream_trl is a directory holding TRL's ``trl`` package at one of TRL_COMMITS, from the mirror."""
    mirror = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")
    if not mirror:
        pytest.skip("GYMSERVER_UPSTREAM_MIRROR is not set: the twin tests need TRL's source from the mirror")
    git_dir = Path(mirror) / "huggingface+trl" / "repo"
    tmp = Path(tempfile.mkdtemp(prefix="trl-upstream-"))
    try:
        commit = TRL_COMMITS[request.param]
        tar = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit, "trl"], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(tmp)
        # The package __init__ re-exports AsyncGRPOTrainer, whose module needs torch >= 2 (DTensor); the worker
        # module it sits next to is what the twin runs, and it does not need the package's exports.
        (tmp / "trl" / "experimental" / "async_grpo" / "__init__.py").write_text(
            '"""Emptied for the twin test: upstream re-exports AsyncGRPOConfig and AsyncGRPOTrainer here."""\n'
        )
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# TORCH_TOO_OLD are torch modules TRL imports that torch 1.13 cannot import on Python 3.11; stubbed in-process.
TORCH_TOO_OLD = ("torch.distributed.fsdp", "torch.distributed._tensor")


@contextlib.contextmanager
def upstream_installed(upstream: Path) -> Iterator[types.ModuleType]:
    """upstream_installed imports the adapter with TRL's real package from upstream and the twin stubs."""
    with installed([upstream, TWIN_STUBS, STANDINS], tops=TWIN_TOP) as adapter:
        import _twin_stub

        saved = {n: m for n, m in sys.modules.items() if n.startswith(TORCH_TOO_OLD)}
        for name in TORCH_TOO_OLD:
            _twin_stub.stub_module(name)
        try:
            import scripted_policy

            scripted_policy.reset_choices()
            yield adapter
        finally:
            for n in [n for n in sys.modules if n.startswith(TORCH_TOO_OLD)]:
                del sys.modules[n]
            sys.modules.update(saved)


def test_twin_grpo_trainer(upstream_trl: Path, backend: Backend) -> None:
    with upstream_installed(upstream_trl) as adapter:
        import trl.trainer.grpo_trainer as upstream
        from trl.trainer.grpo_config import GRPOConfig
        from trl.trainer.utils import shutdown_event_loop_in_daemon
        from twin_grpo import TwinModel, TwinTokenizer

        assert Path(upstream.__file__).is_relative_to(upstream_trl)
        args = GRPOConfig(output_dir=str(upstream_trl / "out"), num_generations=2, per_device_train_batch_size=4, max_completion_length=20000, report_to="none")
        factory = adapter.tool_env_factory(url=backend.url, env=backend.env)
        trainer = upstream.GRPOTrainer(model=TwinModel(20000), args=args, train_dataset=[], processing_class=TwinTokenizer(), environment_factory=factory)
        try:
            assert trainer.reward_func_names == ["GymServerRewardEnv"]
            out = trainer._generate_and_score_completions(episode_rows(backend))
            check_grpo_episode(trainer, out, backend)
        finally:
            shutdown_event_loop_in_daemon(trainer.async_loop_thread, trainer.async_loop)
    wait_no_sessions(backend)


def test_twin_async_rollout_worker(upstream_trl: Path, backend: Backend) -> None:
    with upstream_installed(upstream_trl) as adapter:
        import trl.experimental.async_grpo.async_rollout_worker as upstream

        assert Path(upstream.__file__).is_relative_to(upstream_trl)
        samples = run_async_worker(adapter, backend, [row("solve|idle"), masked_row(backend)], groups=2, worker_cls=upstream.AsyncRolloutWorker)
        assert all(type(s) is upstream.RolloutSample for s in samples)
        check_async_samples(samples, backend)
    wait_no_sessions(backend)
