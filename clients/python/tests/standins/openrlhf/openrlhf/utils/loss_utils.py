"""Stand-in for ``openrlhf.utils.loss_utils._optimizer_step_loss_norm`` (OpenRLHF v0.11.0, commit 3c3be623).

The loss of one optimizer step is normalized by the number of action
tokens and the number of non-empty sequences (a sample whose action mask is
all zero counts in neither). No torch.distributed here (one rank).
"""

import torch


def _optimizer_step_loss_norm(masks, dp_group=None, dp_size=1, gas=1):
    """_optimizer_step_loss_norm returns dp_size, batch_num_tokens and global_batch_size for the masks of one step."""
    num_tokens = torch.zeros((), dtype=torch.float32)
    num_samples = torch.zeros((), dtype=torch.float32)
    for mask in masks:
        mask = mask.to(dtype=torch.float32)
        num_tokens += mask.sum()
        num_samples += (mask.reshape(mask.shape[0], -1).sum(dim=-1) > 0).sum()
    return {"dp_size": dp_size, "batch_num_tokens": num_tokens / gas, "global_batch_size": num_samples / gas}
