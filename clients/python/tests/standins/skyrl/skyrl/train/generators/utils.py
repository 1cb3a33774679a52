"""Stand-in for ``skyrl.train.generators.utils`` (SkyRL a9564572, ``skyrl/train/generators/utils.py``).

Kept: ``get_generation_prompt_ids``, ``apply_overlong_filtering`` (zeroes
the whole loss mask of a sample whose stop reason is not "stop": SkyRL's way
of dropping a sample), ``prepare_generator_input`` (deep-copies each row's
extras per sample) and the env part of ``get_rollout_metrics``.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from skyrl.train.generators.base import BatchMetadata, GeneratorInput, TrajectoryID
from skyrl_gym.metrics import aggregate_for_environment


def get_custom_chat_template(chat_template_config: Any = None) -> Optional[str]:
    """get_custom_chat_template returns None: no custom template unless ``name_or_path`` is set (not supported here)."""
    if chat_template_config is not None and getattr(chat_template_config, "name_or_path", None):
        raise NotImplementedError("custom chat templates are not part of the stand-in")
    return None


def get_generation_prompt_ids(tokenizer: Any, tokenizer_kwargs: Optional[Dict[str, Any]] = None) -> List[int]:
    """get_generation_prompt_ids is the token ids the chat template adds for ``add_generation_prompt``."""
    kwargs = dict(tokenizer_kwargs or {})
    empty = tokenizer.apply_chat_template([{"role": "user", "content": ""}], tokenize=True, return_dict=False, **kwargs)
    with_prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": ""}], add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
    )
    return with_prompt[len(empty) :]


def apply_overlong_filtering(loss_masks: List[List[int]], stop_reasons: List[str]) -> List[List[int]]:
    """apply_overlong_filtering zeroes every loss mask whose stop reason is not "stop"."""
    assert len(loss_masks) == len(stop_reasons)
    return [[0] * len(m) if r != "stop" else m[:] for m, r in zip(loss_masks, stop_reasons)]


def get_rollout_metrics(
    responses: List[List[int]],
    rewards: List[Any],
    env_metrics: Optional[List[Dict[str, Any]]] = None,
    env_classes: Optional[List[str]] = None,
) -> Dict[str, Any]:
    """get_rollout_metrics keeps the token count and the per-env-class ``environment/<key>`` metrics."""
    out: Dict[str, Any] = {"generate/max_num_tokens": max((len(r) for r in responses), default=0)}
    if env_metrics is not None and env_classes is not None:
        by_env: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
        for i, m in enumerate(env_metrics):
            by_env[env_classes[i]].append(m)
        for env_name, ms in by_env.items():
            for k, v in aggregate_for_environment(env_name, ms).items():
                out[f"environment/{k}"] = v
    return out


def prepare_generator_input(
    prompts: List[Dict[str, Any]],
    n_samples_per_prompt: int,
    sampling_params: Optional[Dict[str, Any]],
    default_env_class: str,
    training_phase: str,
    global_step: int,
) -> Tuple[GeneratorInput, List[str]]:
    """prepare_generator_input repeats each dataset row n times, deep-copying its extras, with TrajectoryIDs."""
    all_prompts = [p["prompt"] for p in prompts for _ in range(n_samples_per_prompt)]
    envs = [p["env_class"] if p["env_class"] is not None else default_env_class for p in prompts for _ in range(n_samples_per_prompt)]
    extras = [copy.deepcopy(p["env_extras"]) for p in prompts for _ in range(n_samples_per_prompt)]
    ids: List[TrajectoryID] = []
    uids: List[str] = []
    for p in prompts:
        for rep in range(n_samples_per_prompt):
            ids.append(TrajectoryID(instance_id=p["uid"], repetition_id=rep))
            uids.append(p["uid"])
    batch: GeneratorInput = {
        "prompts": all_prompts,
        "env_classes": envs,
        "env_extras": extras,
        "sampling_params": sampling_params,
        "trajectory_ids": ids,
        "batch_metadata": BatchMetadata(global_step=global_step, training_phase=training_phase),
    }
    return batch, uids
