"""Stand-in for ``openrlhf.trainer.ppo_utils.experience`` (OpenRLHF v0.11.0, commit 3c3be623).

``Experience`` with the fields the rollout fills, ``concat_experiences``
(how ``RemoteExperienceMaker.split_rollout_samples`` batches samples:
tensors right-padded and concatenated, lists chained, ``info`` dicts
merged key by key) and ``split_experience_batch`` (which rejects an
``info`` entry whose length is not the batch size, e.g. a key that only
some samples had).
"""

import itertools
from dataclasses import dataclass, field, fields
from typing import Any, List

import torch
import torch.nn.functional as F


def zero_pad_sequences(sequences, side="left", value=0, stack=False):
    """zero_pad_sequences pads tensors on their last dimension to one length (``openrlhf/utils/utils.py``)."""
    longest = max(seq.size(-1) for seq in sequences)
    padded = []
    for seq in sequences:
        gap = longest - seq.size(-1)
        padded.append(F.pad(seq, (gap, 0) if side == "left" else (0, gap), value=value))
    return torch.stack(padded, dim=0) if stack else torch.cat(padded, dim=0)


@dataclass
class Experience:
    """Experience is a batch of rollout samples (the fields the rollout sets)."""

    sequences: torch.Tensor = None
    attention_mask: torch.Tensor = None
    action_mask: torch.Tensor = None
    rollout_log_probs: torch.Tensor = None
    rewards: torch.Tensor = None
    scores: torch.Tensor = None
    response_length: torch.Tensor = None
    truncated: torch.Tensor = None
    total_length: torch.Tensor = None
    index: list = None
    prompts: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    images: list = field(default_factory=list)
    mm_train_inputs: list = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @staticmethod
    def _merge_item(items: List, pad_value: int = 0) -> Any:
        if isinstance(items[0], torch.Tensor):
            return zero_pad_sequences(items, side="right", value=pad_value)
        if isinstance(items[0], list):
            return list(itertools.chain.from_iterable(items))
        if isinstance(items[0], dict):
            merged = {}
            for d in items:
                for key, value in d.items():
                    merged.setdefault(key, []).append(value)
            return {key: Experience._merge_item(values, pad_value) for key, values in merged.items()}
        if items[0] is None:
            return None
        raise ValueError(f"Unsupported type: {type(items[0])}")

    @staticmethod
    def concat_experiences(experiences_list: List["Experience"], pad_token_id) -> "Experience":
        """concat_experiences merges single-sample experiences into one batch."""
        if not experiences_list:
            return Experience()
        merged = {}
        for f in fields(Experience):
            values = [getattr(e, f.name) for e in experiences_list]
            merged[f.name] = Experience._merge_item(values, pad_token_id if f.name == "sequences" else 0)
        return Experience(**merged)


def split_experience_batch(experience: Experience) -> List[Experience]:
    """split_experience_batch splits a batch into single samples, checking every tensor's batch size."""
    batch_size = len(experience.sequences)
    items = []
    for i in range(batch_size):
        kwargs = {}
        for f in fields(Experience):
            value = getattr(experience, f.name)
            if value is None:
                kwargs[f.name] = None
            elif isinstance(value, torch.Tensor):
                if len(value) != batch_size:
                    raise ValueError(f"Size of {f.name} ({len(value)}) does not match batch_size ({batch_size})")
                kwargs[f.name] = value[i]
            elif isinstance(value, dict):
                d = {}
                for k, v in value.items():
                    if len(v) != batch_size:
                        raise ValueError(f"Size of {f.name}[{k}] ({len(v)}) does not match batch_size ({batch_size})")
                    d[k] = v[i]
                kwargs[f.name] = d
            elif isinstance(value, list):
                kwargs[f.name] = [value[i]] if len(value) == batch_size else value
        items.append(Experience(**kwargs))
    return items
