"""Stand-in for ``openrlhf.utils.agent`` (OpenRLHF v0.11.0, commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7).

Same classes, signatures and call order as upstream's
``AgentExecutorBase``, ``AgentInstanceBase`` and ``MultiTurnAgentExecutor``:

1. ``agent_instance_cls()`` once per sample, then
   ``await instance.reset({"observation": prompt, "label": label})``.
2. The observation text is tokenized with
   ``hf_tokenizer(text=..., add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()``
   and cut from the left to ``max_length - (sampling_params.max_tokens or 1)``.
3. Loop: ``sampling_params.max_tokens = max_length - len(tokens)``; stop
   when it is <= 0 (no call to the instance); otherwise
   ``await llm_engine.generate(tokens, deepcopy(sampling_params), multi_modal_data=None)``,
   record the action range over ``outputs[0].token_ids`` (whatever vLLM
   returns, EOS included), ``await instance.step({"observation_text",
   "action_text", "label", "sampling_params"})``, add ``rewards.item()``
   to the total, keep the last ``scores`` (default: the total) and
   ``extra_logs``, append the action ids and the tokenized
   ``environment_feedback``, append rollout log probs (0.0 for feedback),
   take the step's ``sampling_params`` if truthy, stop on ``done``.
4. Return ``{prompt, label, images, mm_train_inputs, reward, scores,
   observation_tokens, action_ranges, rollout_log_probs, extra_logs}``.

Exceptions from reset, step or generate propagate out of ``execute``.
The VLM branches (images) are not mirrored.
"""

from abc import ABC, abstractmethod
from copy import deepcopy


class AgentExecutorBase(ABC):
    """AgentExecutorBase is the interface OpenRLHF's rollout actor calls."""

    @abstractmethod
    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        """execute produces one sample dict."""
        raise NotImplementedError


class AgentInstanceBase(ABC):
    """AgentInstanceBase is one environment instance; subclasses implement ``__init__`` and ``step``."""

    @abstractmethod
    def __init__(self, *args, **kwargs):
        pass

    async def reset(self, states: dict, **kwargs):
        """reset returns the initial states unchanged by default."""
        return states

    @abstractmethod
    async def step(self, state_dict: dict, **kwargs):
        """step applies one action."""
        raise NotImplementedError


def _tokenize(hf_tokenizer, text):
    return hf_tokenizer(text=text, add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()


class MultiTurnAgentExecutor(AgentExecutorBase):
    """MultiTurnAgentExecutor runs one instance per sample through OpenRLHF's token-in/token-out loop."""

    def __init__(self, agent_instance_cls):
        assert issubclass(agent_instance_cls, AgentInstanceBase), "AgentInstance must inherit from AgentInstanceBase"
        self.agent_instance_cls = agent_instance_cls

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        """execute runs reset, then generate/step turns until done or out of token budget."""
        if images and hasattr(hf_tokenizer, "image_processor"):
            raise NotImplementedError("stand-in: the VLM path is not mirrored")
        instance = self.agent_instance_cls()
        reset_states = await instance.reset({"observation": prompt, "label": label})
        obs_text = reset_states["observation"]
        tokens = _tokenize(hf_tokenizer, obs_text)

        room = max_length - (getattr(sampling_params, "max_tokens", None) or 1)
        if len(tokens) > room:
            tokens = tokens[-room:]
            obs_text = hf_tokenizer.decode(tokens, skip_special_tokens=False)

        ranges = []
        reward_sum = 0
        last_scores = 0
        logs = {}
        log_probs = [0.0] * len(tokens) if sampling_params.logprobs is not None else None

        while True:
            sampling_params.max_tokens = max_length - len(tokens)
            if sampling_params.max_tokens <= 0:
                break
            request_output = await llm_engine.generate(tokens, deepcopy(sampling_params), multi_modal_data=None)
            completion = request_output.outputs[0]
            action_ids = completion.token_ids
            ranges.append((len(tokens), len(tokens) + len(action_ids)))

            result = await instance.step(
                {
                    "observation_text": obs_text,
                    "action_text": completion.text,
                    "label": label,
                    "sampling_params": sampling_params,
                }
            )
            reward_sum += result["rewards"].item()
            last_scores = result.get("scores", reward_sum)
            feedback = result["environment_feedback"]
            done = result["done"]
            logs = result.get("extra_logs", {})
            feedback_ids = _tokenize(hf_tokenizer, feedback)

            obs_text = obs_text + completion.text + feedback
            tokens = tokens + action_ids + feedback_ids
            if sampling_params.logprobs is not None:
                for i, entry in enumerate(completion.logprobs):
                    log_probs.append(entry[action_ids[i]].logprob)
                log_probs.extend([0.0] * len(feedback_ids))
            if result.get("sampling_params", None):
                sampling_params = result["sampling_params"]
            if done:
                break

        return {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "reward": reward_sum,
            "scores": last_scores,
            "observation_tokens": tokens,
            "action_ranges": ranges,
            "rollout_log_probs": log_probs,
            "extra_logs": logs,
        }
