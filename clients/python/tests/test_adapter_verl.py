"""The VERL adapter, driven the way VERL drives it, against both backends.

VERL is not installed here: the tests install the stand-ins of
``tests/standins/verl`` under VERL's module names (see its docstring for
the upstream files and commit they mirror) and import the adapter afresh.
The stand-in worker builds each loop from an agent-loop config file
(registry + hydra-style instantiate), runs the batch and post-processes it
as VERL does (padding, ``torch.cat`` over the batch), so the assertions
are on what the trainer sees. ``test_twin_upstream`` runs the same
episodes through VERL's real files from a git mirror when
``GYMSERVER_UPSTREAM_MIRROR`` is set.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Dict, List, Optional

import pytest

from conftest import SOLUTION, Backend, wait_no_sessions
from gymserver.adapters import _shared
from standins import verl as standins
from standins.verl.agent_loop import AgentLoopWorker, DataProto, TokenOutput
from standins.verl.config import trainer_config
from standins.verl.hf import CharProcessor, CharTokenizer

SERVER_TOOLS = ["execute_command", "mark_done", "read_file", "write_file"]
LOGPROB = -0.25


def call(name: str, **args: Any) -> str:
    """call is a hermes tool call as the model writes it."""
    return "<tool_call>%s</tool_call>" % json.dumps({"name": name, "arguments": args})


DONE = call("mark_done")


def scripts(b: Backend) -> Dict[str, List[str]]:
    """scripts are the model's turns per behaviour."""
    return {
        "solve": [call("write_file", filepath=b.solution_path, content=SOLUTION), DONE],
        "persist": [call("write_file", filepath=b.solution_path, content=SOLUTION), call("execute_command", command=f"cat {b.solution_path}"), DONE],
        "no_done": [call("write_file", filepath=b.solution_path, content=SOLUTION), "All done."],
        "sandbox_fail": [call("execute_command", command="__sandbox_fail__"), DONE],
        "ramble": ["Let me think about this. " * 400],
    }


def masked_env(b: Backend) -> str:
    """masked_env is an env whose episode is masked: verifier_broken live; on the fake, fix_inventory (the model breaks its sandbox)."""
    return "verifier_broken" if b.kind == "live" else "fix_inventory"


class ScriptedModel:
    """ScriptedModel is the rollout server behind ``server_manager.generate``: token ids in, token ids out.

    The script is picked from the conversation (``script:<name>`` in the
    prompt, else ``sandbox_fail`` for the fake fix_inventory prompt, else
    ``solve``); the turn is the number of generation prompts so far, and
    tokens already generated in this turn (a resumed, aborted generation)
    are skipped. Like VERL's vLLM server, it generates at most
    prompt_length + response_length - len(prompt_ids) tokens.
    ``abort="once"`` aborts the first half of every turn, ``"always"``
    aborts every call after a few tokens.
    """

    def __init__(self, b: Backend, tok: CharTokenizer, budget: int, abort: str = "", token_output: Any = TokenOutput) -> None:
        self.scripts = scripts(b)
        self.tok = tok
        self.budget = budget
        self.abort = abort
        self.token_output = token_output
        self.calls: List[Dict[str, Any]] = []

    def _script(self, text: str) -> List[str]:
        for name, turns in self.scripts.items():
            if f"script:{name}" in text:
                return turns
        return self.scripts["sandbox_fail" if "Fix inventory.py." in text else "solve"]

    async def generate(self, request_id: str, *, prompt_ids: List[int], sampling_params: Dict[str, Any], image_data: Any = None, video_data: Any = None) -> Any:
        text = self.tok.decode(prompt_ids)
        self.calls.append({"request_id": request_id, "prompt_len": len(prompt_ids)})
        turns = self._script(text)
        turn = text.count("<assistant>") - 1
        partial = text.rsplit("<assistant>", 1)[-1]
        target = turns[turn] if turn < len(turns) else "I am done."
        rest = target[len(partial) :] if target.startswith(partial) else ""
        stop = "completed"
        if self.abort == "always":
            rest, stop = rest[:5], "aborted"
        elif self.abort == "once" and not partial:
            rest, stop = rest[: len(rest) // 2], "aborted"
        ids = self.tok.encode(rest)[: max(0, self.budget - len(prompt_ids))]
        lps = [LOGPROB] * len(ids) if sampling_params.get("logprobs") else None
        return self.token_output(token_ids=ids, log_probs=lps, stop_reason=stop, num_preempted=0)


class RayHandle:
    """RayHandle stands for the Ray actor handle of a vLLM server: ``await handle.generate.remote(...)``."""

    def __init__(self, model: ScriptedModel) -> None:
        async def remote(*, request_id: str, prompt_ids: List[int], sampling_params: Dict[str, Any], image_data: Any = None, video_data: Any = None) -> Any:
            return await model.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)

        self.generate = SimpleNamespace(remote=remote)


def drive(make: Callable[[], Awaitable[Any]]) -> Any:
    """drive runs a coroutine on a new loop and closes the loop's shared gymserver pools."""

    async def main() -> Any:
        try:
            return await make()
        finally:
            await _shared.close_shared_async()

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def _fresh_shared_clients() -> Any:
    yield
    _shared.close_shared()


def loop_config(tmp: Path, b: Backend, **settings: Any) -> str:
    """loop_config writes an agent-loop config file with a ``gymserver`` entry (and ``gymserver_tool_agent``).

    Config files are written as JSON, which is YAML too (PyYAML is not a test dependency).
    """
    entries = [
        {"name": "gymserver", "_target_": "gymserver.adapters.verl.GymServerAgentLoop", "gymserver_url": b.url, "parser": "hermes", **settings},
        {"name": "gymserver_tool_agent", "_target_": "gymserver.adapters.verl.GymServerToolAgentLoop"},
    ]
    path = tmp / "agent_loops.yaml"
    path.write_text(json.dumps(entries))
    return str(path)


def tool_config(tmp: Path, b: Backend, schemas: Optional[Dict[str, Any]] = None) -> str:
    """tool_config writes a VERL tool config file with one GymServerTool per server tool (schemas from the server unless given)."""
    tools = []
    for name in SERVER_TOOLS:
        entry: Dict[str, Any] = {
            "class_name": "gymserver.adapters.verl.GymServerTool",
            "config": {"type": "native", "tool": name, "env": b.env, "gymserver_url": b.url},
        }
        if schemas is not None:
            entry["tool_schema"] = schemas[name]
        tools.append(entry)
    path = tmp / "tools.yaml"
    path.write_text(json.dumps({"tools": tools}))
    return str(path)


def row(i: int, agent: str, env: Optional[str] = None, prompt: str = "(the server's prompt is used)", **spec: Any) -> Dict[str, Any]:
    """row is one dataset row as VERL's RLHFDataset yields it."""
    gym = {"env": env, **spec} if env else {}
    return {
        "agent_name": agent,
        "raw_prompt": [{"role": "user", "content": prompt}],
        "extra_info": {"index": i, "gymserver": gym},
        "index": i,
        "tools_kwargs": {},
        "data_source": "gymserver",
    }


def text_of(tok: CharTokenizer, ids: Any, mask: Any = None) -> str:
    """text_of decodes a padded row (only where mask is 1, when given)."""
    ids = ids.tolist()
    if mask is not None:
        ids = [i for i, m in zip(ids, mask.tolist()) if m]
    return tok.decode(ids, skip_special_tokens=True)


def tool_names(tok: CharTokenizer) -> List[str]:
    assert tok.tools_seen, "no tool schemas reached the chat template"
    return sorted(t["function"]["name"] for t in tok.tools_seen[-1])


# --- GymServerAgentLoop -------------------------------------------------------


def test_agent_loop_batch(backend: Backend, tmp_path: Path) -> None:
    """A batch of a solved episode, a failed reset and a masked episode, as VERL's post-processing concatenates it."""
    P, R = 4096, 16384
    with standins.installed() as adapter:
        assert adapter.HAVE_VERL
        tok = CharTokenizer()
        cfg = trainer_config(prompt_length=P, response_length=R, agent_loop_config_path=loop_config(tmp_path, backend, max_turns=5))
        model = ScriptedModel(backend, tok, P + R)
        worker = AgentLoopWorker(cfg, model, tok)
        rows = [row(0, "gymserver", backend.env, seed=1), row(1, "gymserver", "no_such_env"), row(2, "gymserver", masked_env(backend))]
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows(rows)))

    b, nt = out.batch, out.non_tensor_batch
    assert b["prompts"].shape == (3, P) and b["responses"].shape == (3, R) and b["input_ids"].shape == (3, P + R)
    assert b["rollout_log_probs"].shape == (3, R)
    assert nt["gymserver_masked"].tolist() == [False, True, True]
    assert nt["gymserver_error_class"].tolist() == ["", "not_found", "verifier_error" if backend.kind == "live" else "sandbox_error"]
    assert nt["gymserver_termination"][0] == "completed"
    assert b["rm_scores"].sum(dim=1).tolist() == pytest.approx([1.0, 0.0, 0.0])
    mask = b["response_mask"]
    solve = scripts(backend)["solve"]
    # the model's tokens are trained on, the tool output is not
    assert text_of(tok, b["responses"][0], mask[0]) == "".join(solve)
    assert int(mask[0].sum()) == len("".join(solve))
    assert int(b["attention_mask"][0, P:].sum()) > int(mask[0].sum())
    assert text_of(tok, b["responses"][0]).startswith(solve[0])
    lp = b["rollout_log_probs"][0]
    assert set(lp[mask[0] == 1].tolist()) == {LOGPROB} and set(lp[mask[0] == 0].tolist()) == {0.0}
    # masked samples: dropped from every loss by an all-zero response_mask
    assert int(mask[1].sum()) == 0 and int(mask[2].sum()) == 0
    assert nt["__num_turns__"].tolist()[0] == 4
    assert text_of(tok, b["prompts"][0]).startswith("<system>")
    assert tool_names(tok) == SERVER_TOOLS
    wait_no_sessions(backend)


def test_agent_loop_processor_model(backend: Backend, tmp_path: Path) -> None:
    """With a processor (a VL model) VERL reads multi_modal_data of every sample, also one whose reset failed."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(prompt_length=256, response_length=64, agent_loop_config_path=loop_config(tmp_path, backend))
        worker = AgentLoopWorker(cfg, ScriptedModel(backend, tok, 320), tok, processor=CharProcessor(tok))
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows([row(0, "gymserver", "no_such_env"), row(1, "gymserver", "no_such_env")])))
    assert out.batch["position_ids"].shape == (2, 4, 320)
    assert out.non_tensor_batch["gymserver_masked"].tolist() == [True, True]
    assert int(out.batch["response_mask"].sum()) == 0
    wait_no_sessions(backend)


def test_agent_loop_cut_by_length(backend: Backend, tmp_path: Path) -> None:
    """A turn longer than the response budget is cut to response_length and the episode is still evaluated (not masked)."""
    P, R = 4096, 300
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(prompt_length=P, response_length=R, agent_loop_config_path=loop_config(tmp_path, backend))
        model = ScriptedModel(backend, tok, P + R)
        model.scripts["solve"] = model.scripts["ramble"]
        worker = AgentLoopWorker(cfg, model, tok)
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows([row(0, "gymserver", backend.env)])))
    b, nt = out.batch, out.non_tensor_batch
    assert nt["gymserver_masked"].tolist() == [False] and nt["gymserver_termination"].tolist() == ["response_length"]
    assert int(b["response_mask"][0].sum()) == R and int(b["attention_mask"][0, P:].sum()) == R
    assert b["rm_scores"][0, R - 1] == b["rm_scores"][0].sum()  # the reward sits on the last token
    assert len(model.calls) == 1
    wait_no_sessions(backend)


def test_agent_loop_max_turns(backend: Backend, tmp_path: Path) -> None:
    """When max_turns runs out before mark_done, the episode is evaluated as it stands."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(agent_loop_config_path=loop_config(tmp_path, backend, max_turns=1))
        model = ScriptedModel(backend, tok, 4096 + 16384)
        worker = AgentLoopWorker(cfg, model, tok)
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows([row(0, "gymserver", backend.env)])))
    assert out.non_tensor_batch["gymserver_termination"].tolist() == ["max_turns"]
    assert out.non_tensor_batch["gymserver_masked"].tolist() == [False]
    assert out.batch["rm_scores"].sum().item() == pytest.approx(1.0)  # the solution was written before the turns ran out
    assert len(model.calls) == 1
    wait_no_sessions(backend)


def test_agent_loop_prompt_too_long(backend: Backend, tmp_path: Path) -> None:
    """A prompt longer than prompt_length is masked (VERL filters over-long prompts) and cut so the batch keeps its shape."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(prompt_length=40, response_length=64, agent_loop_config_path=loop_config(tmp_path, backend))
        model = ScriptedModel(backend, tok, 104)
        worker = AgentLoopWorker(cfg, model, tok)
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows([row(0, "gymserver", backend.env), row(1, "gymserver", "no_such_env")])))
    assert out.batch["prompts"].shape == (2, 40)
    assert out.non_tensor_batch["gymserver_error_class"].tolist() == ["prompt_too_long", "not_found"]
    assert int(out.batch["response_mask"].sum()) == 0 and model.calls == []
    wait_no_sessions(backend)


def test_agent_loop_aborted_generation(backend: Backend, tmp_path: Path) -> None:
    """A generation the rollout server aborted is resumed from its partial tokens; one that keeps aborting masks the sample."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(agent_loop_config_path=loop_config(tmp_path, backend, max_resumes=2))
        once = ScriptedModel(backend, tok, 4096 + 16384, abort="once")
        out = drive(lambda: AgentLoopWorker(cfg, once, tok).generate_sequences(DataProto.from_rows([row(0, "gymserver", backend.env)])))
        always = ScriptedModel(backend, tok, 4096 + 16384, abort="always")
        out2 = drive(lambda: AgentLoopWorker(cfg, always, tok).generate_sequences(DataProto.from_rows([row(0, "gymserver", backend.env)])))
    b = out.batch
    assert out.non_tensor_batch["gymserver_masked"].tolist() == [False]
    assert b["rm_scores"].sum().item() == pytest.approx(1.0)
    assert text_of(tok, b["responses"][0], b["response_mask"][0]) == "".join(scripts(backend)["solve"])
    assert len(once.calls) == 4  # two turns, each aborted once and resumed
    assert out2.non_tensor_batch["gymserver_error_class"].tolist() == ["generation_aborted"]
    assert int(out2.batch["response_mask"].sum()) == 0 and len(always.calls) == 3
    wait_no_sessions(backend)


# --- GymServerTool in VERL's ToolAgentLoop -----------------------------------------


def server_schemas(b: Backend) -> Dict[str, Any]:
    async def get() -> Any:
        pool = await _shared.shared_async_client(b.url)
        return (await pool.envs())[0]["tools"]

    return {t["function"]["name"]: t for t in drive(get)}


def test_tool_in_verl_tool_agent(backend: Backend, tmp_path: Path) -> None:
    """VERL's own ToolAgentLoop makes a new tool instance per call: the calls of one trajectory must still share one sandbox."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(tool_config_path=tool_config(tmp_path, backend, server_schemas(backend)))
        worker = AgentLoopWorker(cfg, ScriptedModel(backend, tok, 4096 + 16384), tok)
        rows = [row(0, "tool_agent", prompt="Implement the calculator. script:persist")]
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows(rows)))
    nt = out.non_tensor_batch
    text = text_of(tok, out.batch["responses"][0])
    assert SOLUTION[:60] in text  # cat saw the file written by the previous call
    assert nt["tool_rewards"][0] == [0.0, 0.0, pytest.approx(1.0)]  # mark_done ended the episode with the tests' reward
    assert "rm_scores" not in out.batch  # plain tool_agent leaves the score to VERL's reward function
    wait_no_sessions(backend)  # the episode's end closed the session


def test_tool_agent_loop_batch(backend: Backend, tmp_path: Path) -> None:
    """GymServerToolAgentLoop: schemas from the server, sessions ended with their trajectory, masked samples dropped."""
    with standins.installed():
        tok = CharTokenizer()
        cfg = trainer_config(tool_config_path=tool_config(tmp_path, backend), agent_loop_config_path=loop_config(tmp_path, backend))
        worker = AgentLoopWorker(cfg, ScriptedModel(backend, tok, 4096 + 16384), tok)
        rows = [
            row(0, "gymserver_tool_agent", backend.env, prompt="Implement the calculator. script:solve"),
            row(1, "gymserver_tool_agent", backend.env, prompt="Implement the calculator. script:no_done"),
            row(2, "gymserver_tool_agent", masked_env(backend), prompt="Fix it. script:" + ("solve" if backend.kind == "live" else "sandbox_fail")),
            row(3, "gymserver_tool_agent", "no_such_env", prompt="Implement the calculator. script:solve"),
        ]
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows(rows)))
    b, nt = out.batch, out.non_tensor_batch
    assert tool_names(tok) == SERVER_TOOLS
    assert nt["gymserver_masked"].tolist() == [False, False, True, True]
    assert nt["gymserver_error_class"].tolist()[2:] == ["verifier_error" if backend.kind == "live" else "sandbox_error", "not_found"]
    assert nt["gymserver_termination"].tolist()[:2] == ["completed", "evaluated"]
    assert b["rm_scores"].sum(dim=1).tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert int(b["response_mask"][2].sum()) == 0 and int(b["response_mask"][3].sum()) == 0
    assert int(b["response_mask"][0].sum()) > 0
    assert b["rollout_log_probs"].shape == b["responses"].shape
    wait_no_sessions(backend)


def test_tool_direct_instance_ids(backend: Backend) -> None:
    """Called without agent_data, one instance id per trajectory: the tools share its session, release ends it."""
    with standins.installed() as adapter:
        cfg = {"gymserver_url": backend.url, "env": backend.env}

        async def main() -> Dict[str, Any]:
            write = adapter.GymServerTool(dict(cfg, tool="write_file"), None)
            read = adapter.GymServerTool(dict(cfg, tool="read_file"), None)
            iid, _ = await write.create("traj-1")
            await read.create("traj-1")
            await write.execute(iid, {"filepath": backend.solution_path, "content": SOLUTION})
            resp, reward, metrics = await read.execute(iid, {"filepath": backend.solution_path})
            got = {"text": resp.text, "reward": reward, "calc": await read.calc_reward(iid), "done": metrics["terminated"]}
            await write.release(iid)
            await read.release(iid)  # already ended: a no-op
            return got

        got = drive(main)
    assert SOLUTION[:60] in got["text"] and got["reward"] == 0.0 and not got["done"]
    assert got["calc"] == pytest.approx(1.0)
    wait_no_sessions(backend)


# --- without VERL, and against the real upstream files ----------------------------


def test_without_verl() -> None:
    """Without VERL the module imports but exports no look-alike VERL classes and cannot be constructed."""
    import importlib
    import sys

    saved = sys.modules.pop("gymserver.adapters.verl", None)
    try:
        mod = importlib.import_module("gymserver.adapters.verl")
        assert mod.HAVE_VERL is False
        for name in ("AgentLoopBase", "AgentLoopOutput", "BaseTool", "ToolResponse", "OpenAIFunctionToolSchema"):
            assert not hasattr(mod, name)
        with pytest.raises(ImportError):
            mod.GymServerTool({"tool": "write_file"}, None)
    finally:
        sys.modules.pop("gymserver.adapters.verl", None)
        if saved is not None:
            sys.modules["gymserver.adapters.verl"] = saved


MIRROR = os.environ.get("GYMSERVER_UPSTREAM_MIRROR")


@pytest.mark.skipif(not MIRROR, reason="GYMSERVER_UPSTREAM_MIRROR is not set (the directory with volcengine+verl/repo, a git mirror of VERL)")
@pytest.mark.parametrize("release", ["main-b178a3cd", "v0.7.0"])
def test_twin_upstream(release: str, live_server: Any, tmp_path: Path) -> None:
    """The batches of test_agent_loop_batch and test_tool_agent_loop_batch through VERL's real files against the live server."""
    from standins.verl import upstream

    b = Backend("live", live_server.url)
    assert MIRROR is not None
    with upstream.installed(MIRROR, upstream.COMMITS[release]) as (adapter, mods):
        assert adapter.HAVE_VERL and issubclass(adapter.GymServerAgentLoop, mods["verl.experimental.agent_loop.agent_loop"].AgentLoopBase)
        tok = CharTokenizer()
        upstream.TOKENIZER = tok
        token_output = mods["verl.workers.rollout.replica"].TokenOutput
        cfg = trainer_config(agent_loop_config_path=loop_config(tmp_path, b, max_turns=5), tool_config_path=tool_config(tmp_path, b))
        worker_cls = mods["verl.experimental.agent_loop.agent_loop"].AgentLoopWorker
        model = ScriptedModel(b, tok, 4096 + 16384, token_output=token_output)
        worker = worker_cls(cfg, [RayHandle(model)])
        rows = [
            row(0, "gymserver", b.env, seed=1),
            row(1, "gymserver", "no_such_env"),
            row(2, "gymserver", "verifier_broken"),
            row(3, "gymserver_tool_agent", b.env, prompt="Implement the calculator. script:persist"),
            row(4, "gymserver_tool_agent", "verifier_broken", prompt="Implement the calculator. script:solve"),
        ]
        out = drive(lambda: worker.generate_sequences(DataProto.from_rows(rows)))
    bt, nt = out.batch, out.non_tensor_batch
    assert bt["responses"].shape == (5, 16384) and bt["rollout_log_probs"].shape == (5, 16384)
    assert nt["gymserver_masked"].tolist() == [False, True, True, False, True]
    assert nt["gymserver_error_class"].tolist() == ["", "not_found", "verifier_error", "", "verifier_error"]
    assert bt["rm_scores"].sum(dim=1).tolist() == pytest.approx([1.0, 0.0, 0.0, 1.0, 0.0])
    assert [int(bt["response_mask"][i].sum()) == 0 for i in range(5)] == [False, True, True, False, True]
    assert SOLUTION[:60] in text_of(tok, bt["responses"][3])
    assert tool_names(tok) == SERVER_TOOLS
    wait_no_sessions(b)
