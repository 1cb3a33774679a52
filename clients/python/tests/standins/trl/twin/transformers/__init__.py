"""Twin-test stub of transformers (see _twin_stub): a version TRL's environment_factory accepts (>= 5.2).

Two classes carry what TRL reads from them: ``TrainingArguments`` (the
settings GRPOConfig inherits, as a dataclass) and ``Trainer`` (what
``Trainer.__init__`` leaves on the trainer: model, args, accelerator,
state). Everything else is a placeholder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

import _twin_stub


@dataclass
class TrainingArguments:
    """TrainingArguments stands for transformers' training settings: the fields TRL's GRPO reads, with transformers' defaults."""

    _VALID_DICT_FIELDS = []  # a class attribute TRL's configs extend

    output_dir: Optional[str] = None
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_steps: int = -1
    seed: int = 42
    fp16: bool = False
    do_eval: bool = False
    eval_strategy: str = "no"
    auto_find_batch_size: bool = False
    parallelism_config: Any = None
    deepspeed_plugin: Any = None
    gradient_checkpointing_kwargs: Optional[dict] = None
    dataloader_num_workers: int = 0
    report_to: Any = "none"
    accelerator_config: Any = field(default_factory=lambda: SimpleNamespace(dispatch_batches=None))

    def __post_init__(self) -> None:
        """__post_init__ has nothing to check in the stub."""

    @property
    def world_size(self) -> int:
        """world_size is the number of processes: one."""
        return 1

    @property
    def distributed_state(self) -> Any:
        """distributed_state says the run is not distributed."""
        return SimpleNamespace(distributed_type="NO")


class Accelerator:
    """Accelerator stands for accelerate's Accelerator in one CPU process."""

    is_main_process = True
    num_processes = 1
    process_index = 0

    def __init__(self) -> None:
        import torch

        self.device = torch.device("cpu")
        self.state = SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None)

    def gather(self, tensor: Any) -> Any:
        """gather returns tensor (one process)."""
        return tensor

    def unwrap_model(self, model: Any) -> Any:
        """unwrap_model returns model (nothing wraps it)."""
        return model

    def prepare_model(self, model: Any, **kwargs: Any) -> Any:
        """prepare_model returns model."""
        return model


class Trainer:
    """Trainer stands for transformers.Trainer: its __init__ stores what GRPOTrainer reads afterwards."""

    def __init__(self, model: Any = None, args: Any = None, train_dataset: Any = None, eval_dataset: Any = None, processing_class: Any = None, callbacks: Any = None, **kwargs: Any) -> None:
        self.model = model
        self.model_wrapped = model
        self.args = args
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.processing_class = processing_class
        self.callbacks = list(callbacks or [])
        self.accelerator = Accelerator()
        self.state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
        self.is_deepspeed_enabled = False
        self.is_fsdp_enabled = False

    def add_callback(self, callback: Any) -> None:
        """add_callback records callback."""
        self.callbacks.append(callback)

    def _prepare_inputs(self, inputs: Any) -> Any:
        return inputs


# CONFIG_MAPPING: the model types transformers knows (TRL's telemetry looks the model's up).
_twin_stub.stub_package(__name__, __version__="5.8.0", TrainingArguments=TrainingArguments, Trainer=Trainer, CONFIG_MAPPING={})
