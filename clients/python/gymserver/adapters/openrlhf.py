"""OpenRLHF adapter: gymserver episodes through OpenRLHF's agent API (``--train.agent_func_path``).

An agent_func file defines ``AgentExecutor`` (OpenRLHF loads it with
``_load_agent_executor`` and calls ``AgentExecutor()``)::

    from gymserver.adapters.openrlhf import GymServerAgentExecutor, GymServerAgentInstance

    class AgentInstance(GymServerAgentInstance):
        gymserver_url = "ws://gym:8080"

    class AgentExecutor(GymServerAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)

Each dataset row's label (``--data.label_key``) names the episode: a JSON
object ``{"env", "task", "seed", "options"}``, a dict, or a bare env id. The
row's prompt is not used: the initial observation is the server's task
prompt, rendered as ChatML with the server's tool schemas in the system
turn (Qwen/Hermes style); override
:meth:`GymServerAgentInstance.render_prompt` and
:meth:`~GymServerAgentInstance.render_feedback` for other templates. The
model's text is parsed on the server with ``parser`` (default ``hermes``).

How OpenRLHF drives it (checked against OpenRLHF v0.11.0, commit
3c3be6234e0cb353e76bb8019947db9dfe99fca7, ``openrlhf/utils/agent.py``,
``openrlhf/trainer/ray/vllm_engine.py``,
``openrlhf/trainer/ppo_utils/samples_generator.py``): for every sample
``RolloutRayActor.generate_responses`` awaits ``executor.execute(prompt,
label, sampling_params, max_length, hf_tokenizer, llm_engine, images)``;
``MultiTurnAgentExecutor.execute`` builds one instance, awaits ``reset``,
then loops ``llm_engine.generate`` (token ids in and out) and ``step``
until ``done`` or until no token budget is left (``max_length`` minus the
tokens so far), appending the action's token ids and the tokenized
``environment_feedback``. :class:`GymServerAgentExecutor` runs that very
loop and adds what it lacks:

* Token budget: when the budget runs out the upstream loop just stops
  calling ``step``. The executor then evaluates the episode (the sample's
  ``reward``/``scores`` are the hidden tests' verdict on the final state),
  closes the session and sets ``truncated`` (OpenRLHF's finish-reason-length
  flag, used by ``--reward.stop_properly_penalty_coef``). Sessions are also
  closed when generation raises.
* End of turn: vLLM V1 keeps the stop token in ``token_ids`` but leaves it
  out of ``text``. The executor shows each ``generate`` output to the
  instance, and the feedback opens with ``<|im_end|>`` only when the action
  tokens do not already end with it (a response cut by ``max_tokens``), so
  no trained sequence holds the end-of-turn token twice.
* Masked samples (reset failed, or the server marked a step or the
  evaluation as an infrastructure failure): the sample comes back with no
  action tokens (``action_ranges == []``), reward and score 0, and
  ``extra_logs["gymserver_masked"] == 1``. OpenRLHF builds ``action_mask``
  from ``action_ranges`` (``SamplesGenerator._process_response_into_experience``),
  so the sample has no loss tokens, and its loss normalizers count only
  non-empty sequences (``openrlhf/utils/loss_utils.py``,
  ``_optimizer_step_loss_norm``): it is dropped from the policy and value
  losses while the batch keeps its shape. A failed reset no longer raises
  out of ``execute`` (which failed the whole ``ray.get`` of the batch).

Limits: the masked sample's reward 0 still enters its prompt group's
baseline (``rloo``, ``reinforce_baseline``, ``group_norm``, ``dr_grpo``)
and the logged reward mean; OpenRLHF has no per-sample drop before that.
Text only: the VLM path (``images``) is passed through but not used. The
executor signature with ``images`` exists since v0.10.0; v0.9.1 to v0.9.x
take the same call without ``images`` (passed only when given), not tested.
The function-style ``step(observation, action, label)`` agent_func of
OpenRLHF v0.8.0 to v0.8.6 was removed upstream in v0.8.7 (commit
2fbe8cbc, "Support token in token out and agent loop") and is not offered
here.

Without OpenRLHF the module stays importable (``HAVE_OPENRLHF = False``), but
its classes sit on private placeholder bases and
:meth:`GymServerAgentExecutor.execute` raises.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Mapping, Optional

from ..client import AsyncSession
from ..errors import GymServerError
from ..results import MASKED_ERROR_CLASSES, StepResult
from ._shared import as_tensor, shared_async_client

__all__ = [
    "GymServerAgentInstance",
    "GymServerAgentExecutor",
    "render_chatml_prompt",
    "render_chatml_feedback",
    "parse_label",
    "HAVE_OPENRLHF",
]

log = logging.getLogger("gymserver")

try:
    from openrlhf.utils.agent import AgentInstanceBase as _AgentInstanceBase  # type: ignore[import-not-found]
    from openrlhf.utils.agent import MultiTurnAgentExecutor as _MultiTurnAgentExecutor  # type: ignore[import-not-found]

    #: HAVE_OPENRLHF reports whether OpenRLHF is installed (its agent classes are the bases here).
    HAVE_OPENRLHF = True
except ImportError:
    HAVE_OPENRLHF = False

    class _AgentInstanceBase:  # type: ignore[no-redef]
        """_AgentInstanceBase is a placeholder base used when OpenRLHF is not installed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    class _MultiTurnAgentExecutor:  # type: ignore[no-redef]
        """_MultiTurnAgentExecutor is a placeholder base used when OpenRLHF is not installed; it cannot run."""

        def __init__(self, agent_instance_cls: type) -> None:
            self.agent_instance_cls = agent_instance_cls

        async def execute(self, *args: Any, **kwargs: Any) -> dict:
            raise RuntimeError("gymserver: OpenRLHF is not installed (openrlhf.utils.agent is needed to run the agent loop)")


#: END_OF_TURN is the ChatML token that closes a turn.
END_OF_TURN = "<|im_end|>"


def parse_label(label: Any) -> Dict[str, Any]:
    """parse_label reads the episode spec from a row's label: JSON object, dict, or bare env id."""
    if isinstance(label, Mapping):
        spec = dict(label)
    elif isinstance(label, str) and label.strip().startswith("{"):
        spec = json.loads(label)
    elif isinstance(label, str) and label.strip():
        spec = {"env": label.strip()}
    else:
        raise ValueError(f"gymserver: label {label!r} does not name an env")
    if not spec.get("env"):
        raise ValueError(f"gymserver: label {label!r} has no env")
    return spec


def render_chatml_prompt(messages: List[Dict[str, Any]], tools: List[Dict[str, Any]]) -> str:
    """render_chatml_prompt renders the initial messages as ChatML with Hermes-style tool definitions."""
    parts: List[str] = []
    tool_text = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    tool_block = (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + tool_text
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    has_system = bool(messages) and messages[0].get("role") == "system"
    if not has_system and tools:
        parts.append("<|im_start|>system\n" + tool_block.lstrip() + END_OF_TURN + "\n")
    for i, m in enumerate(messages):
        content = str(m.get("content") or "")
        if i == 0 and has_system and tools:
            content += tool_block
        parts.append(f"<|im_start|>{m.get('role')}\n{content}{END_OF_TURN}\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_chatml_feedback(messages: List[Dict[str, Any]], text: str, done: bool, action_closed: bool) -> str:
    """render_chatml_feedback renders a step's tool results as the text that follows the model's action.

    ``action_closed`` says whether the action's tokens already end with
    ``<|im_end|>``; if not (the response was cut), the feedback closes the
    assistant turn first. After the last step only that closing is added.
    """
    close = "" if action_closed else END_OF_TURN
    if done:
        return close
    tool_msgs = [m for m in messages if m.get("role") == "tool"]
    body = "\n".join(f"<tool_response>\n{m.get('content') or ''}\n</tool_response>" for m in tool_msgs) if tool_msgs else text
    return f"{close}\n<|im_start|>user\n{body}{END_OF_TURN}\n<|im_start|>assistant\n"


class GymServerAgentInstance(_AgentInstanceBase):  # type: ignore[misc,valid-type]
    """GymServerAgentInstance is one OpenRLHF agent instance = one gymserver episode.

    Class attributes configure it: ``gymserver_url``/``gymserver_token``
    (default ``GYMSERVER_URL``/``GYMSERVER_TOKEN``), ``parser``,
    ``max_turns`` (the episode is evaluated after that many steps) and
    ``end_of_turn`` (the token that closes an assistant turn).

    It must be driven by :class:`GymServerAgentExecutor`, which sets
    ``tokenizer`` and, after every generation, ``last_output`` (vLLM's
    ``CompletionOutput``), and finishes the episode when the token budget
    runs out. After the episode: ``reward`` (0 when masked), ``masked``,
    ``error_class``, ``turns``, ``cut`` (ended by the token budget).
    """

    gymserver_url: Optional[str] = None
    gymserver_token: Optional[str] = None
    parser: str = "hermes"
    max_turns: int = 30
    end_of_turn: str = END_OF_TURN

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tokenizer: Any = None
        self.last_output: Any = None
        self.session: Optional[AsyncSession] = None
        self.turns = 0
        self.reward = 0.0
        self.masked = False
        self.error_class = ""
        self.ended = False
        self.cut = False

    def render_prompt(self, session: AsyncSession) -> str:
        """render_prompt turns the reset messages and tool schemas into the initial observation text."""
        return render_chatml_prompt(session.messages, session.tools)

    def render_feedback(self, new_messages: List[Dict[str, Any]], text: str, done: bool, action_closed: bool) -> str:
        """render_feedback turns a step's observation into the text appended after the action."""
        return render_chatml_feedback(new_messages, text, done, action_closed)

    def action_closed(self, action_text: str) -> bool:
        """action_closed reports whether the last action's tokens already end with ``end_of_turn``.

        vLLM V1 keeps a stop token in ``token_ids`` but not in ``text``, so
        the token ids decide; the text is the fallback when no output was seen.
        """
        out = self.last_output
        if out is None or self.tokenizer is None:
            return action_text.endswith(self.end_of_turn)
        ids = list(out.token_ids)
        return bool(ids) and self.tokenizer.decode(ids[-1:], skip_special_tokens=False) == self.end_of_turn

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """reset starts the episode named by ``states["label"]`` and returns ``{"observation": prompt_text}``.

        Server errors propagate (after being recorded in ``error_class``);
        :class:`GymServerAgentExecutor` turns them into a masked sample.
        """
        if self.tokenizer is None:
            raise RuntimeError("GymServerAgentInstance must be run by GymServerAgentExecutor (make AgentExecutor subclass it)")
        spec = parse_label(states.get("label"))
        try:
            client = await shared_async_client(type(self).gymserver_url, type(self).gymserver_token)
            self.session = await client.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"), parser=type(self).parser)
        except GymServerError as e:
            self.masked, self.error_class, self.ended = True, e.code, True
            raise
        return {"observation": self.render_prompt(self.session), "label": states.get("label")}

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """step sends ``action_text`` to the server and returns rewards, feedback and done for OpenRLHF.

        A masked step or a server error ends the episode (the sample will be
        dropped). The reward is the hidden tests' reward on the last step, else 0.
        """
        if self.session is None:
            raise RuntimeError("GymServerAgentInstance: reset() was not called")
        session = self.session
        action_text = state_dict.get("action_text") or ""
        self.turns += 1
        done, text = False, ""
        before = len(session.messages)
        try:
            res = await session.step(action_text)
            text = res.observation.text
            done = res.terminated or res.truncated
            self.reward = float(res.reward)
            if res.mask:
                self.masked, done, self.error_class = True, True, _mask_class(res)
            elif not done and self.turns >= type(self).max_turns:
                ev = await session.evaluate()
                self.reward, done = ev.reward, True
                if ev.mask:
                    self.masked, self.error_class = True, ev.error_class or "masked_evaluation"
        except GymServerError as e:
            self.masked, done, self.error_class = True, True, e.code
        if self.masked:
            self.reward = 0.0
        feedback = self.render_feedback(session.messages[before + 1 :], text, done, self.action_closed(action_text))
        if done:
            self.ended = True
            await self.close()
        return {
            "rewards": as_tensor(self.reward),
            "scores": as_tensor(self.reward),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": state_dict.get("sampling_params"),
            "extra_logs": self.extra_logs(),
        }

    async def finish(self) -> None:
        """finish ends an episode the executor stopped (token budget): it evaluates, then closes the session.

        The reward becomes the hidden tests' verdict on the final state.
        """
        if self.ended or self.session is None:
            return
        self.ended, self.cut = True, True
        try:
            ev = await self.session.evaluate()
            self.reward = ev.reward
            if ev.mask:
                self.masked, self.error_class = True, ev.error_class or "masked_evaluation"
        except GymServerError as e:
            self.masked, self.error_class = True, e.code
        if self.masked:
            self.reward = 0.0
        await self.close()

    async def close(self) -> None:
        """close closes the session if it is open; a failing close is logged, not raised."""
        if self.session is None or self.session.closed:
            return
        try:
            await self.session.close()
        except GymServerError as e:
            log.warning("gymserver: closing session %s failed: %s", self.session.id, e)

    def extra_logs(self) -> Dict[str, float]:
        """extra_logs are the per-sample values OpenRLHF logs (the same keys for every sample, as its batching needs)."""
        return {
            "gymserver_masked": 1.0 if self.masked else 0.0,
            "gymserver_cut": 1.0 if self.cut else 0.0,
            "gymserver_turns": float(self.turns),
        }


def _mask_class(res: StepResult) -> str:
    """_mask_class names the infrastructure failure of a masked step: the evaluation's or a call's error class."""
    ev = res.evaluation
    if ev is not None and ev.mask and ev.error_class:
        return ev.error_class
    for c in res.info.get("calls") or []:
        if isinstance(c, Mapping) and c.get("error_class") in MASKED_ERROR_CLASSES:
            return str(c["error_class"])
    return "masked"


class _Rollout:
    """_Rollout is one ``execute`` call of :class:`GymServerAgentExecutor`.

    It stands in for the agent class and for the engine in OpenRLHF's loop:
    it builds the episode's instance (so the executor can finish it) and
    passes every ``generate`` output to that instance.
    """

    def __init__(self, instance_cls: type, llm_engine: Any, tokenizer: Any) -> None:
        self.instance_cls = instance_cls
        self.llm_engine = llm_engine
        self.tokenizer = tokenizer
        self.instance: Optional[GymServerAgentInstance] = None

    def new_instance(self) -> GymServerAgentInstance:
        """new_instance builds the episode's instance, as ``agent_instance_cls()`` does upstream."""
        self.instance = self.instance_cls()
        self.instance.tokenizer = self.tokenizer
        return self.instance

    async def generate(self, prompt_token_ids: List[int], sampling_params: Any, **kwargs: Any) -> Any:
        """generate calls the engine and shows its output to the instance."""
        out = await self.llm_engine.generate(prompt_token_ids, sampling_params, **kwargs)
        if self.instance is not None:
            self.instance.last_output = out.outputs[0]
        return out


class GymServerAgentExecutor(_MultiTurnAgentExecutor):  # type: ignore[misc,valid-type]
    """GymServerAgentExecutor is OpenRLHF's ``MultiTurnAgentExecutor`` for gymserver episodes.

    ``execute`` runs OpenRLHF's own multi-turn loop, then finishes episodes
    the loop abandoned when the token budget ran out, closes every session,
    and turns failed resets and infrastructure failures into masked samples
    (no action tokens); see the module docstring.
    """

    def __init__(self, agent_instance_cls: type = GymServerAgentInstance) -> None:
        if not (isinstance(agent_instance_cls, type) and issubclass(agent_instance_cls, GymServerAgentInstance)):
            raise TypeError(f"GymServerAgentExecutor needs a GymServerAgentInstance subclass, got {agent_instance_cls!r}")
        super().__init__(agent_instance_cls)

    async def execute(
        self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any, images: Any = None
    ) -> dict:
        """execute runs one sample: OpenRLHF's loop, then the episode's end; it returns OpenRLHF's sample dict."""
        rollout = _Rollout(self.agent_instance_cls, llm_engine, hf_tokenizer)
        # OpenRLHF's execute builds its instance with self.agent_instance_cls();
        # a plain upstream executor per call, whose factory is the rollout,
        # lets us reach that instance once the loop is over.
        runner = _MultiTurnAgentExecutor(self.agent_instance_cls)
        runner.agent_instance_cls = rollout.new_instance
        extra = {} if images is None else {"images": images}
        try:
            out = await runner.execute(prompt, label, sampling_params, max_length, hf_tokenizer, rollout, **extra)
            assert rollout.instance is not None
            await rollout.instance.finish()
        except GymServerError as e:
            inst = rollout.instance
            if inst is None or inst.session is not None:
                raise
            log.warning("gymserver: reset for label %r failed, the sample is masked: %s", label, e)
            return self._masked_sample(inst, prompt, label, sampling_params, hf_tokenizer, images)
        finally:
            if rollout.instance is not None:
                await rollout.instance.close()
        inst = rollout.instance
        assert inst is not None
        if inst.masked:
            log.warning("gymserver: episode %s for label %r is masked (%s)", inst.session.id if inst.session else "", label, inst.error_class)
            out["action_ranges"] = []
        if inst.cut or inst.masked:
            out["reward"] = out["scores"] = inst.reward
        out["truncated"] = inst.cut and not inst.masked
        out["extra_logs"] = inst.extra_logs()
        return out

    def _masked_sample(
        self, inst: GymServerAgentInstance, prompt: Any, label: Any, sampling_params: Any, hf_tokenizer: Any, images: Any
    ) -> dict:
        """_masked_sample is the sample of a failed reset: the dataset prompt's tokens and no action."""
        ids = hf_tokenizer(text=prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()
        if not ids:
            ids = [hf_tokenizer.eos_token_id]
        return {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "reward": 0.0,
            "scores": 0.0,
            "observation_tokens": ids,
            "action_ranges": [],
            "rollout_log_probs": [0.0] * len(ids) if sampling_params.logprobs is not None else None,
            "truncated": False,
            "extra_logs": inst.extra_logs(),
        }
