"""Stand-in for ``skyrl.train.config`` (SkyRL a9564572, ``skyrl/train/config/__init__.py``): re-exports config.py."""

from skyrl.train.config.config import (
    BaseConfig,
    ChatTemplateConfig,
    EnvironmentConfig,
    GeneratorConfig,
    InferenceEngineConfig,
    SamplingParams,
    SkyRLGymConfig,
    SkyRLTrainConfig,
    TrainerConfig,
    build_nested_dataclass,
)

__all__ = [
    "BaseConfig",
    "ChatTemplateConfig",
    "EnvironmentConfig",
    "GeneratorConfig",
    "InferenceEngineConfig",
    "SamplingParams",
    "SkyRLGymConfig",
    "SkyRLTrainConfig",
    "TrainerConfig",
    "build_nested_dataclass",
]
