"""The OpenRLHF adapter, driven the way OpenRLHF v0.11.0 drives an agent_func file.

The stand-ins in ``tests/standins/openrlhf`` are installed under the real
module names (``openrlhf.utils.agent``, ``openrlhf.trainer.ray.vllm_engine``,
``openrlhf.trainer.ppo_utils.samples_generator``, ``vllm``...) before the
adapter is imported, so its "OpenRLHF installed" path is the one tested.
Each episode test writes an agent_func file, loads it with the rollout
actor's loader, generates one batch through ``SamplesGenerator`` with a
scripted vLLM V1 engine, turns the responses into Experiences, batches them
like the experience maker, and checks what the trainer would train on.

``test_twin_real_upstream`` runs the same batches through OpenRLHF's real
files from the mirror (set ``GYMSERVER_UPSTREAM_MIRROR``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import pytest

import gymserver.adapters
from gymserver.adapters import _shared
from conftest import SOLUTION, Backend, wait_no_sessions

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standins" / "openrlhf"
ADAPTER = "gymserver.adapters.openrlhf"
# Modules the tests install or stub; they are removed and restored around each test.
OWNED = ("openrlhf", "vllm", "fakemodel", "ray", "tqdm", "aiohttp", "transformers", "agent_module", ADAPTER)

UPSTREAM_REPO = "OpenRLHF+OpenRLHF/repo"
UPSTREAM_COMMIT = "3c3be6234e0cb353e76bb8019947db9dfe99fca7"  # v0.11.0
UPSTREAM_FILES = (
    "openrlhf/utils/agent.py",
    "openrlhf/utils/logging_utils.py",
    "openrlhf/utils/utils.py",
    "openrlhf/utils/loss_utils.py",
    "openrlhf/trainer/ray/utils.py",
    "openrlhf/trainer/ray/vllm_engine.py",
    "openrlhf/trainer/ppo_utils/experience.py",
    "openrlhf/trainer/ppo_utils/samples_generator.py",
)

AGENT_FUNC = """
from gymserver.adapters.openrlhf import GymServerAgentExecutor, GymServerAgentInstance


class AgentInstance(GymServerAgentInstance):
    gymserver_url = {url!r}


class AgentExecutor(GymServerAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
"""

DONE = '<tool_call>{"name": "mark_done", "arguments": {}}</tool_call>'
SANDBOX_FAIL = '<tool_call>{"name": "execute_command", "arguments": {"command": "__sandbox_fail__"}}</tool_call>'
IM_START, IM_END = 1, 2  # fakemodel.ChatMLTokenizer ids


def solution_text(b: Backend) -> str:
    """solution_text is a Hermes tool call writing the reference solution."""
    return "<tool_call>%s</tool_call>" % json.dumps({"name": "write_file", "arguments": {"filepath": b.solution_path, "content": SOLUTION}})


def turn(prompt_text: str) -> int:
    """turn is the number of the assistant turn the prompt asks for (1 for the first)."""
    return prompt_text.count("<|im_start|>assistant")


def solver(b: Backend, second: str = DONE) -> Callable[[str], str]:
    """solver writes the reference solution, then replies ``second``."""
    return lambda prompt: solution_text(b) if turn(prompt) == 1 else second


def _owned(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OWNED)


@contextlib.contextmanager
def installed(paths: Sequence[Path], stubs: Optional[Dict[str, Any]] = None) -> Iterator[Any]:
    """installed puts paths first on sys.path and stubs in sys.modules, then imports the adapter afresh.

    Everything is restored on exit.
    """
    saved = {k: v for k, v in sys.modules.items() if _owned(k)}
    saved_attr = getattr(gymserver.adapters, "openrlhf", None)
    for k in saved:
        del sys.modules[k]
    sys.modules.update(stubs or {})
    for p in reversed(paths):
        sys.path.insert(0, str(p))
    try:
        yield importlib.import_module(ADAPTER)
    finally:
        for k in [k for k in sys.modules if _owned(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
        for p in paths:
            sys.path.remove(str(p))
        if saved_attr is not None:
            gymserver.adapters.openrlhf = saved_attr  # type: ignore[attr-defined]
        elif hasattr(gymserver.adapters, "openrlhf"):
            delattr(gymserver.adapters, "openrlhf")


@pytest.fixture
def standin() -> Iterator[SimpleNamespace]:
    """standin installs the OpenRLHF and vLLM stand-ins and yields the modules a test drives."""
    with installed([STANDIN]) as adapter:
        yield SimpleNamespace(
            adapter=adapter,
            fakemodel=importlib.import_module("fakemodel"),
            vllm_engine=importlib.import_module("openrlhf.trainer.ray.vllm_engine"),
            samples_generator=importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator"),
            experience=importlib.import_module("openrlhf.trainer.ppo_utils.experience"),
            loss_utils=importlib.import_module("openrlhf.utils.loss_utils"),
        )


def trainer_args(n: int, logprobs: bool) -> SimpleNamespace:
    """trainer_args is the part of OpenRLHF's args the rollout reads."""
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, batch_size=1),
        algo=SimpleNamespace(advantage=SimpleNamespace(is_correction_enable=logprobs), dynamic_filtering_enable=False, dynamic_filtering_range=(0.0, 1.0)),
        vllm=SimpleNamespace(enable_sleep=False),
    )


def write_agent_func(tmp: Path, b: Backend) -> Path:
    """write_agent_func writes the agent_func file a user passes as --train.agent_func_path."""
    path = tmp / "agent_func.py"
    path.write_text(AGENT_FUNC.format(url=b.url))
    return path


@dataclass
class Rollout:
    """Rollout is one generated batch as the trainer sees it."""

    experiences: List[Any]  # one Experience per sample, in SamplesGenerator's order
    batch: Any  # Experience.concat_experiences of them (the experience maker's micro-batch)
    loss_norm: Dict[str, Any]  # _optimizer_step_loss_norm over the batch's action mask
    tools: List[str]  # the tool names envs() lists for the episodes' env
    tokenizer: Any
    llm: Any


def dataset(labels: Sequence[Any]) -> Iterator[Any]:
    """dataset is the prompt dataloader: one batch of (index, prompts, labels, images)."""
    prompts = [f"dataset prompt {i}" for i in range(len(labels))]
    return iter([(None, prompts, list(labels), [None] * len(labels))])


def tool_names(envs: List[Dict[str, Any]], env: str) -> List[str]:
    """tool_names lists the names of the tools envs() gives for env."""
    for e in envs:
        if e.get("id") == env:
            return [t["function"]["name"] for t in e.get("tools") or []]
    raise AssertionError(f"envs() does not list {env}")


def run_standin(ns: SimpleNamespace, b: Backend, agent_func: Path, labels: Sequence[Any], policy: Callable[[str], str], *,
                max_len: int, n: int = 2, logprobs: bool = False, env: Optional[str] = None) -> Rollout:
    """run_standin generates one batch through the stand-in rollout actor and samples generator."""
    tok = ns.fakemodel.ChatMLTokenizer()
    llm = ns.fakemodel.ScriptedLLM(tok, policy)

    async def main() -> Any:
        try:
            actor = ns.vllm_engine.RolloutRayActor(llm, str(agent_func))
            gen = ns.samples_generator.SamplesGenerator(SimpleNamespace(args=trainer_args(n, logprobs)), None, None, tok, [actor])
            exps, _, _ = await gen._generate_vllm(dataset(labels), len(labels), dynamic_filtering=False, max_len=max_len, n_samples_per_prompt=n)
            # Sessions must be closed by the adapter, not by the connection closing below.
            await asyncio.to_thread(wait_no_sessions, b)
            envs = await (await _shared.shared_async_client(b.url)).envs()
            return exps, envs
        finally:
            await _shared.close_shared_async()

    exps, envs = asyncio.run(main())
    batch = ns.experience.Experience.concat_experiences(exps, tok.pad_token_id)
    ns.experience.split_experience_batch(batch)  # raises when samples disagree on their info keys
    norm = ns.loss_utils._optimizer_step_loss_norm([batch.action_mask], None, 1, 1)
    return Rollout(exps, batch, norm, tool_names(envs, env or b.env), tok, llm)


def spans(exp: Any) -> List[tuple]:
    """spans lists the trained token ranges of a one-sample Experience, in sequence positions."""
    mask = exp.action_mask[0].tolist()  # position p covers sequence token p + 1
    out: List[tuple] = []
    start = None
    for p, m in enumerate(mask + [0]):
        if m and start is None:
            start = p + 1
        elif not m and start is not None:
            out.append((start, p + 1))
            start = None
    return out


def check_solved(r: Rollout, exp: Any, turns: int = 2) -> None:
    """check_solved: a finished episode with reward 1, each turn closed by exactly one <|im_end|>, tools in the prompt."""
    seq = exp.sequences[0].tolist()
    ranges = spans(exp)
    assert len(ranges) == turns
    for start, end in ranges:
        assert seq[end - 1] == IM_END, "the action ends with the model's own EOS (vLLM V1 keeps it in token_ids)"
        assert end == len(seq) or seq[end] != IM_END, "the feedback repeats the end-of-turn token"
    assert seq.count(IM_END) == seq.count(IM_START)
    prompt_text = r.tokenizer.decode(seq[: ranges[0][0]])
    assert "<tools>" in prompt_text and r.tools
    for name in r.tools:
        assert f'"name": "{name}"' in prompt_text
    assert exp.rewards.tolist() == [1.0] and exp.scores.tolist() == [1.0]
    assert exp.info["gymserver_masked"].tolist() == [0.0] and exp.info["gymserver_cut"].tolist() == [0.0]
    assert exp.info["gymserver_turns"].tolist() == [float(turns)]
    assert exp.truncated.tolist() == [False]


def check_masked(exp: Any) -> None:
    """check_masked: no trained token, reward and score 0, flagged, aligned log probs."""
    assert int(exp.action_mask.sum()) == 0
    assert exp.response_length.tolist() == [0]
    assert exp.rewards.tolist() == [0.0] and exp.scores.tolist() == [0.0]
    assert exp.info["gymserver_masked"].tolist() == [1.0]
    assert exp.truncated.tolist() == [False]
    if exp.rollout_log_probs is not None:
        assert exp.rollout_log_probs.shape == exp.action_mask.shape


def check_loss_norm(r: Rollout) -> None:
    """check_loss_norm: the loss normalizers count only the unmasked samples and their action tokens."""
    kept = [e for e in r.experiences if e.info["gymserver_masked"].tolist() == [0.0]]
    assert float(r.loss_norm["global_batch_size"]) == len(kept)
    assert float(r.loss_norm["batch_num_tokens"]) == sum(int(e.action_mask.sum()) for e in kept)


def by_label(r: Rollout, row_label: Any) -> List[Any]:
    """by_label is the samples of one dataset label."""
    return [e for e in r.experiences if e.labels == [row_label]]


def label(env: str, seed: int) -> str:
    """label is a dataset label naming an episode."""
    return json.dumps({"env": env, "seed": seed})


# --- tests -----------------------------------------------------------------


def test_no_openrlhf_no_lookalikes() -> None:
    """Without OpenRLHF the module imports, exports no trainer look-alikes, and its executor refuses to run."""
    blocked = {name: None for name in ("openrlhf", "openrlhf.utils", "openrlhf.utils.agent")}
    with installed([], blocked) as adapter:
        assert adapter.HAVE_OPENRLHF is False
        for name in ("AgentInstanceBase", "MultiTurnAgentExecutor", "AgentExecutorBase", "step"):
            assert not hasattr(adapter, name), name
        assert set(adapter.__all__) >= {"GymServerAgentInstance", "GymServerAgentExecutor", "HAVE_OPENRLHF"}
        executor = adapter.GymServerAgentExecutor()
        with pytest.raises(RuntimeError, match="OpenRLHF is not installed"):
            asyncio.run(executor.execute("p", "calculator_api", SimpleNamespace(max_tokens=None, logprobs=None), 100, None, None))


def test_installed_bases(standin: SimpleNamespace) -> None:
    """With OpenRLHF the classes subclass OpenRLHF's own bases, and a wrong instance class is refused."""
    agent = importlib.import_module("openrlhf.utils.agent")
    a = standin.adapter
    assert a.HAVE_OPENRLHF is True
    assert issubclass(a.GymServerAgentInstance, agent.AgentInstanceBase)
    assert issubclass(a.GymServerAgentExecutor, agent.MultiTurnAgentExecutor)
    assert issubclass(a.GymServerAgentExecutor, agent.AgentExecutorBase)

    class Other(agent.AgentInstanceBase):
        def __init__(self) -> None:
            pass

        async def step(self, state_dict: dict, **kwargs: Any) -> dict:
            return {}

    with pytest.raises(TypeError):
        a.GymServerAgentExecutor(Other)


def test_feedback_follows_action_tokens(standin: SimpleNamespace) -> None:
    """The feedback closes the assistant turn only when the action's tokens do not already end with <|im_end|>."""
    a, fm = standin.adapter, standin.fakemodel
    vllm = importlib.import_module("vllm")
    tok = fm.ChatMLTokenizer()
    tool_msgs = [{"role": "tool", "content": "ok"}]
    assert a.render_chatml_feedback(tool_msgs, "", False, True) == "\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert a.render_chatml_feedback(tool_msgs, "", False, False).startswith("<|im_end|>\n<|im_start|>user\n")
    assert a.render_chatml_feedback(tool_msgs, "", True, True) == ""
    assert a.render_chatml_feedback(tool_msgs, "", True, False) == "<|im_end|>"
    assert a.render_chatml_feedback([], "no tool call", False, True) == "\n<|im_start|>user\nno tool call<|im_end|>\n<|im_start|>assistant\n"

    inst = a.GymServerAgentInstance()
    inst.tokenizer = tok
    ids = tok.encode("hello")
    inst.last_output = vllm.CompletionOutput(0, "hello", ids + [IM_END], None, None, "stop")  # V1: EOS in ids, not in text
    assert inst.action_closed("hello") is True
    inst.last_output = vllm.CompletionOutput(0, "hel", ids[:3], None, None, "length")  # cut by max_tokens
    assert inst.action_closed("hel") is False


def test_episode_solved(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """Two prompts x two samples solve the task: reward 1, one <|im_end|> per turn, tool schemas in the prompt."""
    labels = [label(backend.env, 1), label(backend.env, 2)]
    r = run_standin(standin, backend, write_agent_func(tmp_path, backend), labels, solver(backend), max_len=20000)
    assert len(r.experiences) == 4
    for exp in r.experiences:
        check_solved(r, exp)
    check_loss_norm(r)
    assert r.batch.rewards.reshape(-1, 2).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    second = [p for p in r.llm.prompts if turn(p) == 2]
    assert len(second) == 4 and all("<tool_response>" in p and "<|im_end|><|im_end|>" not in p for p in second)
    wait_no_sessions(backend)


def test_budget_exhausted(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """The token budget runs out mid-answer: the episode is still evaluated and closed, and flagged truncated."""
    max_len = 12000
    rambling = "Let me think about this some more. " * 2000
    r = run_standin(standin, backend, write_agent_func(tmp_path, backend), [label(backend.env, 3)], solver(backend, rambling), max_len=max_len)
    assert len(r.experiences) == 2
    for exp in r.experiences:
        seq = exp.sequences[0].tolist()
        ranges = spans(exp)
        assert len(seq) == max_len and len(ranges) == 2
        assert ranges[-1][1] == max_len and seq[-1] != IM_END, "the last answer was cut by max_tokens"
        assert seq[ranges[0][1] - 1] == IM_END and seq[ranges[0][1]] != IM_END
        assert exp.rewards.tolist() == [1.0] and exp.scores.tolist() == [1.0], "the hidden tests' verdict on the final state"
        assert exp.truncated.tolist() == [True]
        assert exp.info["gymserver_cut"].tolist() == [1.0] and exp.info["gymserver_masked"].tolist() == [0.0]
        assert exp.info["gymserver_turns"].tolist() == [2.0]
    check_loss_norm(r)
    wait_no_sessions(backend)


def test_reset_error_is_masked(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """A failed reset yields masked samples; the rest of the batch trains normally, with aligned log probs."""
    good, bad = label(backend.env, 4), label("no_such_env", 0)
    r = run_standin(standin, backend, write_agent_func(tmp_path, backend), [good, bad], solver(backend), max_len=20000, logprobs=True)
    assert len(r.experiences) == 4
    for exp in by_label(r, good):
        check_solved(r, exp)
        assert exp.rollout_log_probs.shape == exp.action_mask.shape
    masked = by_label(r, bad)
    assert len(masked) == 2
    for exp in masked:
        check_masked(exp)
        assert exp.sequences[0].tolist() == r.tokenizer.encode(exp.prompts[0])
        assert exp.info["gymserver_turns"].tolist() == [0.0]
    check_loss_norm(r)
    assert float(r.loss_norm["global_batch_size"]) == 2
    wait_no_sessions(backend)


def test_infrastructure_failure_is_masked(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """A masked step (fake: sandbox_error) or evaluation (live: verifier_error) drops the sample from the loss."""
    if backend.kind == "fake":
        env, policy, turns = backend.env, (lambda prompt: SANDBOX_FAIL), 1
    else:
        env, policy, turns = "verifier_broken", solver(backend), 2
    r = run_standin(standin, backend, write_agent_func(tmp_path, backend), [label(env, 5)], policy, max_len=20000, env=env)
    assert len(r.experiences) == 2
    for exp in r.experiences:
        check_masked(exp)
        assert exp.info["gymserver_turns"].tolist() == [float(turns)]
    assert float(r.loss_norm["global_batch_size"]) == 0 and float(r.loss_norm["batch_num_tokens"]) == 0
    wait_no_sessions(backend)


def test_budget_exhausted_masked(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """An episode cut by the token budget whose evaluation is a masked verifier_error is masked, not truncated."""
    if backend.kind == "fake":
        pytest.skip("the fake server has no masked evaluation; verifier_broken is live only")
    rambling = "Let me think about this some more. " * 2000
    r = run_standin(standin, backend, write_agent_func(tmp_path, backend), [label("verifier_broken", 6)], solver(backend, rambling),
                    max_len=12000, env="verifier_broken")
    for exp in r.experiences:
        check_masked(exp)
        assert exp.info["gymserver_cut"].tolist() == [1.0]
    wait_no_sessions(backend)


def test_instance_needs_gymserver_executor(backend: Backend, standin: SimpleNamespace, tmp_path: Path) -> None:
    """OpenRLHF's plain MultiTurnAgentExecutor would leak sessions and duplicate <|im_end|>: the instance refuses it."""
    agent_func = tmp_path / "agent_func.py"
    agent_func.write_text(
        "from openrlhf.utils.agent import MultiTurnAgentExecutor\n"
        "from gymserver.adapters.openrlhf import GymServerAgentInstance\n\n"
        f"class AgentInstance(GymServerAgentInstance):\n    gymserver_url = {backend.url!r}\n\n"
        "class AgentExecutor(MultiTurnAgentExecutor):\n    def __init__(self):\n        super().__init__(AgentInstance)\n"
    )
    with pytest.raises(RuntimeError, match="GymServerAgentExecutor"):
        run_standin(standin, backend, agent_func, [label(backend.env, 7)], solver(backend), max_len=20000, n=1)
    wait_no_sessions(backend)


# --- twin test: OpenRLHF's real files ----------------------------------------


class _Ref:
    """_Ref is a finished Ray object ref: a value or an error."""

    def __init__(self, value: Any = None, error: Optional[BaseException] = None) -> None:
        self.value, self.error = value, error


class _Method:
    """_Method is ``handle.method``: ``.remote(...)`` runs the call to completion on the actor's loop."""

    def __init__(self, fn: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn, self.loop = fn, loop

    def remote(self, *args: Any, **kwargs: Any) -> _Ref:
        try:
            out = self.fn(*args, **kwargs)
            if asyncio.iscoroutine(out):
                out = self.loop.run_until_complete(out)
            return _Ref(out)
        except Exception as e:  # Ray keeps the error in the ref; ray.get raises it
            return _Ref(error=e)


class _ActorHandle:
    """_ActorHandle is a Ray actor handle over an in-process actor object."""

    def __init__(self, actor: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._actor, self._loop = actor, loop

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._actor, name), self._loop)


def _ray_get(ref: Any) -> Any:
    if isinstance(ref, list):
        return [_ray_get(r) for r in ref]
    if ref.error is not None:
        raise ref.error
    return ref.value


class _Progress:
    """_Progress stands in for tqdm's progress bar."""

    def __init__(self, iterable: Any = None, desc: str = "", **kwargs: Any) -> None:
        self.iterable = iterable

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass


def heavy_stubs() -> Dict[str, types.ModuleType]:
    """heavy_stubs are minimal modules for what the real files import but this machine lacks (ray, tqdm, aiohttp, transformers)."""
    def module(name: str, **attrs: Any) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not used by the rollout path")

    mods = {
        "ray": module("ray", remote=lambda cls: cls, get=_ray_get, put=lambda x: x, cancel=lambda ref: None,
                      wait=lambda refs, num_returns=1, timeout=None: (refs[:num_returns], refs[num_returns:])),
        "ray.util": module("ray.util"),
        "ray.util.placement_group": module("ray.util.placement_group", placement_group=unavailable),
        "ray.util.scheduling_strategies": module("ray.util.scheduling_strategies", PlacementGroupSchedulingStrategy=unavailable),
        "tqdm": module("tqdm", tqdm=_Progress),
        "aiohttp": module("aiohttp"),
        "transformers": module("transformers", AutoTokenizer=None),
    }
    mods["ray"].util = mods["ray.util"]
    return mods


def upstream_tree(tmp: Path) -> Path:
    """upstream_tree writes OpenRLHF's real files at the pinned commit into tmp (package inits left empty)."""
    mirror = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")
    if not mirror:
        pytest.skip("GYMSERVER_UPSTREAM_MIRROR is not set: the twin test loads OpenRLHF's real files from a git mirror")
    git_dir = Path(mirror) / UPSTREAM_REPO
    root = tmp / "upstream"
    for f in UPSTREAM_FILES:
        text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{UPSTREAM_COMMIT}:{f}"],
                              check=True, capture_output=True, text=True).stdout
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(text)
    # The real package __init__ files import the whole trainer (deepspeed, transformers models...).
    for pkg in ("openrlhf", "openrlhf/utils", "openrlhf/trainer", "openrlhf/trainer/ray", "openrlhf/trainer/ppo_utils"):
        (root / pkg / "__init__.py").write_text("")
    return root


def run_upstream(b: Backend, agent_func: Path, labels: Sequence[Any], policy: Callable[[str], str], *,
                 max_len: int, n: int = 2, logprobs: bool = False) -> Rollout:
    """run_upstream generates one batch through OpenRLHF's real RolloutRayActor, SamplesGenerator and Experience."""
    vllm_engine = importlib.import_module("openrlhf.trainer.ray.vllm_engine")
    samples_generator = importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator")
    experience = importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    loss_utils = importlib.import_module("openrlhf.utils.loss_utils")
    fakemodel = importlib.import_module("fakemodel")
    tok = fakemodel.ChatMLTokenizer()
    llm = fakemodel.ScriptedLLM(tok, policy)
    loop = asyncio.new_event_loop()
    try:
        # RolloutRayActor's async __init__ starts vLLM; with agent_func_path it sets these.
        actor = object.__new__(vllm_engine.RolloutRayActor)
        actor.executor = vllm_engine._load_agent_executor(str(agent_func))
        actor.llm = llm
        actor._mm_pad_token_ids = None
        gen = samples_generator.SamplesGenerator(SimpleNamespace(args=trainer_args(n, logprobs)), None, None, tok, [_ActorHandle(actor, loop)])
        exps, _, _ = gen._generate_vllm(dataset(labels), len(labels), dynamic_filtering=False, max_len=max_len, n_samples_per_prompt=n)
        wait_no_sessions(b)
        envs = loop.run_until_complete(_envs(b))
    finally:
        loop.run_until_complete(_shared.close_shared_async())
        loop.close()
    batch = experience.Experience.concat_experiences(exps, tok.pad_token_id)
    experience.split_experience_batch(batch)
    norm = loss_utils._optimizer_step_loss_norm([batch.action_mask], None, 1, 1)
    return Rollout(exps, batch, norm, tool_names(envs, b.env), tok, llm)


async def _envs(b: Backend) -> List[Dict[str, Any]]:
    """_envs lists the environments through the shared client of the running loop."""
    return await (await _shared.shared_async_client(b.url)).envs()


def test_twin_real_upstream(backend: Backend, tmp_path: Path) -> None:
    """The same batches through OpenRLHF v0.11.0's real agent.py, vllm_engine.py, samples_generator.py and experience.py."""
    root = upstream_tree(tmp_path)
    with installed([root, STANDIN], heavy_stubs()) as adapter:
        agent = importlib.import_module("openrlhf.utils.agent")
        assert agent.__file__.startswith(str(root)), agent.__file__
        assert adapter.HAVE_OPENRLHF and issubclass(adapter.GymServerAgentExecutor, agent.MultiTurnAgentExecutor)
        agent_func = write_agent_func(tmp_path, backend)

        good, bad = label(backend.env, 8), label("no_such_env", 0)
        r = run_upstream(backend, agent_func, [good, bad], solver(backend), max_len=20000, logprobs=True)
        assert len(r.experiences) == 4
        for exp in by_label(r, good):
            check_solved(r, exp)
        for exp in by_label(r, bad):
            check_masked(exp)
        check_loss_norm(r)
        assert float(r.loss_norm["global_batch_size"]) == 2

        rambling = "Let me think about this some more. " * 2000
        r = run_upstream(backend, agent_func, [label(backend.env, 9)], solver(backend, rambling), max_len=12000)
        for exp in r.experiences:
            assert exp.rewards.tolist() == [1.0] and exp.truncated.tolist() == [True]
            assert exp.info["gymserver_cut"].tolist() == [1.0] and exp.sequences.shape[1] == 12000
    wait_no_sessions(backend)
