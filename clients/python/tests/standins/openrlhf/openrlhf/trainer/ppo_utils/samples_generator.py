"""Stand-in for ``openrlhf.trainer.ppo_utils.samples_generator`` (OpenRLHF v0.11.0, commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7).

``SamplesGenerator`` keeps upstream's constructor and its three rollout
methods; the one difference is transport: upstream's ``_generate_vllm`` is
synchronous and waits for Ray object refs (``ray.wait``/``ray.get``), this
one is a coroutine awaiting asyncio tasks on in-process
``RolloutRayActor`` objects. What matters is the same:

* ``_dispatch_prompts_to_vllm`` builds one ``SamplingParams`` per batch
  (``max_tokens=max_new_tokens``, ``skip_special_tokens=False`` by default,
  ``logprobs=1`` with IS correction) and calls
  ``generate_responses(prompt, label, sampling_params, max_length=max_len,
  hf_tokenizer, num_samples=n_samples_per_prompt, images)`` per prompt on the
  least-loaded engine.
* ``_generate_vllm`` takes the results in completion order; an exception in
  any prompt's call propagates and the whole batch fails (``ray.get``
  raises); with dynamic filtering a prompt group whose average score is not
  strictly inside ``dynamic_filtering_range`` is dropped and replaced.
* ``_process_response_into_experience`` builds ``sequences``,
  ``attention_mask`` and ``action_mask`` (1 on every action range) from
  the response, truncates to ``max_len`` (``action_mask[1:max_len]``),
  reads ``reward``, ``scores``, ``truncated``, ``extra_logs`` (tensors
  reduced to their first item) into ``info``.
"""

import asyncio
import heapq
from typing import List

import torch
from vllm import SamplingParams

from openrlhf.trainer.ppo_utils.experience import Experience


def _collect_prompt_batch(dataloader_iter, num_prompts: int):
    prompts, labels, images = [], [], []
    exhausted = False
    while len(prompts) < num_prompts:
        try:
            _, batch_prompts, batch_labels, batch_images = next(dataloader_iter)
        except StopIteration:
            exhausted = True
            break
        room = num_prompts - len(prompts)
        prompts.extend(batch_prompts[:room])
        labels.extend(batch_labels[:room])
        images.extend(batch_images[:room])
    return prompts, labels, images, exhausted


class SamplesGenerator:
    """SamplesGenerator pulls prompts and dispatches them to the rollout actors."""

    def __init__(self, strategy, prompts_dataloader, eval_dataloader, tokenizer, vllm_engines: List):
        self.strategy = strategy
        self.args = strategy.args
        self.tokenizer = tokenizer
        self.vllm_engines = vllm_engines or []
        self.prompts_dataloader = prompts_dataloader
        self.eval_dataloader = eval_dataloader

    async def _generate_vllm(self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs):
        """_generate_vllm returns (experiences, prompts_consumed, exhausted) for one batch of prompts."""
        consumed = 0
        accepted: List[Experience] = []
        prompts, labels, images, exhausted = _collect_prompt_batch(dataloader_iter, num_prompts)
        if not prompts:
            return [], consumed, True
        pending = self._dispatch_prompts_to_vllm(prompts, labels, images=images, **generate_kwargs)
        consumed += len(prompts)

        while pending:
            done, still = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending = list(still)
            for task in done:
                experiences = [self._process_response_into_experience(r, **generate_kwargs) for r in task.result()]
                if dynamic_filtering and all(e.scores is not None for e in experiences):
                    scores = [e.scores[0].item() for e in experiences]
                    average = sum(scores) / len(scores)
                    low, high = self.args.algo.dynamic_filtering_range
                    if not (low < average < high):
                        experiences = []
                if experiences:
                    accepted.extend(experiences)
                elif dynamic_filtering:
                    new_prompts, new_labels, new_images, exhausted = _collect_prompt_batch(dataloader_iter, 1)
                    consumed += len(new_prompts)
                    if exhausted and not new_prompts:
                        for t in pending:
                            t.cancel()
                        return [], consumed, True
                    if new_prompts:
                        pending.extend(self._dispatch_prompts_to_vllm(new_prompts, new_labels, images=new_images, **generate_kwargs))
        return accepted, consumed, exhausted

    def _dispatch_prompts_to_vllm(self, prompts, labels, *, images=None, **generate_kwargs):
        """_dispatch_prompts_to_vllm starts one generate_responses call per prompt and returns the tasks."""
        sampling_params = SamplingParams(
            temperature=generate_kwargs.get("temperature", 1.0),
            top_p=generate_kwargs.get("top_p", 1.0),
            top_k=generate_kwargs.get("top_k", -1),
            max_tokens=generate_kwargs.get("max_new_tokens"),
            min_tokens=generate_kwargs.get("min_new_tokens", 1),
            skip_special_tokens=generate_kwargs.get("skip_special_tokens", False),
            logprobs=1 if self.args.algo.advantage.is_correction_enable else None,
        )
        max_len = generate_kwargs.get("max_len", 2048)
        n_samples = generate_kwargs.get("n_samples_per_prompt", self.args.rollout.n_samples_per_prompt)

        heap = [(engine.get_num_unfinished_requests(), i) for i, engine in enumerate(self.vllm_engines)]
        heapq.heapify(heap)
        chosen = []
        for _ in prompts:
            load, i = heapq.heappop(heap)
            chosen.append(i)
            heapq.heappush(heap, (load + n_samples, i))
        if images is None:
            images = [None] * len(prompts)

        tasks = []
        for k, (prompt, label, image) in enumerate(zip(prompts, labels, images)):
            engine = self.vllm_engines[chosen[k]]
            coro = engine.generate_responses(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=max_len,
                hf_tokenizer=self.tokenizer,
                num_samples=n_samples,
                images=image,
            )
            tasks.append(asyncio.ensure_future(coro))
        return tasks

    def _process_response_into_experience(self, response, **generate_kwargs) -> Experience:
        """_process_response_into_experience turns one executor result into a one-sample Experience."""
        max_len = generate_kwargs.get("max_len", 2048)
        tokens = response["observation_tokens"].copy()
        reward = response.get("reward", None)
        score = response.get("scores", None)

        sequences = torch.tensor(tokens, dtype=torch.long)
        attention_mask = torch.ones(len(tokens), dtype=torch.long)
        action_mask = torch.zeros_like(attention_mask)
        for start, end in response["action_ranges"]:
            action_mask[start:end] = 1
        sequences = sequences[:max_len]
        attention_mask = attention_mask[:max_len]
        action_mask = action_mask[1:max_len]
        log_probs = None
        if response["rollout_log_probs"] is not None:
            log_probs = torch.tensor(response["rollout_log_probs"][1:max_len])

        ones = torch.where(action_mask)[0]
        response_length = (ones[-1] - ones[0] + 1).item() if len(ones) else 0
        total_length = attention_mask.float().sum()
        info = {"response_clip_ratio": torch.tensor([total_length >= max_len])}
        if reward is not None:
            info["reward"] = torch.tensor([reward])
        if score is not None:
            info["score"] = torch.tensor([score])
        for key, value in response.get("extra_logs", {}).items():
            if isinstance(value, torch.Tensor):
                value = value.flatten()[0].item()
            info[key] = torch.tensor([value])

        return Experience(
            sequences=sequences.unsqueeze(0),
            attention_mask=attention_mask.unsqueeze(0),
            action_mask=action_mask.unsqueeze(0),
            rollout_log_probs=log_probs.unsqueeze(0) if log_probs is not None else None,
            prompts=[response["prompt"]],
            labels=[response["label"]],
            images=[response.get("images")],
            mm_train_inputs=[response.get("mm_train_inputs")],
            rewards=torch.tensor([reward]) if reward is not None else None,
            scores=torch.tensor([score]) if score is not None else None,
            response_length=torch.tensor([response_length]),
            truncated=torch.tensor([response.get("truncated", False)]),
            total_length=torch.tensor([total_length]),
            info=info,
        )
