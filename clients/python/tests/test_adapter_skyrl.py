"""The SkyRL adapter, driven by SkyRL's generator, against both backends.

Most tests install the stand-ins of ``tests/standins/skyrl`` (SkyRL
a9564572: ``skyrl_gym`` with ``make`` setting ``env.spec``, ``BaseTextEnv``,
the typed config and ``SkyRLGymGenerator``) under their real module names,
import the adapter afresh (its "SkyRL installed" path) and run whole
batches through ``SkyRLGymGenerator.generate`` with a scripted inference
engine, asserting what the trainer receives: per-token rewards, loss masks,
stop reasons, env metrics, and the prompt tokens the model saw.

``test_twin_upstream`` does the same with SkyRL's real files read from the
mirror named by ``GYMSERVER_UPSTREAM_MIRROR``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import gymserver.adapters
from conftest import SOLUTION, Backend, wait_no_sessions
from gymserver.adapters import _shared

STANDINS = Path(__file__).resolve().parent / "standins" / "skyrl"
ADAPTER = "gymserver.adapters.skyrl"
#: Module roots the stand-ins (and the twin test's upstream files) provide.
ROOTS = ("skyrl", "skyrl_gym", "omegaconf", "loguru", "tqdm", "pandas")

SKYRL_REPO = "NovaSky-AI+SkyRL/repo"
#: SKYRL_COMMITS are the upstream versions the twin test runs: main and the skyrl-v0.3.0 tag.
SKYRL_COMMITS = {"main": "a9564572eb8e91076be43c1bd5e4615e3de17265", "v0.3.0": "f5bc3b78dfddfb352870d5d7430cd226e5785838"}

DONE = '<tool_call>{"name": "mark_done", "arguments": {}}</tool_call>'


def solution_text(b: Backend) -> str:
    return "<tool_call>%s</tool_call>" % json.dumps({"name": "write_file", "arguments": {"filepath": b.solution_path, "content": SOLUTION}})


def command_text(cmd: str) -> str:
    return "<tool_call>%s</tool_call>" % json.dumps({"name": "execute_command", "arguments": {"command": cmd}})


# --- a toy tokenizer and inference engine ------------------------------------


class ChatMLTokenizer:
    """ChatMLTokenizer is a toy HF tokenizer: one token per character, ChatML template, two special tokens.

    It renders ``tools=`` the way Qwen templates do (into the system
    message) and records every ``apply_chat_template`` call's keyword
    arguments, so a test can check whether the generator passed tools.
    """

    IM_START, IM_END = "<|im_start|>", "<|im_end|>"
    SPECIAL = {IM_START: 1, IM_END: 2}
    eos_token = IM_END
    eos_token_id = 2
    pad_token_id = 0

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        ids: List[int] = []
        i = 0
        while i < len(text):
            for tok, tid in self.SPECIAL.items():
                if text.startswith(tok, i):
                    ids.append(tid)
                    i += len(tok)
                    break
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def decode(self, ids: List[int], skip_special_tokens: bool = False) -> str:
        names = {v: k for k, v in self.SPECIAL.items()}
        return "".join(("" if skip_special_tokens else names[i]) if i in names else chr(i) for i in ids)

    def apply_chat_template(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = False, tokenize: bool = True,
                            return_dict: bool = False, tools: Any = None, **kw: Any) -> Any:
        self.calls.append(dict(kw, tools=tools))
        msgs = [dict(m) for m in messages]
        if tools:
            block = "# Tools\n<tools>\n" + "\n".join(json.dumps(t) for t in tools) + "\n</tools>"
            if msgs and msgs[0].get("role") == "system":
                msgs[0]["content"] = str(msgs[0].get("content") or "") + "\n\n" + block
            else:
                msgs.insert(0, {"role": "system", "content": block})
        text = "".join(f"{self.IM_START}{m.get('role')}\n{m.get('content') or ''}{self.IM_END}\n" for m in msgs)
        if add_generation_prompt:
            text += f"{self.IM_START}assistant\n"
        return self.encode(text) if tokenize else text


class ScriptedEngine:
    """ScriptedEngine is an inference engine client that answers each trajectory from its script.

    ``scripts`` maps a trajectory's session id (``<uid>_<repetition>``) to
    its outputs in order; like vLLM, the response ids end with EOS and the
    text leaves it out. Asking for more turns than scripted fails the test.
    """

    def __init__(self, tok: ChatMLTokenizer, scripts: Dict[str, List[Any]]) -> None:
        self.tok = tok
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.inputs: Dict[str, List[str]] = {k: [] for k in scripts}
        self.finished: List[str] = []

    async def generate(self, engine_input: Dict[str, Any], model: Optional[str] = None) -> Dict[str, Any]:
        sid = engine_input["session_ids"][0]
        self.inputs[sid].append(self.tok.decode(engine_input["prompt_token_ids"][0]))
        script = self.scripts[sid]
        assert script, f"trajectory {sid}: the model was asked for turn {len(self.inputs[sid])}, beyond its script"
        step = script.pop(0)
        text = step() if callable(step) else step
        return {"responses": [text], "response_ids": [self.tok.encode(text) + [self.tok.eos_token_id]], "stop_reasons": ["stop"]}

    async def finish_session(self, session_id: str) -> None:
        self.finished.append(session_id)


# --- installing the stand-ins ----------------------------------------------


def _drop_modules() -> Dict[str, Any]:
    gone = {}
    for name in list(sys.modules):
        if name == ADAPTER or name.split(".")[0] in ROOTS:
            gone[name] = sys.modules.pop(name)
    return gone


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """fresh_modules removes SkyRL and the adapter from sys.modules for the test and restores them afterwards."""
    saved = _drop_modules()
    path = list(sys.path)
    attr = gymserver.adapters.__dict__.pop("skyrl", None)
    try:
        yield
    finally:
        _drop_modules()
        sys.path[:] = path
        sys.modules.update(saved)
        gymserver.adapters.__dict__.pop("skyrl", None)
        if attr is not None:
            gymserver.adapters.skyrl = attr  # type: ignore[attr-defined]


@pytest.fixture
def sk(fresh_modules: None) -> types.SimpleNamespace:
    """sk is the adapter imported with the SkyRL stand-ins installed, plus the stand-in modules the tests drive."""
    sys.path.insert(0, str(STANDINS))
    adapter = importlib.import_module(ADAPTER)
    ns = types.SimpleNamespace(
        adapter=adapter,
        skyrl_gym=importlib.import_module("skyrl_gym"),
        base_text_env=importlib.import_module("skyrl_gym.envs.base_text_env"),
        config=importlib.import_module("skyrl.train.config"),
        gen=importlib.import_module("skyrl.train.generators.skyrl_gym_generator"),
        utils=importlib.import_module("skyrl.train.generators.utils"),
    )
    assert str(STANDINS) in str(ns.skyrl_gym.__file__)
    return ns


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    _shared.close_shared()


# --- running a batch through the generator -----------------------------------


def build_config(sk: Any, backend: Backend, gymserver: Optional[Dict[str, Any]] = None, **generator: Any) -> Any:
    """build_config is the typed config a user would pass on the command line, built through the adapter's config class.

    ``generator`` overrides ``generator.*``; ``gymserver`` overrides ``environment.skyrl_gym.gymserver.*``.
    """
    cfg_cls = sk.adapter.train_config_class()
    gen = {"max_turns": 5, "max_input_length": 10**6, "n_samples_per_prompt": 1}
    gen.update(generator)
    env = {"url": backend.url, "max_turns": 30}
    env.update(gymserver or {})
    return sk.config.build_nested_dataclass(
        cfg_cls,
        {"generator": gen, "environment": {"env_class": "gymserver", "skyrl_gym": {"max_env_workers": 4, "gymserver": env}}},
    )


def row(uid: str, **episode: Any) -> Dict[str, Any]:
    """row is one dataset row as SkyRL's PromptDataset yields it: the episode in extra_info.gymserver."""
    return {
        "prompt": [{"role": "user", "content": "dataset prompt"}],
        "env_class": "gymserver",
        "env_extras": {"data_source": "gymserver", "extra_info": {"gymserver": episode}},
        "uid": uid,
    }


def run_batch(sk: Any, cfg: Any, rows: List[Dict[str, Any]], scripts: Dict[str, List[Any]], generator_cls: Any = None) -> types.SimpleNamespace:
    """run_batch registers the env, builds the generator as BasePPOExp.get_generator does and generates one batch."""
    sk.adapter.register_env()
    tok = ChatMLTokenizer()
    engine = ScriptedEngine(tok, scripts)
    cls = generator_cls or sk.adapter.GymServerGenerator
    generator = cls(generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym, inference_engine_client=engine, tokenizer=tok)
    batch, _ = sk.utils.prepare_generator_input(rows, cfg.generator.n_samples_per_prompt, None, cfg.environment.env_class, "train", 0)
    out = asyncio.run(generator.generate(batch))
    return types.SimpleNamespace(out=out, tok=tok, engine=engine, batch=batch)


def prompt_tools(prompt: str) -> List[Dict[str, Any]]:
    """prompt_tools parses the tool schemas out of the <tools> block of a rendered prompt (one JSON object per line)."""
    assert prompt.count("<tools>\n") == 1, "the prompt has no single <tools> block"
    block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return [json.loads(line) for line in block.splitlines()]


def prompt_length(sk: Any, backend: Backend, episode: Dict[str, Any]) -> int:
    """prompt_length is about the token length of an episode's first prompt (from one extra session, closed unevaluated)."""
    session = _shared.shared_client(backend.url).reset(episode["env"], seed=episode.get("seed"))
    try:
        chat = [dict(m) for m in session.messages]
        tools = sk.adapter.tool_instructions(session.tools, "hermes")
    finally:
        session.close()
    return len(ChatMLTokenizer().apply_chat_template(chat, add_generation_prompt=True)) + len(tools) + 2


# --- tests ---------------------------------------------------------------------


def test_without_skyrl_no_lookalikes(fresh_modules: None) -> None:
    adapter = importlib.import_module(ADAPTER)
    assert adapter.HAVE_SKYRL is False and adapter.HAVE_SKYRL_TRAIN is False
    assert not hasattr(adapter, "BaseTextEnv") and not hasattr(adapter, "BaseTextEnvStepOutput")
    assert [c.__name__ for c in adapter.GymServerTextEnv.__mro__] == ["GymServerTextEnv", "_TextEnvBase", "object"]
    with pytest.raises(ImportError):
        adapter.GymServerGenerator()
    with pytest.raises(ImportError):
        adapter.train_config_class()


def test_installed_path_and_typed_config(sk: Any) -> None:
    assert sk.adapter.HAVE_SKYRL and sk.adapter.HAVE_SKYRL_TRAIN
    assert issubclass(sk.adapter.GymServerTextEnv, sk.base_text_env.BaseTextEnv)
    assert issubclass(sk.adapter.GymServerGenerator, sk.gen.SkyRLGymGenerator)
    # SkyRL's stock config rejects an env section it does not declare ...
    with pytest.raises(ValueError, match="Invalid fields"):
        sk.config.build_nested_dataclass(sk.config.SkyRLTrainConfig, {"environment": {"skyrl_gym": {"gymserver": {"url": "ws://x"}}}})
    # ... the adapter's config class declares it, typed.
    cfg = sk.config.build_nested_dataclass(
        sk.adapter.train_config_class(), {"environment": {"skyrl_gym": {"max_env_workers": 8, "gymserver": {"url": "ws://x", "parser": "json"}}}}
    )
    gs = getattr(cfg.environment.skyrl_gym, "gymserver")
    assert isinstance(gs, sk.adapter.GymServerEnvConfig) and gs.url == "ws://x" and gs.parser == "json"
    assert cfg.environment.skyrl_gym.max_env_workers == 8 and cfg.generator.max_input_length == 512
    # skyrl_gym.make sets env.spec after construction; the env keeps its own state elsewhere.
    sk.adapter.register_env()
    env = sk.skyrl_gym.make("gymserver", env_config=gs, extras={"gymserver": {"env": "calculator_api", "task": "t1"}, "max_turns": 3})
    assert isinstance(env.spec, sk.skyrl_gym.envs.registration.EnvSpec) and env.spec.id == "gymserver"
    assert env.episode == {"env": "calculator_api", "task": "t1"} and env.max_turns == 3 and env.config.parser == "json"


def test_episode_tools_reach_model(sk: Any, backend: Backend) -> None:
    cfg = build_config(sk, backend)
    r = run_batch(sk, cfg, [row("0", env=backend.env, seed=2)], {"0_0": [solution_text(backend), DONE]})
    out = r.out
    assert out["stop_reasons"] == ["stop"]
    rewards, mask, resp = out["rewards"][0], out["loss_masks"][0], out["response_ids"][0]
    assert len(rewards) == len(mask) == len(resp)
    assert rewards[-1] == pytest.approx(1.0) and sum(rewards) == pytest.approx(1.0)
    # both generated turns are trained on, the observation in between is not
    text = r.tok.decode(resp)
    first, second = solution_text(backend), DONE
    assert text.startswith(first) and text.endswith(second + r.tok.IM_END)
    assert mask[: len(first)] == [1] * len(first) and mask[-1] == 1
    assert 0 in mask and mask.count(1) == len(first) + 1 + len(second) + 1
    # the model saw the server's prompt and every tool schema, although the generator templates without tools
    assert all(c["tools"] is None for c in r.tok.calls)
    seen = r.engine.inputs["0_0"][0]
    envs = {e["id"]: e for e in _shared.shared_client(backend.url).envs()}
    assert prompt_tools(seen) == envs[backend.env]["tools"]
    assert "<tool_call>" in seen and "dataset prompt" not in seen
    assert out["env_metrics"][0]["gymserver_reward"] == pytest.approx(1.0) and out["env_metrics"][0]["gymserver_masked"] == 0.0
    assert out["rollout_metrics"]["environment/gymserver_reward"] == pytest.approx(1.0)
    assert r.engine.finished == ["0_0"]
    wait_no_sessions(backend)


def test_max_turns_from_extras(sk: Any, backend: Backend) -> None:
    # generator.max_turns reaches the env only through extras["max_turns"]; env_config says 30.
    cfg = build_config(sk, backend, max_turns=2, gymserver={"observation_role": "tool"})
    r = run_batch(sk, cfg, [row("0", env=backend.env, seed=3)], {"0_0": [solution_text(backend), command_text("echo hi")]})
    assert len(r.engine.inputs["0_0"]) == 2
    # observation_role=tool: the write_file result came back as a tool message
    second = r.engine.inputs["0_0"][1]
    assert second.count("<|im_start|>tool\n") == 1 and second.count("<|im_start|>user\n") == 1
    rewards = r.out["rewards"][0]
    assert rewards[-1] == pytest.approx(1.0) and sum(rewards) == pytest.approx(1.0)
    assert r.out["stop_reasons"] == ["stop"] and r.out["env_metrics"][0]["gymserver_turns"] == 2.0
    assert r.out["env_metrics"][0]["gymserver_cut"] == 0.0
    wait_no_sessions(backend)


def test_cut_by_max_input_length(sk: Any, backend: Backend) -> None:
    episode = {"env": backend.env, "seed": 4}
    limit = prompt_length(sk, backend, episode) + len(solution_text(backend)) // 2
    cfg = build_config(sk, backend, max_input_length=limit)
    r = run_batch(sk, cfg, [row("0", **episode)], {"0_0": [solution_text(backend)]})
    out = r.out
    assert out["stop_reasons"] == ["length"] and len(r.engine.inputs["0_0"]) == 1
    # the env evaluated the episode before closing it, and the reward reached the last response token
    rewards, mask = out["rewards"][0], out["loss_masks"][0]
    assert rewards[-1] == pytest.approx(1.0) and sum(rewards) == pytest.approx(1.0)
    assert mask[-1] == 1 and len(mask) == len(solution_text(backend)) + 1
    assert out["env_metrics"][0]["gymserver_cut"] == 1.0 and out["env_metrics"][0]["gymserver_reward"] == pytest.approx(1.0)
    if backend.kind == "fake":
        (s,) = [s for s in backend.extra["fake"].sessions.values() if s.ended == "evaluated"][-1:]
        assert s.closed and s.evaluation["reward"] == 1.0
    wait_no_sessions(backend)


def test_cut_by_max_input_length_stock_generator(sk: Any, backend: Backend) -> None:
    # Without GymServerGenerator the hidden tests still run before close, but their reward only reaches the metrics.
    episode = {"env": backend.env, "seed": 4}
    limit = prompt_length(sk, backend, episode) + len(solution_text(backend)) // 2
    cfg = build_config(sk, backend, max_input_length=limit)
    r = run_batch(sk, cfg, [row("0", **episode)], {"0_0": [solution_text(backend)]}, generator_cls=sk.gen.SkyRLGymGenerator)
    assert r.out["stop_reasons"] == ["length"] and sum(r.out["rewards"][0]) == 0.0
    assert r.out["rollout_metrics"]["environment/gymserver_reward"] == pytest.approx(1.0)
    assert r.out["rollout_metrics"]["environment/gymserver_cut"] == 1.0
    wait_no_sessions(backend)


def masked_episode(backend: Backend) -> Dict[str, Any]:
    """masked_episode is an episode whose first turn is an infrastructure failure on this backend, with its script."""
    if backend.kind == "fake":
        return {"episode": {"env": backend.env, "seed": 5}, "script": [command_text("__sandbox_fail__")]}
    return {"episode": {"env": "verifier_broken", "seed": 5}, "script": [DONE]}


def test_masked_sample_dropped(sk: Any, backend: Backend) -> None:
    m = masked_episode(backend)
    cfg = build_config(sk, backend)
    rows = [row("0", **m["episode"]), row("1", env=backend.env, seed=6)]
    r = run_batch(sk, cfg, rows, {"0_0": m["script"], "1_0": [solution_text(backend), DONE]})
    out = r.out
    # the masked sample: every loss-mask entry 0 (no gradient), reward 0, reported in the metrics
    assert len(out["loss_masks"][0]) > 0 and set(out["loss_masks"][0]) == {0}
    assert set(out["rewards"][0]) == {0.0}
    assert out["env_metrics"][0]["gymserver_masked"] == 1.0
    # the other sample of the batch is untouched
    assert out["rewards"][1][-1] == pytest.approx(1.0) and 1 in out["loss_masks"][1]
    assert out["rollout_metrics"]["environment/gymserver_masked"] == pytest.approx(0.5)
    wait_no_sessions(backend)


def test_masked_sample_step_wise(sk: Any, backend: Backend) -> None:
    m = masked_episode(backend)
    cfg = build_config(sk, backend, step_wise_trajectories=True)
    r = run_batch(sk, cfg, [row("0", **m["episode"])], {"0_0": [command_text("echo one")] + m["script"]})
    out = r.out
    assert out["is_last_step"] == [False, True]
    for mask, rewards in zip(out["loss_masks"], out["rewards"]):
        assert mask and set(mask) == {0} and set(rewards) == {0.0}
    wait_no_sessions(backend)


def test_cut_by_length_step_wise(sk: Any, backend: Backend) -> None:
    # Step-wise, the length check sees the prompt of the previous turn: the cut comes after turn 2.
    episode = {"env": backend.env, "seed": 7}
    limit = prompt_length(sk, backend, episode) + len(solution_text(backend)) // 2
    cfg = build_config(sk, backend, max_input_length=limit, step_wise_trajectories=True)
    r = run_batch(sk, cfg, [row("0", **episode)], {"0_0": [solution_text(backend), command_text("echo two")]})
    out = r.out
    assert out["is_last_step"] == [False, True] and out["stop_reasons"] == ["stop", "stop"]
    last_rewards, last_mask = out["rewards"][1], out["loss_masks"][1]
    ones = [i for i, v in enumerate(last_mask) if v]
    assert last_rewards[ones[-1]] == pytest.approx(1.0) and sum(last_rewards) == pytest.approx(1.0)
    # step-wise, a step's env_metrics are filled only when the env said done; the cut shows in the reward
    assert sum(out["rewards"][0]) == 0.0 and out["env_metrics"][1] == {}
    wait_no_sessions(backend)


def test_reset_error_does_not_break_batch(sk: Any, backend: Backend) -> None:
    cfg = build_config(sk, backend)
    rows = [row("0", env="no_such_env"), row("1", env=backend.env, seed=8)]
    r = run_batch(sk, cfg, rows, {"0_0": ["whatever the model says"], "1_0": [solution_text(backend), DONE]})
    out = r.out
    # the failed episode: one turn on the dataset prompt, then dropped
    assert "dataset prompt" in r.engine.inputs["0_0"][0]
    assert set(out["loss_masks"][0]) == {0} and set(out["rewards"][0]) == {0.0}
    assert out["env_metrics"][0]["gymserver_masked"] == 1.0
    assert out["rewards"][1][-1] == pytest.approx(1.0)
    assert sorted(r.engine.finished) == ["0_0", "1_0"]
    wait_no_sessions(backend)


def test_connection_lost_mid_episode(sk: Any, backend: Backend) -> None:
    def drop_connection() -> str:
        _shared.close_shared()  # the env's next request fails with ConnectionLost
        return DONE

    cfg = build_config(sk, backend)
    r = run_batch(sk, cfg, [row("0", env=backend.env, seed=9)], {"0_0": [command_text("echo one"), drop_connection]})
    out = r.out
    assert out["stop_reasons"] == ["stop"] and set(out["loss_masks"][0]) == {0} and set(out["rewards"][0]) == {0.0}
    assert out["env_metrics"][0]["gymserver_masked"] == 1.0
    wait_no_sessions(backend)


# --- twin test against SkyRL's real files ---------------------------------------------------


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _install_upstream(mirror: Path, commit: str, dest: Path) -> None:
    """_install_upstream checks SkyRL's real files at commit out of the mirror into dest and imports them under their real names.

    Real: the whole ``skyrl_gym`` package; ``skyrl/train/config/config.py``,
    ``skyrl/train/generators/{base,utils,skyrl_gym_generator}.py``,
    ``skyrl/backends/skyrl_train/inference_servers/base.py`` and (main
    only) ``skyrl/backends/skyrl_train/utils/routed_experts.py``. Stubbed: the
    third-party modules missing here (omegaconf, loguru, tqdm, pandas) and
    the package ``__init__`` files of ``skyrl`` that pull in the rest of
    the trainer (Ray, vLLM, the VLM generator).
    """
    git_dir = mirror / SKYRL_REPO
    names = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit], capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = [n for n in names if n.startswith("skyrl-gym/skyrl_gym/") and n.endswith(".py")]
    wanted += [
        "skyrl/train/config/config.py",
        "skyrl/train/generators/base.py",
        "skyrl/train/generators/utils.py",
        "skyrl/train/generators/skyrl_gym_generator.py",
        "skyrl/backends/skyrl_train/inference_servers/base.py",
    ]
    if "skyrl/backends/skyrl_train/utils/routed_experts.py" in names:  # main only; v0.3.0 has no such module
        wanted.append("skyrl/backends/skyrl_train/utils/routed_experts.py")
    for n in wanted:
        blob = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{n}"], capture_output=True, check=True).stdout
        out = dest / n.replace("skyrl-gym/", "", 1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
    # empty package __init__ files for skyrl (upstream's pull in the whole trainer)
    for pkg in ["skyrl", "skyrl/train", "skyrl/train/config", "skyrl/train/generators", "skyrl/backends",
                "skyrl/backends/skyrl_train", "skyrl/backends/skyrl_train/inference_servers", "skyrl/backends/skyrl_train/utils"]:
        (dest / pkg).mkdir(parents=True, exist_ok=True)
        (dest / pkg / "__init__.py").write_text('"""Empty package for the twin test."""\n')

    class DictConfig(dict):
        """DictConfig stands in for omegaconf.DictConfig (only named in type hints here)."""

    class _Logger:
        def __getattr__(self, name: str) -> Callable[..., None]:
            return lambda *a, **k: None

    class _Tqdm:
        @staticmethod
        async def gather(*aws: Any, **kw: Any) -> List[Any]:
            return list(await asyncio.gather(*aws))

    _stub("omegaconf", DictConfig=DictConfig, OmegaConf=type("OmegaConf", (), {}))
    _stub("loguru", logger=_Logger())
    _stub("tqdm")
    _stub("tqdm.asyncio", tqdm=_Tqdm)
    _stub("pandas")
    sys.path.insert(0, str(dest))
    config = importlib.import_module("skyrl.train.config.config")
    pkg = sys.modules["skyrl.train.config"]
    for k, v in vars(config).items():
        if not k.startswith("__"):
            setattr(pkg, k, v)


@pytest.fixture(params=sorted(SKYRL_COMMITS))
def upstream(request: pytest.FixtureRequest, fresh_modules: None, tmp_path: Path) -> types.SimpleNamespace:
    """upstream is the adapter imported with SkyRL's real files (from GYMSERVER_UPSTREAM_MIRROR) installed, at each pinned commit."""
    mirror = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")
    if not mirror:
        pytest.skip("GYMSERVER_UPSTREAM_MIRROR is not set (it names the directory holding the SkyRL mirror)")
    if not (Path(mirror) / SKYRL_REPO).exists():
        pytest.skip(f"no SkyRL mirror at {Path(mirror) / SKYRL_REPO}")
    _install_upstream(Path(mirror), SKYRL_COMMITS[request.param], tmp_path)
    adapter = importlib.import_module(ADAPTER)
    ns = types.SimpleNamespace(
        adapter=adapter,
        skyrl_gym=importlib.import_module("skyrl_gym"),
        base_text_env=importlib.import_module("skyrl_gym.envs.base_text_env"),
        config=importlib.import_module("skyrl.train.config"),
        gen=importlib.import_module("skyrl.train.generators.skyrl_gym_generator"),
        utils=importlib.import_module("skyrl.train.generators.utils"),
    )
    assert str(tmp_path) in str(ns.gen.__file__) and str(tmp_path) in str(ns.skyrl_gym.__file__)
    return ns


@pytest.mark.parametrize("step_wise", [False, True], ids=["trajectory", "step_wise"])
def test_twin_upstream(upstream: Any, backend: Backend, step_wise: bool) -> None:
    """The solved, length-cut and masked episodes through SkyRL's real skyrl_gym and SkyRLGymGenerator."""
    sk = upstream
    assert sk.adapter.HAVE_SKYRL and sk.adapter.HAVE_SKYRL_TRAIN
    assert issubclass(sk.adapter.GymServerGenerator, sk.gen.SkyRLGymGenerator)
    assert issubclass(sk.adapter.GymServerTextEnv, sk.base_text_env.BaseTextEnv)
    # the real typed config: strict about unknown keys, accepting the adapter's env section
    with pytest.raises(ValueError, match="Invalid fields"):
        sk.config.build_nested_dataclass(sk.config.SkyRLGymConfig, {"gymserver": {"url": backend.url}})
    env_field = {f.name: f.type for f in dataclasses.fields(sk.adapter.train_config_class())}["environment"]
    gym_field = {f.name: f.type for f in dataclasses.fields(env_field)}["skyrl_gym"]
    gym_cfg = sk.config.build_nested_dataclass(gym_field, {"max_env_workers": 4, "gymserver": {"url": backend.url, "max_turns": 30}})
    sk.adapter.register_env()
    m = masked_episode(backend)
    cut = {"env": backend.env, "seed": 11}
    limit = prompt_length(sk, backend, cut) + len(solution_text(backend)) // 2
    gen_cfg = sk.config.GeneratorConfig(max_turns=5, max_input_length=limit, n_samples_per_prompt=1, step_wise_trajectories=step_wise)
    rows = [
        {"prompt": [{"role": "user", "content": "p"}], "env_class": "gymserver", "env_extras": {"gymserver": {"env": backend.env, "seed": 10}}, "uid": "0"},
        {"prompt": [{"role": "user", "content": "p"}], "env_class": "gymserver", "env_extras": {"gymserver": cut}, "uid": "1"},
        {"prompt": [{"role": "user", "content": "p"}], "env_class": "gymserver", "env_extras": {"gymserver": m["episode"]}, "uid": "2"},
    ]
    # Trajectory 0 writes and finishes in one turn; 1 is cut by length; 2 fails on infrastructure.
    solve_and_done = solution_text(backend).replace("</tool_call>", "</tool_call>" + DONE)
    scripts = {"0_0": [solve_and_done], "1_0": [solution_text(backend), command_text("echo two")], "2_0": list(m["script"])}
    tok = ChatMLTokenizer()
    engine = ScriptedEngine(tok, scripts)
    generator = sk.adapter.GymServerGenerator(generator_cfg=gen_cfg, skyrl_gym_cfg=gym_cfg, inference_engine_client=engine, tokenizer=tok)
    batch, _ = sk.utils.prepare_generator_input(rows, 1, None, "gymserver", "train", 0)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    last = {0: 0, 1: 1, 2: 2}
    if step_wise:
        # rows 0 and 2 have one step each, row 1 two (the step-wise length check sees the previous prompt)
        assert out["is_last_step"] == [True, False, True, True]
        last = {0: 0, 1: 2, 2: 3}
    assert out["rewards"][last[0]][-1] == pytest.approx(1.0) and sum(out["rewards"][last[0]]) == pytest.approx(1.0)
    cut_rewards, cut_mask = out["rewards"][last[1]], out["loss_masks"][last[1]]
    assert sum(cut_rewards) == pytest.approx(1.0) and 1 in cut_mask
    assert cut_rewards[max(i for i, v in enumerate(cut_mask) if v)] == pytest.approx(1.0)
    assert set(out["loss_masks"][last[2]]) == {0} and set(out["rewards"][last[2]]) == {0.0}
    assert out["env_metrics"][last[2]]["gymserver_masked"] == 1.0
    assert prompt_tools(engine.inputs["0_0"][0]) and all(c["tools"] is None for c in tok.calls)
    if not step_wise:
        assert out["stop_reasons"] == ["stop", "length", "stop"] and out["env_metrics"][1]["gymserver_cut"] == 1.0
    wait_no_sessions(backend)
