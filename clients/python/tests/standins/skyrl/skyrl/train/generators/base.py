"""Stand-in for ``skyrl.train.generators.base`` (SkyRL a9564572, ``skyrl/train/generators/base.py``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, TypedDict, Union

ConversationType = List[Dict[str, str]]


@dataclass
class TrajectoryID:
    """TrajectoryID names one sample: the dataset row and the repetition."""

    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        """to_string is ``<instance_id>_<repetition_id>``."""
        return f"{self.instance_id}_{self.repetition_id}"


@dataclass
class BatchMetadata:
    """BatchMetadata says which step and phase a batch belongs to."""

    global_step: int
    training_phase: str


class GeneratorInput(TypedDict, total=False):
    """GeneratorInput is one batch of prompts (``prepare_generator_input`` builds it)."""

    prompts: List[ConversationType]
    env_classes: List[str]
    env_extras: Optional[List[Dict[str, Any]]]
    sampling_params: Optional[Dict[str, Any]]
    trajectory_ids: Optional[List[TrajectoryID]]
    batch_metadata: Optional[BatchMetadata]


class GeneratorOutput(TypedDict, total=False):
    """GeneratorOutput is what the trainer turns into a training batch."""

    prompt_token_ids: List[List[int]]
    response_ids: List[List[int]]
    rewards: Union[List[float], List[List[float]]]
    loss_masks: List[List[int]]
    stop_reasons: Optional[List[str]]
    rollout_metrics: Optional[Dict[str, Any]]
    rollout_logprobs: Optional[List[List[float]]]
    trajectory_ids: Optional[List[TrajectoryID]]
    is_last_step: Optional[List[bool]]
    env_metrics: Optional[List[Dict[str, Any]]]


class GeneratorInterface(ABC):
    """GeneratorInterface generates trajectories for a batch."""

    @abstractmethod
    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """generate returns the outputs in the order of the batch."""
        raise NotImplementedError
