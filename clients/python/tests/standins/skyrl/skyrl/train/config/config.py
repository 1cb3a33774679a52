"""Stand-in for ``skyrl.train.config.config`` (SkyRL a9564572, ``skyrl/train/config/config.py``).

Only the fields the generator and the env path read are kept, with
upstream's defaults (``GeneratorConfig.max_turns == 1``, ``max_env_workers
== 32``). As upstream, building a config from a dict is strict: a key that
is not a field of its dataclass raises ``ValueError`` (upstream's
``validate_dict_keys_against_dataclass``), so an env's config must be a
declared field of ``SkyRLGymConfig`` (or of a subclass). ``from_dict_config``
takes a plain dict here (upstream: an OmegaConf ``DictConfig``, converted to
one).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


@dataclass
class BaseConfig:
    """BaseConfig is the base of SkyRL's typed config dataclasses."""

    @classmethod
    def from_dict_config(cls, cfg: Dict[str, Any]) -> Any:
        """from_dict_config builds the config from a (nested) dict, strictly."""
        return build_nested_dataclass(cls, cfg)


@dataclass
class SamplingParams(BaseConfig):
    """SamplingParams are the generation settings."""

    max_generate_length: int = 1024
    temperature: float = 1.0
    logprobs: Optional[int] = 1
    stop: Optional[List[str]] = None


@dataclass
class ChatTemplateConfig(BaseConfig):
    """ChatTemplateConfig selects a custom chat template (none by default)."""

    source: str = "name"
    name_or_path: Optional[str] = None


@dataclass
class InferenceEngineConfig(BaseConfig):
    """InferenceEngineConfig keeps the one field the generator reads."""

    enable_return_routed_experts: bool = False


@dataclass
class GeneratorConfig(BaseConfig):
    """GeneratorConfig configures SkyRLGymGenerator."""

    inference_engine: InferenceEngineConfig = field(default_factory=InferenceEngineConfig)
    n_samples_per_prompt: int = 5
    batched: bool = False
    max_turns: int = 1
    max_input_length: Optional[int] = None
    chat_template: ChatTemplateConfig = field(default_factory=ChatTemplateConfig)
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    use_conversation_multi_turn: bool = True
    append_eos_token_after_stop_str_in_multi_turn: bool = True
    zero_reward_on_non_stop: bool = False
    use_cache_salt: bool = True
    apply_overlong_filtering: bool = False
    step_wise_trajectories: bool = False


@dataclass
class SkyRLGymConfig(BaseConfig):
    """SkyRLGymConfig holds the env workers and one field per configurable env class (built-in envs left out)."""

    max_env_workers: int = 32


@dataclass
class EnvironmentConfig(BaseConfig):
    """EnvironmentConfig is ``environment.*``."""

    env_class: str = "gsm8k"
    skyrl_gym: SkyRLGymConfig = field(default_factory=SkyRLGymConfig)


@dataclass
class TrainerConfig(BaseConfig):
    """TrainerConfig keeps the one field the generator config defaults from."""

    max_prompt_length: int = 512


@dataclass
class SkyRLTrainConfig(BaseConfig):
    """SkyRLTrainConfig is the root config."""

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)

    def __post_init__(self) -> None:
        if self.generator.max_input_length is None:
            self.generator.max_input_length = self.trainer.max_prompt_length


def validate_dict_keys_against_dataclass(datacls: Type[Any], d: Dict[str, Any]) -> None:
    """validate_dict_keys_against_dataclass raises ValueError for keys that are not fields of datacls."""
    valid = {f.name for f in dataclasses.fields(datacls)}
    invalid = set(d.keys()) - valid
    if invalid:
        raise ValueError(f"Invalid fields {invalid} for {datacls.__name__}. Valid fields are {valid}.")


def _dataclass_type(annotation: Any) -> Optional[type]:
    """_dataclass_type returns the dataclass an annotation names (through Optional), or None."""
    if typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            found = _dataclass_type(arg)
            if found is not None:
                return found
        return None
    return annotation if isinstance(annotation, type) and dataclasses.is_dataclass(annotation) else None


def build_nested_dataclass(datacls: Type[T], d: Dict[str, Any]) -> T:
    """build_nested_dataclass builds datacls from d, recursing into dataclass-typed fields."""
    validate_dict_keys_against_dataclass(datacls, d)
    hints = typing.get_type_hints(datacls)
    kwargs: Dict[str, Any] = {}
    for f in dataclasses.fields(datacls):
        if f.name not in d:
            continue
        value = d[f.name]
        nested = _dataclass_type(hints.get(f.name, f.type))
        kwargs[f.name] = build_nested_dataclass(nested, value) if nested is not None and isinstance(value, dict) else value
    return datacls(**kwargs)  # type: ignore[call-arg]
