"""The LlamaGym adapter: LlamaGym's Agent on RemoteEnv with a plain PyTorch PPO step.

Every test installs a stand-in ``llamagym`` package (``tests/standins/llamagym``)
under its real module names first and imports the adapter afresh, so the
"llamagym is installed" path is the one tested; the twin test does the same
with the real ``llamagym/agent.py`` from the mirror. The model is a tiny real
torch causal LM over a byte tokenizer with a Llama-2-style chat template;
where a test needs valid tool calls, the reply text is scripted while the
log-probs still come from the torch model.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional

import pytest

from conftest import HERE, SOLUTION, Backend, wait_no_sessions

torch = pytest.importorskip("torch")

ADAPTER = "gymserver.adapters.llamagym"
STANDINS = HERE / "standins" / "llamagym"
UPSTREAM_COMMIT = "92d7827bc11a53441dcd6bcb4d2ddc6daeb542e0"
MISSING = object()

EOS, PAD, VOCAB = 256, 257, 258


# --- a tiny Hugging Face-style model and tokenizer -------------------------


class Encoding(dict):
    """Encoding is the part of transformers' BatchEncoding the code under test uses."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device: Any) -> "Encoding":
        return Encoding({k: v.to(device) for k, v in self.items()})


class ByteTokenizer:
    """ByteTokenizer has one token per UTF-8 byte plus EOS and PAD, and a Llama-2-style chat template.

    Like Llama-2's, the template requires user and assistant turns to
    alternate after an optional system message, and the generation prompt
    adds nothing: the user turn ends with ``[/INST] ``.
    """

    eos_token_id = EOS
    pad_token_id = PAD

    def __call__(self, text: str, add_special_tokens: bool = True, return_tensors: Optional[str] = None) -> Encoding:
        ids = list(text.encode())
        return Encoding(input_ids=torch.tensor([ids]) if return_tensors == "pt" else ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False, clean_up_tokenization_spaces: Any = None) -> str:
        out = bytearray()
        for i in [int(x) for x in ids]:
            if i < 256:
                out.append(i)
            elif not skip_special_tokens:
                out += b"</s>" if i == EOS else b"<pad>"
        return out.decode(errors="replace")

    def batch_decode(self, sequences: Any, **kw: Any) -> List[str]:
        return [self.decode(s, **kw) for s in sequences]

    def apply_chat_template(self, messages: List[Dict[str, Any]], tokenize: bool = True, add_generation_prompt: bool = False, **kw: Any) -> Any:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        rest = messages[1:] if system is not None else messages
        text = ""
        for i, m in enumerate(rest):
            if m["role"] != ("user" if i % 2 == 0 else "assistant"):
                raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")
            if m["role"] == "user":
                content = m["content"]
                if i == 0 and system is not None:
                    content = f"<<SYS>>\n{system}\n<</SYS>>\n\n{content}"
                text += f"<s>[INST] {content} [/INST] "
            else:
                text += f"{m['content']} </s>"
        return list(text.encode()) if tokenize else text


class TinyLM(torch.nn.Module):
    """TinyLM is a real causal LM (embedding, GRU, linear head) with the Hugging Face call signature.

    ``generate`` (what upstream LlamaGym calls) returns the prompt followed
    by the next scripted reply and EOS.
    """

    def __init__(self, hidden: int = 16, script: Optional[List[str]] = None) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, VOCAB)
        self.script = list(script or [])
        self.generated = 0

    def forward(self, input_ids: Any = None, attention_mask: Any = None, output_hidden_states: bool = False, **kw: Any) -> Any:
        e = self.embed(input_ids)
        h, _ = self.gru(e)
        return SimpleNamespace(logits=self.head(h), hidden_states=(e, h) if output_hidden_states else None)

    def generate(self, inputs: Any = None, **kw: Any) -> Any:
        text = self.script[self.generated % len(self.script)]
        self.generated += 1
        reply = torch.tensor([list(text.encode()) + [EOS]], dtype=torch.long)
        return torch.cat([inputs, reply], dim=1)


def new_model(seed: int = 0, **kw: Any) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(**kw)


def tool_call(name: str, **arguments: Any) -> str:
    return "<tool_call>%s</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def solution_reply(b: Backend) -> str:
    return tool_call("write_file", filepath=b.solution_path, content=SOLUTION)


DONE = tool_call("mark_done")


# --- installing the stand-in (or the real upstream) under the real names -------


def _load_package(name: str, directory: Path) -> types.ModuleType:
    """_load_package executes directory/__init__.py as package name (its submodules load from directory)."""
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py", submodule_search_locations=[str(directory)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def fresh_adapter(modules: Dict[str, Any], package: Optional[Path] = None) -> Iterator[types.ModuleType]:
    """fresh_adapter installs modules (None blocks an import), optionally loads package as llamagym, and imports the adapter afresh.

    Everything it touched in sys.modules is restored afterwards.
    """
    names = set(modules) | {ADAPTER, "llamagym", "llamagym.agent"}
    saved = {k: sys.modules.get(k, MISSING) for k in names}
    pkg = importlib.import_module("gymserver.adapters")
    saved_attr = getattr(pkg, "llamagym", MISSING)
    try:
        for k in ("llamagym", "llamagym.agent"):
            sys.modules.pop(k, None)
        sys.modules.update(modules)
        if package is not None:
            _load_package("llamagym", package)
        sys.modules.pop(ADAPTER, None)
        yield importlib.import_module(ADAPTER)
    finally:
        for k, v in saved.items():
            if v is MISSING:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        if saved_attr is MISSING:
            if hasattr(pkg, "llamagym"):
                delattr(pkg, "llamagym")
        else:
            setattr(pkg, "llamagym", saved_attr)


@pytest.fixture
def lg() -> Iterator[types.ModuleType]:
    """lg is the adapter imported with the stand-in llamagym installed."""
    with fresh_adapter({}, package=STANDINS / "llamagym") as mod:
        assert mod.HAVE_LLAMAGYM and mod.HAVE_TORCH
        yield mod


def _driver() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("llamagym_driver_standin", STANDINS / "driver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- agents -----------------------------------------------------------------------


def agent_class(lg: types.ModuleType, script: Optional[List[str]] = None) -> type:
    """agent_class is a calculator agent on lg.Agent; with script, its replies are scripted (log-probs from the model)."""

    class CalcAgent(lg.Agent):
        replies = list(script or [])
        generated = 0
        ppo_inputs: List[Any] = []

        def get_system_prompt(self) -> str:
            return "You are a careful engineer."

        def format_observation(self, observation: Any) -> str:
            return str(observation)

        def extract_action(self, response: str) -> Any:
            if "<tool_call>" not in response:
                raise ValueError("no tool call in the reply")
            return response

        def generate(self, query_ids: Any) -> Any:
            if not self.replies:
                return super().generate(query_ids)
            text = self.replies[self.generated % len(self.replies)]
            self.generated += 1
            ids = torch.tensor(list(text.encode()) + [EOS], dtype=torch.long)
            return ids, self.response_logprobs(query_ids, ids)

        def ppo_step(self, queries: List[Any], responses: List[Any], scores: List[Any]) -> Dict[str, float]:
            self.ppo_inputs.append((list(queries), list(responses), list(scores)))
            return super().ppo_step(queries, responses, scores)

    CalcAgent.ppo_inputs = []
    return CalcAgent


def params(module: Any) -> Dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: Dict[str, Any], module: Any) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def text(ids: Any) -> str:
    return ByteTokenizer().decode(ids)


FAST_PPO = {"batch_size": 2, "mini_batch_size": 2, "ppo_epochs": 1, "learning_rate": 1e-3}


def remote_env(b: Backend, env: Optional[str] = None, **kw: Any) -> Any:
    from gymserver.gym import RemoteEnv

    return RemoteEnv(env or b.env, url=b.url, parser="hermes", **kw)


# --- episodes against both backends ------------------------------------------------------


def test_episode_trains_with_tools_in_the_prompt(lg: types.ModuleType, backend: Backend) -> None:
    script = [solution_reply(backend), DONE]
    Calc = agent_class(lg, script)
    model = new_model()
    agent = Calc(model, ByteTokenizer(), "cpu", ppo_config_dict=FAST_PPO)
    assert isinstance(agent, sys.modules["llamagym"].Agent)
    before, ref_before = params(model), params(agent.model_ref)
    env = remote_env(backend)
    try:
        summary = lg.run_episode(env, agent, seed=0)
        wait_no_sessions(backend)  # run_episode closed the session: its sandbox does not wait for the next reset
        tools = env.client.envs()
    finally:
        env.close()
    wait_no_sessions(backend)

    assert summary["reward"] == pytest.approx(1.0) and summary["terminated"] and summary["steps"] == 2
    assert summary["mask"] is False and summary["termination_reason"] == "completed"
    stats = summary["train_stats"]
    assert stats["ppo/mean_scores"] == pytest.approx(1.0 / 2.5, abs=1e-3)  # sparse: 1 / (5 messages / 2) per turn
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-6)  # the policy equals its reference before the step
    assert all(v == v for v in stats.values()), stats  # no NaN
    assert changed(before, model) and not changed(ref_before, agent.model_ref)

    (queries, responses, scores), = Calc.ppo_inputs
    assert len(queries) == len(responses) == len(scores) == 2
    assert [text(r) for r in responses] == [script[0] + " </s>", script[1] + " </s>"]
    assert all(s.dtype == torch.float16 for s in scores)
    first = text(queries[0])
    assert first.startswith("<s>[INST] <<SYS>>\nYou are a careful engineer.\n\n") and first.endswith(" [/INST] ")
    schemas = next(e["tools"] for e in tools if e["id"] == backend.env)
    assert {t["function"]["name"] for t in schemas} == {"execute_command", "write_file", "read_file", "mark_done"}
    for schema in schemas:  # the server's schemas reach the model in the system message
        assert json.dumps(schema, sort_keys=True) in first
    # The second turn's query is the first turn, its reply and the tool's answer.
    assert text(queries[1]).startswith(first + text(responses[0]))
    assert agent.current_batch == {"queries": [], "responses": [], "rewards": []}
    assert agent.current_episode_messages[0]["content"] == agent._system_message()["content"]


def test_upstream_loop_runs_unchanged(lg: types.ModuleType, backend: Backend) -> None:
    Calc = agent_class(lg, [solution_reply(backend), DONE])
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={**FAST_PPO, "batch_size": 4, "mini_batch_size": 2})
    env = remote_env(backend)
    try:
        episodes = _driver().play(agent, env, episodes=2)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert [e["total_return"] for e in episodes] == [pytest.approx(1.0)] * 2
    assert [e["message_ct"] for e in episodes] == [5, 5]
    assert "ppo/loss/total" not in episodes[0] and "ppo/loss/total" in episodes[1]  # 4 turns make the batch
    (queries, _, _), = Calc.ppo_inputs
    assert len(queries) == 4
    # Without set_tools (the upstream loop never sees info) no tool schema is in the prompt.
    assert "<tools>" not in text(queries[0])


def test_reset_error_leaves_agent_and_server_clean(lg: types.ModuleType, backend: Backend) -> None:
    from gymserver.errors import NotFound

    agent = agent_class(lg, [DONE])(new_model(), ByteTokenizer(), "cpu", ppo_config_dict=FAST_PPO)
    env = remote_env(backend, task="no-such-task")
    try:
        with pytest.raises(NotFound):
            lg.run_episode(env, agent)
    finally:
        env.close()
    wait_no_sessions(backend)
    assert agent.current_episode_messages == [{"role": "system", "content": "You are a careful engineer."}]
    assert agent.current_episode_rewards == [] and agent.current_batch["queries"] == []


def test_failed_extraction_returns_none_and_is_not_trained(lg: types.ModuleType, backend: Backend) -> None:
    script = ["I would rather think first.", solution_reply(backend), DONE]
    Calc = agent_class(lg, script)
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict=FAST_PPO)
    env = remote_env(backend)
    actions: List[Any] = []
    act = agent.act

    def recording_act(observation: Any) -> Any:
        actions.append(act(observation))
        return actions[-1]

    agent.act = recording_act  # type: ignore[method-assign]
    try:
        summary = lg.run_episode(env, agent, seed=0)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert actions[0] is None and actions[1:] == script[1:]
    assert summary["steps"] == 3 and summary["reward"] == pytest.approx(1.0)
    (queries, responses, scores), = Calc.ppo_inputs
    assert [text(r) for r in responses] == [script[1] + " </s>", script[2] + " </s>"]  # the failed reply is not trained
    first = text(queries[0])
    assert script[0] not in first
    # The server's answer to the turn without a tool call joined the dangling user message.
    assert "No tool was called" in first or "no tool call" in first.lower()
    assert first.count("[INST]") == 1
    assert float(scores[0]) == pytest.approx(1.0 / 2.5, abs=1e-3)


def test_masked_episode_is_dropped(lg: types.ModuleType, backend: Backend) -> None:
    if backend.kind == "live":
        env_id, script = "verifier_broken", [DONE]  # every evaluation is a masked verifier_error
    else:
        env_id, script = backend.env, [tool_call("execute_command", command="__sandbox_fail__"), DONE]
    Calc = agent_class(lg, script)
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={**FAST_PPO, "batch_size": 1, "mini_batch_size": 1})
    env = remote_env(backend, env=env_id)
    try:
        summary = lg.run_episode(env, agent, seed=0)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert summary["mask"] is True and summary["train_stats"] == {}
    assert summary["steps"] == len(script) and summary["terminated"]
    assert Calc.ppo_inputs == [] and agent.current_batch["queries"] == []
    assert agent.current_episode_messages == [agent._system_message()] and agent.current_episode_rewards == []


def test_max_steps_evaluates_and_spreads_the_reward(lg: types.ModuleType, backend: Backend) -> None:
    Calc = agent_class(lg, [solution_reply(backend)])
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={**FAST_PPO, "batch_size": 1, "mini_batch_size": 1})
    env = remote_env(backend)
    try:
        summary = lg.run_episode(env, agent, seed=0, max_steps=1)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert summary["steps"] == 1 and summary["truncated"] and not summary["terminated"]
    assert summary["termination_reason"] == "max_steps" and summary["reward"] == pytest.approx(1.0)
    (queries, responses, scores), = Calc.ppo_inputs
    assert len(queries) == 1 and float(scores[0]) == pytest.approx(1.0 / 1.5, abs=1e-3)  # 3 messages
    assert summary["train_stats"]["ppo/mean_scores"] == pytest.approx(1.0 / 1.5, abs=1e-3)


def test_budget_exhausted_truncates(lg: types.ModuleType, backend: Backend) -> None:
    if backend.kind == "fake":
        pytest.skip("the fake server does not enforce max_actions")
    calls = "".join(tool_call("read_file", filepath="/workspace/inventory.py") for _ in range(41))  # fix_inventory allows 40
    Calc = agent_class(lg, [calls])
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={**FAST_PPO, "batch_size": 1, "mini_batch_size": 1})
    env = remote_env(backend, env="fix_inventory")
    try:
        summary = lg.run_episode(env, agent, seed=0)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert summary["truncated"] and summary["termination_reason"] == "max_actions" and summary["steps"] == 1
    assert summary["mask"] is False and 0.0 <= summary["reward"] < 1.0
    (queries, responses, scores), = Calc.ppo_inputs
    assert float(scores[0]) == pytest.approx(summary["reward"] / 1.5, abs=1e-3)
    assert text(responses[0]) == calls + " </s>"


def test_reply_cut_by_max_new_tokens(lg: types.ModuleType, backend: Backend) -> None:
    Calc = agent_class(lg)  # no script: the tiny model samples
    gen = {"max_new_tokens": 6, "do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0}
    agent = Calc(new_model(), ByteTokenizer(), "cpu", generate_config_dict=gen, ppo_config_dict={**FAST_PPO, "batch_size": 4})
    sampled: List[Any] = []
    generate = agent.generate

    def recording_generate(query_ids: Any) -> Any:
        out = generate(query_ids)
        sampled.append(out)
        return out

    agent.generate = recording_generate  # type: ignore[method-assign]
    env = remote_env(backend)
    try:
        summary = lg.run_episode(env, agent, seed=0, max_steps=2)
    finally:
        env.close()
    wait_no_sessions(backend)

    assert summary["steps"] == 2 and summary["termination_reason"] == "max_steps" and summary["reward"] < 1.0
    assert len(sampled) == 2
    for ids, logprobs in sampled:
        assert 1 <= len(ids) <= 6 and logprobs.shape == ids.shape
        assert bool((logprobs <= 0).all())
    # Untrained byte soup has no tool call: both turns failed extraction, nothing to train on.
    assert agent.current_batch["queries"] == [] and summary["train_stats"] == {}


# --- the PPO step and the episode bookkeeping, without a server ------------------------------


def test_ppo_moves_logprob_of_rewarded_reply_up(lg: types.ModuleType) -> None:
    Calc = agent_class(lg)
    model = new_model(seed=1)
    ppo = {"batch_size": 8, "mini_batch_size": 4, "ppo_epochs": 4, "learning_rate": 3e-3, "init_kl_coef": 0.05}
    agent = Calc(model, ByteTokenizer(), "cpu", ppo_config_dict=ppo)
    query = torch.tensor(list(b"<s>[INST] yes or no? [/INST] "))
    good, bad = torch.tensor(list(b"yes") + [EOS]), torch.tensor(list(b"no") + [EOS])
    good_before = float(agent.response_logprobs(query, good).sum())
    bad_before = float(agent.response_logprobs(query, bad).sum())
    before = params(model)

    stats = agent.train_batch([query] * 8, [good, bad] * 4, [torch.tensor(1.0, dtype=torch.float16), torch.tensor(0.0, dtype=torch.float16)] * 4)

    assert changed(before, model)
    good_after = float(agent.response_logprobs(query, good).sum())
    bad_after = float(agent.response_logprobs(query, bad).sum())
    assert good_after > good_before + 0.05, (good_before, good_after)
    assert good_after - bad_after > good_before - bad_before + 0.1
    assert stats["ppo/mean_scores"] == pytest.approx(0.5) and stats["tokens/responses_len_mean"] == pytest.approx(3.5)
    assert stats["objective/kl_coef"] == pytest.approx(0.05) and agent.kl_coef < 0.05  # kl below target: coefficient shrinks
    assert agent.current_batch == {"queries": [], "responses": [], "rewards": []}
    # A second step now sees a policy that moved away from its reference.
    stats2 = agent.train_batch([query] * 8, [good, bad] * 4, [torch.tensor(1.0, dtype=torch.float16), torch.tensor(0.0, dtype=torch.float16)] * 4)
    assert stats2["objective/kl"] != pytest.approx(0.0, abs=1e-6)


def _play(agent: Any, turns: List[str], rewards: List[float]) -> None:
    for i, reply in enumerate(turns):
        agent.replies = [reply]
        agent.act(f"observation {i}")
        agent.assign_reward(rewards[i])


def test_rewards_batches_and_remainder(lg: types.ModuleType) -> None:
    Calc = agent_class(lg)
    agent = Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={"batch_size": 3, "mini_batch_size": 1, "ppo_epochs": 1})
    _play(agent, [DONE, DONE], [0.0, 1.0])
    messages = list(agent.current_episode_messages)
    queries, responses, rewards = agent.format_episode_for_ppo(messages, [0.0, 1.0])
    assert [r.dtype for r in rewards] == [torch.float16] * 2 and [float(r) for r in rewards] == [pytest.approx(0.4, abs=1e-3)] * 2
    assert [q.dtype for q in queries] == [torch.long] * 2 and text(responses[1]) == DONE + " </s>"
    _, _, dense = agent.format_episode_for_ppo(messages, [0.5, 1.0])
    assert [float(r) for r in dense] == [0.5, 1.0]
    with pytest.raises(ValueError, match="dense rewards"):
        agent.format_episode_for_ppo(messages, [0.5, 0.0, 1.0])

    assert agent.terminate_episode() == {}  # 2 turns < batch_size 3
    assert len(agent.current_batch["queries"]) == 2
    _play(agent, [DONE, DONE], [0.0, 0.0])
    stats = agent.terminate_episode()  # 4 turns: train on 3, keep 1
    assert "ppo/loss/total" in stats and len(Calc.ppo_inputs[0][0]) == 3
    assert len(agent.current_batch["queries"]) == 1 and float(agent.current_batch["rewards"][0]) == 0.0
    _play(agent, [DONE], [1.0])
    assert agent.terminate_episode(train=False) == {} and len(agent.current_batch["queries"]) == 1


def test_act_none_paths(lg: types.ModuleType) -> None:
    Calc = agent_class(lg, ["no call here"])
    agent = Calc(new_model(), ByteTokenizer(), "cpu")
    assert agent.act("first") is None
    assert agent.current_episode_messages[1:] == [{"role": "user", "content": "first"}]
    agent.replies = [DONE]
    assert agent.act("second") == DONE
    assert agent.current_episode_messages[1:] == [{"role": "user", "content": "first\n\nsecond"}, {"role": "assistant", "content": DONE}]

    class TextWorldStyle(Calc):  # upstream's text-world example returns None without raising
        def extract_action(self, response: str) -> Any:
            return None

    tw = TextWorldStyle(new_model(), ByteTokenizer(), "cpu")
    tw.replies = ["look around"]
    assert tw.act("a room") is None and tw.current_episode_messages[-1] == {"role": "assistant", "content": "look around"}


def test_generate_and_defaults(lg: types.ModuleType) -> None:
    Calc = agent_class(lg)
    agent = Calc(new_model(), ByteTokenizer(), "cpu", generate_config_dict={"generate/max_new_tokens": 5, "generate/do_sample": False})
    assert agent.ppo_config.batch_size == 16 and agent.ppo_config.mini_batch_size == 16  # upstream's default dict
    assert agent.ppo_config.learning_rate == pytest.approx(1.41e-5) and agent.ppo_config.cliprange == 0.2  # TRL 0.7.11's
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    query = torch.tensor(list(ByteTokenizer().apply_chat_template(messages, add_generation_prompt=True)))
    ids, logprobs = agent.generate(query)
    assert len(ids) <= 5 and torch.allclose(logprobs, agent.response_logprobs(query, ids), atol=1e-5)
    again, _ = agent.generate(query)
    assert torch.equal(ids, again)  # greedy
    assert agent.llm(messages) == ByteTokenizer().decode(ids, skip_special_tokens=True).strip()
    default = Calc(new_model(), ByteTokenizer(), "cpu")
    assert default.generate_config_dict == {"max_new_tokens": 32, "do_sample": True, "top_p": 0.6, "top_k": 0, "temperature": 0.9}


def test_rollout_only_agent_without_a_model(lg: types.ModuleType) -> None:
    Calc = agent_class(lg)
    agent = Calc(None, ByteTokenizer(), "cpu", ppo_config_dict={"batch_size": 1, "mini_batch_size": 1})
    agent.llm = lambda messages: DONE  # type: ignore[method-assign]
    assert agent.act("go") == DONE
    agent.assign_reward(1.0)
    with pytest.raises(RuntimeError, match="model=None"):
        agent.terminate_episode()


def test_bad_configs_are_rejected(lg: types.ModuleType) -> None:
    Calc = agent_class(lg)
    with pytest.raises(ValueError, match=r"unsupported keys \['log_with'\]"):
        Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={"batch_size": 4, "log_with": "wandb"})
    with pytest.raises(ValueError, match="must be a multiple") as e:
        Calc(new_model(), ByteTokenizer(), "cpu", ppo_config_dict={"batch_size": 6, "mini_batch_size": 4, "kl_penalty": "full"})
    assert "kl_penalty" in str(e.value)  # every problem at once
    with pytest.raises(ValueError, match="repetition_penalty"):
        Calc(new_model(), ByteTokenizer(), "cpu", generate_config_dict={"repetition_penalty": 1.1})
    agent = Calc(new_model(), ByteTokenizer(), "cpu")
    agent.replies = [DONE]
    agent.act("go")
    with pytest.raises(RuntimeError, match="episode has started"):
        agent.set_tools([{"type": "function", "function": {"name": "x"}}])


# --- the import paths -------------------------------------------------------------------------------


def test_without_llamagym_no_lookalike() -> None:
    with fresh_adapter({"llamagym": None}) as mod:
        assert mod.HAVE_LLAMAGYM is False
        bases = [c.__module__ for c in mod.Agent.__mro__]
        assert "llamagym" not in bases and "llamagym.agent" not in bases
        assert mod.Agent.__mro__[1].__name__ == "_UpstreamAgent" and not hasattr(mod, "UpstreamAgent")


def test_without_torch_rollouts_only(backend: Backend) -> None:
    with fresh_adapter({"torch": None}, package=STANDINS / "llamagym") as mod:
        assert mod.HAVE_TORCH is False

        class ApiAgent(mod.Agent):
            def get_system_prompt(self) -> str:
                return "sys"

            def format_observation(self, observation: Any) -> str:
                return str(observation)

            def extract_action(self, response: str) -> Any:
                return response

            def llm(self, messages: List[Dict[str, str]]) -> str:
                return DONE

        agent = ApiAgent(None, None, "cpu")
        env = remote_env(backend)
        try:
            summary = mod.run_episode(env, agent, seed=0, train=False)
            with pytest.raises(RuntimeError, match="needs PyTorch"):
                mod.run_episode(env, agent, seed=0)
        finally:
            env.close()
        wait_no_sessions(backend)
        assert summary["steps"] == 1 and summary["terminated"]
        with pytest.raises(RuntimeError, match="needs PyTorch"):
            agent.train_batch([], [], [])
        with pytest.raises(RuntimeError, match="needs PyTorch"):
            agent.generate([1, 2])
        assert agent.current_episode_messages == [agent._system_message()]  # the failed episode was dropped


# --- the twin: the real upstream Agent from the mirror -----------------------------------------------


def _upstream_sources(mirror: str, tmp: Path) -> Path:
    git_dir = Path(mirror) / "KhoomeiK+LlamaGym" / "repo"
    pkg = tmp / "llamagym"
    pkg.mkdir()
    for path in ("llamagym/__init__.py", "llamagym/agent.py"):
        out = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{UPSTREAM_COMMIT}:{path}"], capture_output=True, text=True, check=True)
        (tmp / path).write_text(out.stdout)
    return pkg


def _stub_trl(recorded: List[Any]) -> types.ModuleType:
    """_stub_trl stands in for the three names llamagym/agent.py imports from TRL 0.7.x (not installed here)."""
    trl = types.ModuleType("trl")

    class PPOConfig:
        def __init__(self, batch_size: int = 128, mini_batch_size: int = 128, **kw: Any) -> None:
            self.batch_size, self.mini_batch_size = batch_size, mini_batch_size

    class PPOTrainer:
        def __init__(self, config: Any, model: Any, ref_model: Any, tokenizer: Any) -> None:
            self.config = config

        def step(self, queries: List[Any], responses: List[Any], scores: List[Any]) -> Dict[str, Any]:
            recorded.append((list(queries), list(responses), list(scores)))
            return {"stub/step": len(queries)}

    def create_reference_model(model: Any) -> Any:
        ref = copy.deepcopy(model)
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref.eval()

    trl.PPOConfig, trl.PPOTrainer, trl.create_reference_model = PPOConfig, PPOTrainer, create_reference_model
    return trl


def _stub_gymnasium() -> Dict[str, types.ModuleType]:
    gym = types.ModuleType("gymnasium")
    core = types.ModuleType("gymnasium.core")
    core.ObsType = core.ActType = Any  # type: ignore[attr-defined]
    gym.core = core  # type: ignore[attr-defined]
    return {"gymnasium": gym, "gymnasium.core": core}


def test_twin_real_upstream_agent(request: pytest.FixtureRequest) -> None:
    mirror = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")
    if not mirror:
        pytest.skip("GYMSERVER_UPSTREAM_MIRROR is not set (the twin test loads llamagym/agent.py from a git mirror)")
    live = request.getfixturevalue("live_server")
    b = Backend("live", live.url)
    script = [solution_reply(b), DONE]
    recorded: List[Any] = []
    stubs: Dict[str, Any] = {"trl": _stub_trl(recorded)}
    try:
        importlib.import_module("gymnasium")
    except ImportError:
        stubs.update(_stub_gymnasium())
    ppo = {"batch_size": 2, "mini_batch_size": 2}

    with tempfile.TemporaryDirectory() as tmp, fresh_adapter(stubs, package=_upstream_sources(mirror, Path(tmp))) as mod:
        upstream = sys.modules["llamagym.agent"]
        assert mod.HAVE_LLAMAGYM and issubclass(mod.Agent, upstream.Agent)
        driver = _driver()

        Ours = agent_class(mod, script)

        class UpstreamCalc(upstream.Agent):  # the same three hooks on the real upstream class
            get_system_prompt = Ours.get_system_prompt
            format_observation = Ours.format_observation
            extract_action = Ours.extract_action

        theirs = UpstreamCalc(new_model(script=script), ByteTokenizer(), "cpu", {"max_new_tokens": 8192}, ppo)
        env = remote_env(b)
        try:
            their_stats = driver.play(theirs, env, episodes=1)
        finally:
            env.close()
        wait_no_sessions(b)

        model = new_model()
        ours = Ours(model, ByteTokenizer(), "cpu", ppo_config_dict={**ppo, "ppo_epochs": 1})
        before = params(model)
        env = remote_env(b)
        try:
            our_stats = driver.play(ours, env, episodes=1)
        finally:
            env.close()
        wait_no_sessions(b)

    assert their_stats[0]["total_return"] == pytest.approx(1.0) and their_stats[0]["stub/step"] == 2
    assert our_stats[0]["total_return"] == pytest.approx(1.0) and "ppo/loss/total" in our_stats[0]
    assert our_stats[0]["episode_messages"] == their_stats[0]["episode_messages"]
    (tq, tr, ts), = recorded
    (oq, orr, os_), = Ours.ppo_inputs
    assert [q.tolist() for q in oq] == [q.tolist() for q in tq]
    assert [r.tolist() for r in orr] == [r.tolist() for r in tr]
    assert [(s.dtype, float(s)) for s in os_] == [(s.dtype, float(s)) for s in ts]
    assert changed(before, model)
