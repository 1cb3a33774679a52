"""Stand-in for ``trl.trainer.grpo_trainer``: GRPOTrainer's environment path, in upstream's order.

Mirrors trl/trainer/grpo_trainer.py at f2cd57710ae345ea6428ae95363267fcf38a3dc8
(line numbers below are that file's); what an environment sees is the same
in v1.9.0 and v1.8.0. Kept: everything that touches an environment or what
the trainer does with its outputs. Left out: the policy model, vLLM,
multimodal inputs, distributed gathering (one process), log-probabilities
and the loss.

* ``__init__`` (303-713): reward functions, then ``environment_factory`` is
  normalised to ``{name: factory}``; one instance per factory is probed:
  ``reset`` is required, ``get_reward`` makes the class a reward source (a
  sync or async wrapper appended to ``reward_funcs`` with weight 1, exact
  type match), every other public bound method is a tool; the probe seeds
  the instance pool. Async tools or reward functions start a daemon event
  loop.
* ``_generate_and_score_completions`` (2260-2333, 2398-2470, 2668-2730): per
  batch, instances come from the pool (new ones only when the batch needs
  more), per-rollout tool dicts are built from each instance's methods,
  ``reset(**row)`` is called and a returned string is appended to the last
  prompt message; then generation, the tool loop, rewards and advantages.
* ``_tokenize_prompts`` (1726-1752): each prompt is rendered with its
  environment's tools (bound methods, converted by transformers).
* ``_tool_call_loop`` (1933-2141): calls ``tool(**arguments)``; an
  exception becomes ``{"error": str(e)}``; tool results are appended with
  ``tool_mask`` 0; a tool result that would push the completion past
  ``max_completion_length`` (or the model's context) is rolled back and the
  sample leaves the loop; ``max_tool_calling_iterations`` bounds the turns.
* ``_calculate_rewards`` (1612-1703): reward functions get ``prompts``,
  ``completions``, ``completion_ids``, the row columns, ``trainer_state``,
  ``log_extra``, ``log_metric`` and ``environments``; None becomes NaN.
* advantages (2676-2730): a completion whose rewards are all NaN is
  unscorable: excluded from the group mean/std and given advantage 0.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import sys
import threading
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional

import torch

from ..chat_template_utils import parse_response
from .grpo_config import GRPOConfig

__all__ = ["GRPOTrainer", "GRPOConfig", "nanstd", "pad"]


def get_callable_name(func: Any) -> str:
    """get_callable_name mirrors trl/trainer/utils.py:224: the function's name, else its class's."""
    return getattr(func, "__name__", type(func).__name__)


def nanstd(tensor: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """nanstd mirrors trl/trainer/utils.py:857: the Bessel-corrected standard deviation ignoring NaNs."""
    if dim is None:
        tensor, dim = tensor.reshape(-1), 0
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(count, float("nan"), dtype=torch.float32))
    return torch.sqrt(variance * correction).squeeze(dim)


def pad(tensors: List[torch.Tensor], padding_value: Any = 0, padding_side: str = "right") -> torch.Tensor:
    """pad mirrors trl/trainer/utils.py:116 for 1-D tensors."""
    width = max((t.numel() for t in tensors), default=0)
    out = torch.full((len(tensors), width), padding_value, dtype=tensors[0].dtype if tensors else torch.long)
    for i, t in enumerate(tensors):
        if padding_side == "left":
            out[i, width - t.numel() :] = t
        else:
            out[i, : t.numel()] = t
    return out


class GRPOTrainer:
    """GRPOTrainer is the stand-in trainer (constructor signature of upstream, 303-324)."""

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: Optional[GRPOConfig] = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: Any = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: Optional[List[Callable[..., Any]]] = None,
        rollout_func: Any = None,
        environment_factory: Any = None,
    ) -> None:
        args = args or GRPOConfig()
        self.args = args
        self.model = model
        self.processing_class = processing_class
        self._tokenizer = processing_class
        self._is_vlm = False
        self.state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)

        # Reward functions (506-536).
        if reward_funcs is None:
            reward_funcs = []
        elif not isinstance(reward_funcs, list):
            reward_funcs = [reward_funcs]
        self.reward_func_names = [get_callable_name(f) for f in reward_funcs]
        self.reward_funcs = reward_funcs
        if args.reward_weights is not None:
            if len(args.reward_weights) != len(reward_funcs):
                raise ValueError("reward_weights must match reward_funcs")
            self.reward_weights = torch.tensor(args.reward_weights, dtype=torch.float32)
        else:
            self.reward_weights = torch.ones(len(reward_funcs), dtype=torch.float32)
        self.reward_processing_classes = [None] * len(reward_funcs)

        # Environments and their tools (611-686).
        tools = tools or []
        self._standalone_tools = tools
        self._multi_environment = isinstance(environment_factory, dict)
        if environment_factory is None:
            self.environment_factories = None
        elif self._multi_environment:
            self.environment_factories = environment_factory
        else:
            self.environment_factories = {None: environment_factory}
        if self.environment_factories is not None:
            self._env_tools: Dict[Any, List[Callable[..., Any]]] = {}
            self._environment_pool: Dict[Any, List[Any]] = {}
            self.tools = list(tools)
            env_reward_types: List[type] = []
            for name, factory in self.environment_factories.items():
                instance = factory()
                has_reset = False
                has_reward = False
                methods = []
                for member_name, member in inspect.getmembers(instance, predicate=inspect.ismethod):
                    if member_name == "reset":
                        has_reset = True
                    elif member_name == "get_reward":
                        has_reward = True
                    elif not member_name.startswith("_"):
                        methods.append(member)
                if not has_reset:
                    raise ValueError("Each environment instance returned by `environment_factory` must define a callable `reset`.")
                self._env_tools[name] = tools + methods
                self._environment_pool[name] = [instance]
                self.tools += [m for m in methods if m not in self.tools]
                if has_reward and type(instance) not in env_reward_types:
                    env_type = type(instance)
                    env_reward_types.append(env_type)
                    if inspect.iscoroutinefunction(instance.get_reward):

                        async def get_reward(environments, _env_type=env_type, **kwargs):  # noqa: ANN001
                            return [await e.get_reward() if type(e) is _env_type else None for e in environments]

                    else:

                        def get_reward(environments, _env_type=env_type, **kwargs):  # noqa: ANN001
                            return [e.get_reward() if type(e) is _env_type else None for e in environments]

                    self.reward_funcs.append(get_reward)
                    self.reward_func_names.append(env_type.__name__)
                    self.reward_processing_classes.append(None)
                    self.reward_weights = torch.cat([self.reward_weights, torch.ones(1)])
        else:
            self.tools = tools
        if not self.reward_funcs:
            raise ValueError(
                "No reward source provided. Pass `reward_funcs`, or an `environment_factory` whose environment defines a `get_reward` method."
            )
        self.environments: Optional[List[Any]] = None

        # A daemon event loop for async reward functions and tools (704-713).
        self._has_async_funcs = any(inspect.iscoroutinefunction(f) for f in self.reward_funcs + self.tools)
        if self._has_async_funcs:
            self.async_loop = asyncio.new_event_loop()
            self.async_loop_thread = threading.Thread(target=self.async_loop.run_forever, name="GRPOTrainer-AsyncLoop", daemon=True)
            self.async_loop_thread.start()

        self.chat_template = None
        self.chat_template_kwargs = args.chat_template_kwargs or {}
        self.max_completion_length = args.max_completion_length
        self.num_generations = args.num_generations
        self.max_tool_calling_iterations = args.max_tool_calling_iterations if args.max_tool_calling_iterations is not None else sys.maxsize
        self.mask_truncated_completions = args.mask_truncated_completions
        self.scale_rewards = args.scale_rewards
        self.multi_objective_aggregation = args.multi_objective_aggregation
        self.train_dataset = train_dataset
        self._metrics: Dict[str, Dict[str, List[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._logs: Dict[str, Any] = {"prompt": [], "completion": [], "rewards": defaultdict(list), "advantages": []}

    def close(self) -> None:
        """close stops the daemon event loop (upstream registers this with atexit)."""
        if self._has_async_funcs:
            self.async_loop.call_soon_threadsafe(self.async_loop.stop)
            self.async_loop_thread.join(10)

    # --- generation -------------------------------------------------------

    def _tokenize_prompts(self, prompts: List[List[Dict[str, Any]]]) -> List[List[int]]:
        prompt_ids = []
        for prompt, name in zip(prompts, self._batch_environments, strict=True):
            tokenized = self.processing_class.apply_chat_template(
                conversation=[prompt],
                tools=self._env_tools[name] or None,
                chat_template=self.chat_template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **self.chat_template_kwargs,
            )
            prompt_ids.append(tokenized["input_ids"][0])
        return prompt_ids

    def _generate_single_turn(self, prompt_ids: List[List[int]]) -> Any:
        # The transformers path (1839-1876): at most max_completion_length new tokens, cut after the first EOS.
        completion_ids = []
        for ids in self.model.generate(prompt_ids, max_new_tokens=self.max_completion_length):
            ids = list(ids)[: self.max_completion_length]
            if self._tokenizer.eos_token_id in ids:
                ids = ids[: ids.index(self._tokenizer.eos_token_id) + 1]
            completion_ids.append(ids)
        return completion_ids, None

    def _get_tool_suffix_ids(self, tool_messages: List[Dict[str, Any]]) -> List[int]:
        # 1881-1931: the ids the template adds for the tool messages and the next generation prompt.
        dummy_tool_calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
        dummy_messages = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": dummy_tool_calls}]
        prefix_ids = self.processing_class.apply_chat_template(
            dummy_messages, add_generation_prompt=False, tokenize=True, chat_template=self.chat_template, return_dict=False, **self.chat_template_kwargs
        )
        full_ids = self.processing_class.apply_chat_template(
            dummy_messages + tool_messages, add_generation_prompt=True, tokenize=True, chat_template=self.chat_template, return_dict=False, **self.chat_template_kwargs
        )
        eos_positions = [i for i, t in enumerate(prefix_ids) if t == self._tokenizer.eos_token_id]
        if eos_positions:
            prefix_ids = prefix_ids[: eos_positions[-1] + 1]
        if full_ids[: len(prefix_ids)] != prefix_ids:
            raise ValueError("Unexpected tokenization: the EOS-trimmed prefix IDs are not a prefix of the full IDs.")
        return full_ids[len(prefix_ids) :]

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions):  # noqa: ANN001, ANN201
        tool_calls = [completion[0].get("tool_calls") for completion in completions]
        idxs_with_tool = [idx for idx, tc in enumerate(tool_calls) if tc]
        tool_calls = [tool_calls[idx] for idx in idxs_with_tool]
        tool_mask = [[1] * len(ids) for ids in completion_ids]
        tool_call_count = 0
        tool_failure_count = 0
        iteration_num = 0
        while idxs_with_tool and iteration_num < self.max_tool_calling_iterations:
            prompt_completion_tools = [prompts[i] for i in idxs_with_tool]
            completions_len_before = [len(completions[i]) for i in idxs_with_tool]
            prompts_len_before = [len(prompts[i]) for i in idxs_with_tool]
            for idx in range(len(idxs_with_tool)):
                idx_with_tool = idxs_with_tool[idx]
                sync_tool_dict = self._sync_tool_dicts[idx_with_tool]
                async_tool_dict = self._async_tool_dicts[idx_with_tool]
                prompt_completion_tool = prompt_completion_tools[idx]
                prompt_completion_tool.append(completions[idx_with_tool][-1])
                async_coros = []
                results = []
                for tool_call in tool_calls[idx]:
                    tool_call_count += 1
                    if tool_call["type"] == "function":
                        function = tool_call["function"]
                        name = function["name"]
                        try:
                            if name in sync_tool_dict:
                                results.append((name, sync_tool_dict[name](**function["arguments"])))
                            elif name in async_tool_dict:
                                async_coros.append((name, async_tool_dict[name](**function["arguments"])))
                            else:
                                raise ValueError(f"Tool {name} not found.")
                        except Exception as e:
                            tool_failure_count += 1
                            results.append((name, {"error": str(e)}))
                    else:
                        tool_failure_count += 1
                        results.append((tool_call.get("name", "unknown"), {"error": f"Unsupported tool call type: {tool_call['type']}"}))
                if async_coros:

                    async def _run(coros):  # noqa: ANN001, ANN202
                        out = await asyncio.gather(*(c for _, c in coros), return_exceptions=True)
                        return [(n, r) for (n, _), r in zip(coros, out)]

                    for name, result in asyncio.run_coroutine_threadsafe(_run(async_coros), self.async_loop).result():
                        if isinstance(result, Exception):
                            tool_failure_count += 1
                            results.append((name, {"error": str(result)}))
                        else:
                            results.append((name, result))
                for name, result in results:
                    content = result if isinstance(result, list) else str(result)
                    tool_message = {"role": "tool", "name": name, "content": content}
                    prompt_completion_tool.append(tool_message)
                    completions[idx_with_tool].append(tool_message)

            prompt_completion_tool_ids = []
            for idx in range(len(idxs_with_tool)):
                idx_with_tool = idxs_with_tool[idx]
                tool_messages = []
                for message in reversed(completions[idx_with_tool]):
                    if message["role"] == "tool":
                        tool_messages.insert(0, message)
                    else:
                        break
                suffix_ids = self._get_tool_suffix_ids(tool_messages)
                prompt_completion_tool_ids.append(prompt_ids[idx_with_tool] + completion_ids[idx_with_tool] + suffix_ids)

            max_model_len = self.model.config.max_position_embeddings
            overlong = [
                len(pct) - len(prompt_ids[i]) > self.max_completion_length or len(pct) >= max_model_len
                for i, pct in zip(idxs_with_tool, prompt_completion_tool_ids, strict=True)
            ]
            for idx in range(len(idxs_with_tool)):
                if overlong[idx]:
                    idx_with_tool = idxs_with_tool[idx]
                    del completions[idx_with_tool][completions_len_before[idx] :]
                    del prompts[idx_with_tool][prompts_len_before[idx] :]
            idxs_with_tool = [i for i, o in zip(idxs_with_tool, overlong, strict=True) if not o]
            prompt_completion_tool_ids = [p for p, o in zip(prompt_completion_tool_ids, overlong, strict=True) if not o]
            if not idxs_with_tool:
                break

            post_tool_ids, _ = self._generate_single_turn(prompt_completion_tool_ids)
            for idx in range(len(idxs_with_tool)):
                idx_with_tool = idxs_with_tool[idx]
                completion_tool_length = len(prompt_completion_tool_ids[idx]) - len(prompt_ids[idx_with_tool])
                excess = completion_tool_length + len(post_tool_ids[idx]) - self.max_completion_length
                if excess > 0:
                    post_tool_ids[idx] = post_tool_ids[idx][: len(post_tool_ids[idx]) - excess]
            for idx in range(len(idxs_with_tool)):
                idx_with_tool = idxs_with_tool[idx]
                tool_length = len(prompt_completion_tool_ids[idx]) - len(prompt_ids[idx_with_tool]) - len(completion_ids[idx_with_tool])
                tool_mask[idx_with_tool] += [0] * tool_length + [1] * len(post_tool_ids[idx])
            for idx in range(len(idxs_with_tool)):
                idx_with_tool = idxs_with_tool[idx]
                pct = prompt_completion_tool_ids[idx]
                completion_ids[idx_with_tool] = pct[len(prompt_ids[idx_with_tool]) :] + post_tool_ids[idx]
            post_tool_completions = [
                parse_response(self._tokenizer, ids, prefix=prompt_completion_tool_ids[idx]) if ids else {}
                for idx, ids in enumerate(post_tool_ids)
            ]
            for idx in range(len(idxs_with_tool)):
                if post_tool_completions[idx]:
                    completions[idxs_with_tool[idx]].append(post_tool_completions[idx])
            tool_calls = [c.get("tool_calls") for c in post_tool_completions]
            idxs_with_tool = [i for i, tc in zip(idxs_with_tool, tool_calls, strict=True) if tc]
            tool_calls = [tc for tc in tool_calls if tc]
            iteration_num += 1
        return tool_mask, completions, completion_ids, tool_call_count, tool_failure_count

    def _generate(self, prompts: List[List[Dict[str, Any]]]) -> Any:
        prompts = copy.deepcopy(prompts)
        prompt_ids = self._tokenize_prompts(prompts)
        completion_ids, _ = self._generate_single_turn(prompt_ids)
        # With tools, __init__ gave the tokenizer a response schema, so completions are parsed (2166-2174).
        completions = [[parse_response(self._tokenizer, ids, prefix=prompt_ids[i])] for i, ids in enumerate(completion_ids)]
        tool_mask = None
        if self.tools:
            tool_mask, completions, completion_ids, calls, failures = self._tool_call_loop(prompts, prompt_ids, completion_ids, completions)
            self._metrics["train"]["tools/call_frequency"].append(calls / len(prompt_ids))
            self._metrics["train"]["tools/failure_frequency"].append(failures / calls if calls else 0.0)
        return prompt_ids, completion_ids, tool_mask, completions

    # --- scoring ----------------------------------------------------------

    def _log_completion_extra(self, column: str, values: List[Any]) -> None:
        """_log_completion_extra is the ``log_extra`` callback given to reward functions."""

    def _log_metric(self, name: str, value: float) -> None:
        """_log_metric is the ``log_metric`` callback given to reward functions."""
        self._metrics["train"][name].append(value)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN201
        rewards_per_func = torch.zeros(len(prompts), len(self.reward_funcs))
        keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
        reward_kwargs = {key: [example[key] for example in inputs] for key in keys}
        reward_kwargs["trainer_state"] = self.state
        reward_kwargs["log_extra"] = self._log_completion_extra
        reward_kwargs["log_metric"] = self._log_metric
        if self.environments is not None:
            reward_kwargs["environments"] = self.environments
        async_funcs_info = []
        for i, reward_func in enumerate(self.reward_funcs):
            if inspect.iscoroutinefunction(reward_func):
                async_funcs_info.append((i, reward_func))
            else:
                out = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs)
                out = [r if r is not None else torch.nan for r in out]
                rewards_per_func[:, i] = torch.tensor(out, dtype=torch.float32)
        if async_funcs_info:

            async def _invoke(index, func):  # noqa: ANN001, ANN202
                out = await func(prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs)
                return index, [r if r is not None else torch.nan for r in out]

            async def _all():  # noqa: ANN202
                return await asyncio.gather(*(_invoke(i, f) for i, f in async_funcs_info))

            for idx, out in asyncio.run_coroutine_threadsafe(_all(), self.async_loop).result():
                rewards_per_func[:, idx] = torch.tensor(out, dtype=torch.float32)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: List[Dict[str, Any]]) -> Dict[str, Any]:
        """_generate_and_score_completions runs one generation batch: rows in, padded tensors and advantages out."""
        prompts = [x.get("prompt", [{"role": "user", "content": ""}]) for x in inputs]
        if self.environment_factories is not None:
            self._batch_environments = [x.get("environment") if self._multi_environment else None for x in inputs]
            if self._multi_environment:
                for name in set(self._batch_environments):
                    if name not in self.environment_factories:
                        raise ValueError(f"Example has `environment={name!r}`, which is not among the environments passed to `environment_factory`.")
            self.environments = []
            pool_cursor: Dict[Any, int] = {}
            for name in self._batch_environments:
                pool = self._environment_pool[name]
                index = pool_cursor.get(name, 0)
                if index == len(pool):
                    pool.append(self.environment_factories[name]())
                pool_cursor[name] = index + 1
                self.environments.append(pool[index])
        if self.tools:
            self._sync_tool_dicts = []
            self._async_tool_dicts = []
            for i in range(len(inputs)):
                methods = []
                if self.environments:
                    methods = [
                        member
                        for member_name, member in inspect.getmembers(self.environments[i], predicate=inspect.ismethod)
                        if member_name not in ("reset", "get_reward") and not member_name.startswith("_")
                    ]
                sync_tool_dict, async_tool_dict = {}, {}
                for tool in self._standalone_tools + methods:
                    if inspect.iscoroutinefunction(tool):
                        async_tool_dict[tool.__name__] = tool
                    else:
                        sync_tool_dict[tool.__name__] = tool
                self._sync_tool_dicts.append(sync_tool_dict)
                self._async_tool_dicts.append(async_tool_dict)
        if self.environments:
            for i, (prompt, environment, x) in enumerate(zip(prompts, self.environments, inputs, strict=True)):
                reset_kwargs = {k: v for k, v in x.items() if k != "environment"} if self._multi_environment else x
                observation = environment.reset(**reset_kwargs)
                if observation is None:
                    continue
                prompts[i] = prompt[:-1] + [{**prompt[-1], "content": prompt[-1]["content"] + observation}]

        prompt_ids_list, completion_ids_list, tool_mask_list, completions = self._generate(prompts)

        prompt_ids = pad([torch.tensor(ids) for ids in prompt_ids_list], padding_value=self._tokenizer.pad_token_id, padding_side="left")
        prompt_mask = pad([torch.ones(len(ids), dtype=torch.long) for ids in prompt_ids_list], padding_value=0, padding_side="left")
        completion_ids = pad([torch.tensor(ids) for ids in completion_ids_list], padding_value=self._tokenizer.pad_token_id, padding_side="right")
        completion_mask = pad([torch.ones(len(ids), dtype=torch.long) for ids in completion_ids_list], padding_value=0, padding_side="right")
        tool_mask = None
        if tool_mask_list is not None:
            tool_mask = pad([torch.tensor(m) for m in tool_mask_list], padding_value=1, padding_side="right")
        if self.mask_truncated_completions:
            eos_and_pad = [self._tokenizer.eos_token_id, self._tokenizer.pad_token_id]
            is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list])
            completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()
            if tool_mask is not None:
                tool_mask = tool_mask * (~is_truncated).unsqueeze(1).int()
        loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask

        rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        num_generations = self.num_generations
        unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        mean_grouped = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
        if num_generations > 1:
            std_grouped = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
        else:
            std_grouped = torch.zeros_like(rewards)
        advantages = rewards - mean_grouped
        if self.scale_rewards != "none":
            advantages = advantages / (std_grouped + 1e-4)
        advantages = torch.nan_to_num(advantages, nan=0.0)

        for i, name in enumerate(self.reward_func_names):
            self._metrics["train"][f"rewards/{name}/mean"].append(torch.nanmean(rewards_per_func[:, i]).item())
            self._logs["rewards"][name].extend(rewards_per_func[:, i].tolist())
        self._logs["prompt"].extend(self._tokenizer.batch_decode(prompt_ids_list, skip_special_tokens=True))
        self._logs["completion"].extend(self._tokenizer.batch_decode(completion_ids_list, skip_special_tokens=True))
        self._logs["advantages"].extend(advantages.tolist())
        self.state.num_input_tokens_seen += int(prompt_mask.sum() + loss_mask.sum())

        output = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": advantages,
            "num_items_in_batch": loss_mask.sum(),
        }
        if tool_mask is not None:
            output["tool_mask"] = tool_mask
        return output


def repeat_rows(rows: List[Dict[str, Any]], num_generations: int) -> List[Dict[str, Any]]:
    """repeat_rows is what RepeatSampler feeds one generation batch: each row num_generations times in a row."""
    return [dict(row) for row in rows for _ in range(num_generations)]
