"""Stand-in for ``trl.trainer.grpo_config.GRPOConfig``: the fields the environment path reads.

Defaults as in trl/trainer/grpo_config.py at f2cd5771 (num_generations 8,
max_completion_length 512, beta 0.0, scale_rewards "group",
multi_objective_aggregation "sum_then_normalize", max_tool_calling_iterations
None = unbounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass
class GRPOConfig:
    """GRPOConfig holds the GRPO settings the stand-in trainer uses."""

    num_generations: int = 8
    max_completion_length: int = 512
    max_tool_calling_iterations: Optional[int] = None
    reward_weights: Optional[List[float]] = None
    scale_rewards: str = "group"
    multi_objective_aggregation: str = "sum_then_normalize"
    mask_truncated_completions: bool = False
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    beta: float = 0.0
