"""OpenRLHF adapter: gymserver episodes for OpenRLHF's agent API (``--agent_func_path``).

Two styles are supported.

* Class style (current OpenRLHF, ``openrlhf.utils.agent``): an agent_func
  file defines ``AgentInstance`` and ``AgentExecutor``::

      from gymserver.adapters.openrlhf import GymServerAgentInstance, GymServerAgentExecutor
      class AgentInstance(GymServerAgentInstance):
          gymserver_url = "ws://gym:8080"
      class AgentExecutor(GymServerAgentExecutor):
          def __init__(self):
              super().__init__(AgentInstance)

  OpenRLHF's ``MultiTurnAgentExecutor`` calls ``await instance.reset({"observation":
  prompt, "label": label})`` and then ``await instance.step({"observation_text",
  "action_text", "label", "sampling_params"})`` until ``done``.

* Function style (older ``agent_func``): ``step(observation, action, label,
  **kwargs)`` returning ``rewards``, ``scores``, ``next_observation``,
  ``done``, ``sampling_params``, ``extra_logs``; see :func:`step`.

The ``label`` of a row names the episode: a JSON object ``{"env", "task",
"seed", "options"}``, a dict, or a bare env id. Observations are rendered
as ChatML text (Qwen/Hermes style: tools in the system prompt, tool results
as ``<tool_response>`` blocks in a user turn); override
:meth:`GymServerAgentInstance.render_prompt` and
:meth:`~GymServerAgentInstance.render_feedback` for other templates. Model
text is parsed on the server with ``parser`` (default ``hermes``).
"""

from __future__ import annotations

import hashlib
import json
from copy import deepcopy
from typing import Any, Dict, List, Mapping, Optional

from ..client import AsyncSession
from ..errors import GymServerError
from ._shared import as_tensor, shared_async_client

__all__ = [
    "GymServerAgentInstance",
    "GymServerAgentExecutor",
    "AgentInstanceBase",
    "MultiTurnAgentExecutor",
    "render_chatml_prompt",
    "render_chatml_feedback",
    "parse_label",
    "step",
    "HAVE_OPENRLHF",
]

try:
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor  # type: ignore[import-not-found]

    #: HAVE_OPENRLHF reports whether OpenRLHF's classes are used (else the local stand-ins).
    HAVE_OPENRLHF = True
except ImportError:
    HAVE_OPENRLHF = False

    class AgentInstanceBase:  # type: ignore[no-redef]
        """AgentInstanceBase stands in for ``openrlhf.utils.agent.AgentInstanceBase``."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def reset(self, states: dict, **kwargs: Any) -> dict:
            """reset returns the initial states."""
            return states

        async def step(self, state_dict: dict, **kwargs: Any) -> dict:
            """step applies one action."""
            raise NotImplementedError

    class MultiTurnAgentExecutor:  # type: ignore[no-redef]
        """MultiTurnAgentExecutor stands in for OpenRLHF's executor: same token-in/token-out loop."""

        def __init__(self, agent_instance_cls: type) -> None:
            assert issubclass(agent_instance_cls, AgentInstanceBase)
            self.agent_instance_cls = agent_instance_cls

        async def execute(self, prompt: str, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any) -> dict:
            """execute runs one prompt to completion: reset, then generate/step until done or out of budget."""
            inst = self.agent_instance_cls()
            obs_text = (await inst.reset({"observation": prompt, "label": label}))["observation"]
            tokens = list(hf_tokenizer(obs_text, add_special_tokens=False)["input_ids"])
            action_ranges, total, scores, logs = [], 0.0, 0.0, {}
            while True:
                sampling_params.max_tokens = max_length - len(tokens)
                if sampling_params.max_tokens <= 0:
                    break
                out = await llm_engine.generate(tokens, deepcopy(sampling_params))
                act_tokens, act_text = list(out.outputs[0].token_ids), out.outputs[0].text
                action_ranges.append((len(tokens), len(tokens) + len(act_tokens)))
                res = await inst.step({"observation_text": obs_text, "action_text": act_text, "label": label, "sampling_params": sampling_params})
                total += res["rewards"].item()
                scores = res.get("scores", total)
                logs = res.get("extra_logs", {})
                fb = res["environment_feedback"]
                obs_text = obs_text + act_text + fb
                tokens = tokens + act_tokens + list(hf_tokenizer(fb, add_special_tokens=False)["input_ids"])
                if res.get("sampling_params"):
                    sampling_params = res["sampling_params"]
                if res["done"]:
                    break
            return {"prompt": prompt, "label": label, "reward": total, "scores": scores, "observation_tokens": tokens,
                    "action_ranges": action_ranges, "rollout_log_probs": None, "extra_logs": logs}


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
        parts.append("<|im_start|>system\n" + tool_block.lstrip() + "<|im_end|>\n")
    for i, m in enumerate(messages):
        content = str(m.get("content") or "")
        if i == 0 and has_system and tools:
            content += tool_block
        parts.append(f"<|im_start|>{m.get('role')}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_chatml_feedback(messages: List[Dict[str, Any]], text: str, done: bool) -> str:
    """render_chatml_feedback renders a step's tool results as the text that follows the model's action."""
    if done:
        return "<|im_end|>\n"
    tool_msgs = [m for m in messages if m.get("role") == "tool"]
    body = "\n".join(f"<tool_response>\n{m.get('content') or ''}\n</tool_response>" for m in tool_msgs) if tool_msgs else text
    return f"<|im_end|>\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"


class GymServerAgentInstance(AgentInstanceBase):  # type: ignore[misc,valid-type]
    """GymServerAgentInstance is one OpenRLHF agent instance = one gymserver episode.

    Class attributes configure it: ``gymserver_url``/``gymserver_token``
    (default ``GYMSERVER_URL``/``GYMSERVER_TOKEN``), ``parser``,
    ``max_turns``.
    """

    gymserver_url: Optional[str] = None
    gymserver_token: Optional[str] = None
    parser: str = "hermes"
    max_turns: int = 30

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session: Optional[AsyncSession] = None
        self.turns = 0
        self.masked = False

    def render_prompt(self, session: AsyncSession) -> str:
        """render_prompt turns the reset messages into the initial observation text."""
        return render_chatml_prompt(session.messages, session.tools)

    def render_feedback(self, new_messages: List[Dict[str, Any]], text: str, done: bool) -> str:
        """render_feedback turns a step's observation into the text appended after the action."""
        return render_chatml_feedback(new_messages, text, done)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """reset starts the episode named by ``states["label"]`` and returns ``{"observation": prompt_text}``."""
        spec = parse_label(states.get("label"))
        client = await shared_async_client(type(self).gymserver_url, type(self).gymserver_token)
        self.session = await client.reset(spec["env"], spec.get("task"), spec.get("seed"), spec.get("options"), parser=type(self).parser)
        self.turns, self.masked = 0, False
        return {"observation": self.render_prompt(self.session), "label": states.get("label")}

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """step sends ``action_text`` to the server and returns rewards, feedback and done for OpenRLHF."""
        if self.session is None:
            raise RuntimeError("GymServerAgentInstance: reset() was not called")
        session = self.session
        self.turns += 1
        reward, done, error_class = 0.0, False, ""
        before = len(session.messages)
        text = ""
        try:
            res = await session.step(state_dict.get("action_text") or "")
            text = res.observation.text
            done = res.terminated or res.truncated
            reward = float(res.reward)
            self.masked = self.masked or res.mask
            if not done and self.turns >= type(self).max_turns:
                ev = await session.evaluate()
                reward, done = ev.reward, True
                self.masked = self.masked or ev.mask
        except GymServerError as e:
            self.masked, done, error_class = True, True, e.code
        if self.masked:
            reward = 0.0
        feedback = self.render_feedback(session.messages[before + 1 :], text, done)
        if done:
            await session.close()
        return {
            "rewards": as_tensor(reward),
            "scores": as_tensor(reward),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": state_dict.get("sampling_params"),
            "extra_logs": {"gymserver_masked": as_tensor(1.0 if self.masked else 0.0), "gymserver_turns": as_tensor(float(self.turns))},
            "error_class": error_class,
        }


class GymServerAgentExecutor(MultiTurnAgentExecutor):  # type: ignore[misc,valid-type]
    """GymServerAgentExecutor is OpenRLHF's multi-turn executor bound to a GymServerAgentInstance class."""

    def __init__(self, agent_instance_cls: type = GymServerAgentInstance) -> None:
        super().__init__(agent_instance_cls)


# --- function style ----------------------------------------------------------

# _by_observation maps a hash of the full observation text (prompt + actions
# + feedback so far) to the episode's instance; the older agent_func API is
# stateless, so the text is the only key that follows a trajectory.
_by_observation: Dict[str, GymServerAgentInstance] = {}


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def step(observation: str, action: str, label: Any, **kwargs: Any) -> Dict[str, Any]:
    """step is the function-style agent_func entry point (older OpenRLHF).

    The first call for a prompt starts the episode named by ``label``; the
    dataset prompt should present the same task (see
    :func:`render_chatml_prompt`). Returns ``rewards``, ``scores``,
    ``next_observation`` (observation + action + feedback), ``done``,
    ``sampling_params`` and ``extra_logs``.
    """
    inst = _by_observation.pop(_key(observation), None)
    if inst is None:
        inst = GymServerAgentInstance()
        await inst.reset({"observation": observation, "label": label})
    res = await inst.step({"observation_text": observation, "action_text": action, "label": label, "sampling_params": kwargs.get("sampling_params")})
    nxt = observation + action + res["environment_feedback"]
    if not res["done"]:
        _by_observation[_key(nxt)] = inst
    return {
        "rewards": res["rewards"],
        "scores": res["scores"],
        "next_observation": nxt,
        "done": res["done"],
        "sampling_params": kwargs.get("sampling_params"),
        "extra_logs": res["extra_logs"],
    }

