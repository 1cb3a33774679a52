"""Stand-in for ``verl/experimental/agent_loop/agent_loop.py`` (VERL main b178a3cd, same shape in v0.7.0 f9c855f7).

It mirrors what the adapter meets and what VERL does with its output:

* ``AgentLoopBase.__init__(trainer_config, server_manager, tokenizer,
  processor, dataset_cls, dataset_config, **kwargs)`` (no ``init_class``
  since v0.7.0), ``apply_chat_template`` and ``system_prompt``;
* ``AgentLoopOutput`` / ``AgentLoopMetrics`` (pydantic models upstream:
  ``metrics`` is coerced from a dict, mutable defaults are per instance);
* ``register`` and ``_agent_loop_registry``, filled from the agent-loop
  config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``);
* ``AgentLoopWorker.generate_sequences``: the sampling params from the
  config, one ``hydra.utils.instantiate`` of the registry entry per sample
  (its keys, ``name`` included, become keyword arguments), ``run``, then
  ``_agent_loop_postprocess`` (``tokenizer.pad`` to prompt_length /
  response_length, log-prob padding, multi-modal inputs and position ids
  when there is a processor) and ``_postprocess`` (``torch.cat`` over the
  batch, ``rollout_log_probs`` only when the first sample has them,
  ``rm_scores`` when every sample has a score, extra fields into
  ``non_tensor_batch``).

Upstream builds the server manager from Ray actor handles and the
tokenizer from the model path; here they are passed in. The reward loop
is off (``reward_model.use_reward_loop: false``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from .config import Config, unwrap


class TokenOutput:
    """TokenOutput mirrors ``verl.workers.rollout.replica.TokenOutput``: what ``server_manager.generate`` returns."""

    def __init__(
        self,
        *,
        token_ids: List[int],
        log_probs: Optional[List[float]] = None,
        routed_experts: Any = None,
        stop_reason: Optional[str] = None,
        num_preempted: Optional[int] = None,
    ) -> None:
        self.token_ids = list(token_ids)
        self.log_probs = log_probs
        self.routed_experts = routed_experts
        self.stop_reason = stop_reason  # "completed", "aborted" or None
        self.num_preempted = num_preempted


class DataProto:
    """DataProto mirrors the parts of ``verl.protocol.DataProto`` the worker uses."""

    def __init__(self, batch: Optional[Dict[str, torch.Tensor]] = None, non_tensor_batch: Optional[Dict[str, np.ndarray]] = None, meta_info: Optional[Dict[str, Any]] = None) -> None:
        self.batch = batch if batch is not None else {}
        self.non_tensor_batch = non_tensor_batch if non_tensor_batch is not None else {}
        self.meta_info = meta_info if meta_info is not None else {}

    def __len__(self) -> int:
        if self.batch:
            return len(next(iter(self.batch.values())))
        return len(next(iter(self.non_tensor_batch.values())))

    @staticmethod
    def from_rows(rows: List[Dict[str, Any]]) -> "DataProto":
        """from_rows builds the non-tensor batch the dataset produces (one object array per key)."""
        keys = list(rows[0])
        nt: Dict[str, np.ndarray] = {}
        for k in keys:
            arr = np.empty(len(rows), dtype=object)
            arr[:] = [r[k] for r in rows]
            nt[k] = arr
        return DataProto(non_tensor_batch=nt)


class AgentLoopMetrics:
    """AgentLoopMetrics mirrors the pydantic model of that name."""

    def __init__(self, generate_sequences: float = 0.0, tool_calls: float = 0.0, num_preempted: int = -1, **extra: Any) -> None:
        self.generate_sequences = float(generate_sequences)
        self.tool_calls = float(tool_calls)
        self.num_preempted = int(num_preempted)

    def model_dump(self) -> Dict[str, Any]:
        """model_dump returns the fields as a dict."""
        return {"generate_sequences": self.generate_sequences, "tool_calls": self.tool_calls, "num_preempted": self.num_preempted}


def _int_list(name: str, v: Any) -> List[int]:
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"AgentLoopOutput.{name}: list[int] expected, got {type(v).__name__}")
    return [int(x) for x in v]


class AgentLoopOutput:
    """AgentLoopOutput mirrors the pydantic model of that name (validation of the list fields, metrics coerced)."""

    def __init__(
        self,
        *,
        prompt_ids: List[int],
        response_ids: List[int],
        response_mask: List[int],
        metrics: Any,
        response_logprobs: Optional[List[float]] = None,
        routed_experts: Any = None,
        multi_modal_data: Optional[Dict[str, Any]] = None,
        reward_score: Optional[float] = None,
        num_turns: int = 0,
        extra_fields: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.prompt_ids = _int_list("prompt_ids", prompt_ids)
        self.response_ids = _int_list("response_ids", response_ids)
        self.response_mask = _int_list("response_mask", response_mask)
        self.response_logprobs = None if response_logprobs is None else [float(x) for x in response_logprobs]
        self.routed_experts = routed_experts
        if multi_modal_data is not None and not isinstance(multi_modal_data, dict):
            raise TypeError("AgentLoopOutput.multi_modal_data: dict expected")
        self.multi_modal_data = multi_modal_data
        self.reward_score = None if reward_score is None else float(reward_score)
        self.num_turns = int(num_turns)
        self.metrics = metrics if isinstance(metrics, AgentLoopMetrics) else AgentLoopMetrics(**dict(metrics))
        self.extra_fields = dict(extra_fields) if extra_fields is not None else {}


class DictConfigWrap:
    """DictConfigWrap keeps hydra.utils.instantiate from resolving the wrapped config."""

    def __init__(self, config: Any) -> None:
        self.config = config


def initialize_system_prompt(tokenizer: Any, **kwargs: Any) -> List[int]:
    """initialize_system_prompt mirrors ``verl.utils.chat_template``: the template's tokens before the first message."""
    one = tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=False, tokenize=True)
    two = tokenizer.apply_chat_template([{"role": "user", "content": ""}] * 2, add_generation_prompt=False, tokenize=True)
    return one[: -(len(two) - len(one))] if len(two) > len(one) else one


class AgentLoopBase:
    """AgentLoopBase mirrors VERL's abstract agent loop: one instance per sample."""

    def __init__(
        self,
        trainer_config: DictConfigWrap,
        server_manager: Any,
        tokenizer: Any,
        processor: Any,
        dataset_cls: Any,
        dataset_config: DictConfigWrap,
        **kwargs: Any,
    ) -> None:
        self.config = trainer_config.config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.dataset_cls = dataset_cls
        self.dataset_config = dataset_config.config
        self.apply_chat_template_kwargs = self.dataset_config.get("apply_chat_template_kwargs", {})
        self.system_prompt = initialize_system_prompt(self.tokenizer)
        self.loop = asyncio.get_running_loop()

    async def apply_chat_template(self, messages: List[Dict[str, Any]], tools: Any = None, images: Any = None, videos: Any = None, remove_system_prompt: bool = False) -> List[int]:
        """apply_chat_template renders messages with a generation prompt (processor first, like upstream)."""
        if self.processor is not None:
            raw = self.processor.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
            ids = self.processor(text=[raw], images=images, videos=videos, return_tensors="pt")["input_ids"].squeeze(0).tolist()
        else:
            ids = await self.loop.run_in_executor(
                None, lambda: self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
            )
        if remove_system_prompt:
            ids = ids[len(self.system_prompt) :]
        return ids

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """run is the abstract method a loop implements."""
        raise NotImplementedError


# _agent_loop_registry maps agent names to hydra configs (``{"_target_": ...}`` plus settings).
_agent_loop_registry: Dict[str, Dict[str, Any]] = {}


def register(agent_name: str) -> Any:
    """register adds a loop class to the registry under agent_name."""

    def decorator(cls: type) -> type:
        _agent_loop_registry[agent_name] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
        return cls

    return decorator


_HYDRA_KEYS = ("_target_", "_recursive_", "_convert_", "_partial_", "_args_")


def instantiate(config: Any, **kwargs: Any) -> Any:
    """instantiate mirrors ``hydra.utils.instantiate``: import ``_target_`` and call it with the other keys and kwargs."""
    cfg = unwrap(config)
    module, _, name = cfg["_target_"].rpartition(".")
    target = getattr(importlib.import_module(module), name)
    params = {k: v for k, v in cfg.items() if k not in _HYDRA_KEYS}
    params.update(kwargs)
    return target(**params)


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """compute_position_id_with_mask mirrors ``verl.utils.model``."""
    return torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0, max=None)


class _Internal:
    """_Internal mirrors ``_InternalAgentLoopOutput``: the padded tensors of one sample."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class AgentLoopWorker:
    """AgentLoopWorker runs a batch of rows, each in its own agent loop, and builds VERL's batch from the outputs."""

    def __init__(self, config: Config, server_manager: Any, tokenizer: Any, processor: Any = None, dataset_cls: Any = None) -> None:
        self.config = config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.dataset_cls = dataset_cls
        self.reward_router_address = None
        path = config.actor_rollout_ref.rollout.agent.agent_loop_config_path
        if path:
            with open(path) as f:
                for entry in json.load(f):  # the tests write JSON, a subset of YAML
                    _agent_loop_registry[entry["name"]] = entry
        self.use_reward_loop = True if config.reward_model.use_reward_loop else None

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        """generate_sequences runs every row of batch concurrently and returns the padded batch."""
        rollout = self.config.actor_rollout_ref.rollout
        sampling_params = dict(
            temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k, repetition_penalty=1.0, logprobs=rollout.calculate_log_probs
        )
        if "agent_name" not in batch.non_tensor_batch:
            batch.non_tensor_batch["agent_name"] = np.array([rollout.agent.default_agent_loop] * len(batch), dtype=object)
        index = batch.non_tensor_batch["index"] if "index" in batch.non_tensor_batch else np.arange(len(batch))
        tasks = []
        for i in range(len(batch)):
            kwargs = {k: v[i] for k, v in batch.non_tensor_batch.items()}
            trajectory = {"step": -1, "sample_index": index[i], "rollout_n": 0, "validate": False}
            tasks.append(asyncio.create_task(self._run_agent_loop(sampling_params, trajectory, **kwargs)))
        outputs = await asyncio.gather(*tasks)
        return self._postprocess(outputs)

    async def _run_agent_loop(self, sampling_params: Dict[str, Any], trajectory: Dict[str, Any], *, agent_name: str, trace: bool = True, **kwargs: Any) -> _Internal:
        assert agent_name in _agent_loop_registry, f"Agent loop {agent_name} not registered"
        agent_loop = instantiate(
            _agent_loop_registry[agent_name],
            trainer_config=DictConfigWrap(config=self.config),
            server_manager=self.server_manager,
            tokenizer=self.tokenizer,
            processor=self.processor,
            dataset_cls=self.dataset_cls,
            dataset_config=DictConfigWrap(self.config.data),
        )
        output = await agent_loop.run(sampling_params, **kwargs)
        return await self._agent_loop_postprocess(output, **kwargs)

    async def _agent_loop_postprocess(self, output: AgentLoopOutput, **kwargs: Any) -> _Internal:
        output.extra_fields["raw_prompt"] = kwargs["raw_prompt"]
        rollout = self.config.actor_rollout_ref.rollout
        self.tokenizer.padding_side = "left"
        prompt = self.tokenizer.pad({"input_ids": output.prompt_ids}, padding="max_length", max_length=rollout.prompt_length, return_tensors="pt", return_attention_mask=True)
        if prompt["input_ids"].dim() == 1:
            prompt["input_ids"] = prompt["input_ids"].unsqueeze(0)
            prompt["attention_mask"] = prompt["attention_mask"].unsqueeze(0)
        self.tokenizer.padding_side = "right"
        response = self.tokenizer.pad({"input_ids": output.response_ids}, padding="max_length", max_length=rollout.response_length, return_tensors="pt", return_attention_mask=True)
        if response["input_ids"].dim() == 1:
            response["input_ids"] = response["input_ids"].unsqueeze(0)
            response["attention_mask"] = response["attention_mask"].unsqueeze(0)
        mask = self.tokenizer.pad({"input_ids": output.response_mask}, padding="max_length", max_length=rollout.response_length, return_tensors="pt", return_attention_mask=False)
        if mask["input_ids"].dim() == 1:
            mask["input_ids"] = mask["input_ids"].unsqueeze(0)
        response_logprobs = None
        if output.response_logprobs is not None:
            pad_size = rollout.response_length - len(output.response_logprobs)
            response_logprobs = torch.tensor(output.response_logprobs + [0.0] * pad_size).unsqueeze(0)
        response_mask = mask["input_ids"] * response["attention_mask"]
        attention_mask = torch.cat([prompt["attention_mask"], response["attention_mask"]], dim=1)
        input_ids = torch.cat([prompt["input_ids"], response["input_ids"]], dim=1)
        multi_modal_inputs = self._compute_multi_modal_inputs(output, input_ids)
        position_ids = self._compute_position_ids(input_ids, attention_mask, multi_modal_inputs)
        if output.reward_score is None and not self.config.reward_model.enable and self.use_reward_loop:
            raise NotImplementedError("the reward loop is not part of the stand-in")
        return _Internal(
            prompt_ids=prompt["input_ids"],
            response_ids=response["input_ids"],
            input_ids=input_ids,
            position_ids=position_ids,
            response_mask=response_mask,
            attention_mask=attention_mask,
            response_logprobs=response_logprobs,
            routed_experts=None,
            multi_modal_inputs=multi_modal_inputs,
            multi_modal_data=output.multi_modal_data,
            reward_score=output.reward_score,
            num_turns=output.num_turns,
            metrics=output.metrics,
            extra_fields=output.extra_fields,
        )

    def _compute_multi_modal_inputs(self, output: AgentLoopOutput, input_ids: torch.Tensor) -> Dict[str, Any]:
        if self.processor is None:
            return {}
        images = output.multi_modal_data.get("images")  # upstream: None here raises AttributeError
        videos = output.multi_modal_data.get("videos")
        text = self.tokenizer.decode(input_ids.squeeze(0), skip_special_tokens=True)
        inputs = self.processor(text=[text], images=images, videos=videos, return_tensors="pt", do_sample_frames=False)
        inputs.pop("input_ids", None)
        inputs.pop("attention_mask", None)
        return dict(inputs.convert_to_tensors("pt"))

    def _compute_position_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, multi_modal_inputs: Dict[str, Any]) -> torch.Tensor:
        if self.processor is None:
            return compute_position_id_with_mask(attention_mask)
        vision, _ = self.processor.get_rope_index(
            input_ids=input_ids,
            image_grid_thw=multi_modal_inputs.get("image_grid_thw"),
            video_grid_thw=multi_modal_inputs.get("video_grid_thw"),
            attention_mask=attention_mask,
        )
        vision = vision.transpose(0, 1)
        valid = attention_mask[0].bool()
        text = torch.ones((1, len(input_ids[0])), dtype=torch.long)
        text[0, valid] = torch.arange(int(valid.sum().item()))
        return torch.cat((text.unsqueeze(0), vision), dim=1)

    def _postprocess(self, inputs: List[_Internal]) -> DataProto:
        prompt_ids = torch.cat([x.prompt_ids for x in inputs], dim=0)
        response_ids = torch.cat([x.response_ids for x in inputs], dim=0)
        response_mask = torch.cat([x.response_mask for x in inputs], dim=0)
        attention_mask = torch.cat([x.attention_mask for x in inputs], dim=0)
        input_ids = torch.cat([x.input_ids for x in inputs], dim=0)
        position_ids = torch.cat([x.position_ids for x in inputs], dim=0)
        batch: Dict[str, torch.Tensor] = {
            "prompts": prompt_ids,
            "responses": response_ids,
            "response_mask": response_mask,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        }
        if inputs[0].response_logprobs is not None:
            batch["rollout_log_probs"] = torch.cat([x.response_logprobs for x in inputs], dim=0)
        scores = [x.reward_score for x in inputs]
        if all(s is not None for s in scores):
            prompt_length = prompt_ids.size(1)
            response_length = attention_mask[:, prompt_length:].sum(dim=1) - 1
            rm_scores = torch.zeros_like(response_mask, dtype=torch.float32)
            rm_scores[torch.arange(response_mask.size(0)), response_length] = torch.tensor(scores, dtype=torch.float32)
            batch["rm_scores"] = rm_scores
        non_tensor: Dict[str, np.ndarray] = {"__num_turns__": np.array([x.num_turns for x in inputs], dtype=np.int32)}
        reward_extra_infos = [x.extra_fields.get("reward_extra_info", {}) for x in inputs]
        reward_extra_keys = list(reward_extra_infos[0].keys())
        for key in reward_extra_keys:
            non_tensor[key] = np.array([info[key] for info in reward_extra_infos])
        mmi = [x.multi_modal_inputs for x in inputs]
        if any(m is not None for m in mmi):
            non_tensor["multi_modal_inputs"] = np.array(mmi, dtype=object)
        metrics = [x.metrics.model_dump() for x in inputs]
        for key in set(k for x in inputs for k in x.extra_fields):
            arr = np.empty(len(inputs), dtype=object)
            arr[:] = [x.extra_fields.get(key) for x in inputs]
            non_tensor[key] = arr
        meta: Dict[str, Any] = {"metrics": metrics}
        if "rm_scores" in batch:
            meta["reward_extra_keys"] = reward_extra_keys
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

