"""Config stands in for omegaconf's DictConfig/ListConfig: attribute and key access, ``get``, ``in``.

VERL hands its Hydra config around as a DictConfig and reads it with both
``cfg.a.b`` and ``cfg.get("k", default)``; ``trainer_config`` builds the
part of VERL's trainer config (``verl/trainer/config/ppo_trainer.yaml``,
``rollout/rollout.yaml``) the agent loops read.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional


class Config:
    """Config wraps a dict; nested dicts and lists are wrapped on access."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    @staticmethod
    def wrap(v: Any) -> Any:
        """wrap returns v as a Config (dict), ListConfig (list) or itself."""
        if isinstance(v, Mapping):
            return Config(v)
        if isinstance(v, list):
            return ListConfig(v)
        return v

    def __getattr__(self, name: str) -> Any:
        try:
            return Config.wrap(self._data[name])
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Any:
        return Config.wrap(self._data[name])

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, name: str, default: Any = None) -> Any:
        """get returns the value of name, or default when absent."""
        return Config.wrap(self._data[name]) if name in self._data else default

    def keys(self) -> List[str]:
        """keys lists the keys."""
        return list(self._data)

    def to_container(self) -> Dict[str, Any]:
        """to_container returns the plain dict (OmegaConf.to_container)."""
        return unwrap(self)


class ListConfig(list):
    """ListConfig is a list whose dict and list items are wrapped on access."""

    def __getitem__(self, i: Any) -> Any:
        return Config.wrap(list.__getitem__(self, i))

    def __iter__(self) -> Iterator[Any]:
        for v in list.__iter__(self):
            yield Config.wrap(v)


def unwrap(v: Any) -> Any:
    """unwrap turns Config/ListConfig back into plain dicts and lists."""
    if isinstance(v, Config):
        return {k: unwrap(x) for k, x in v._data.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in list.__iter__(v)]
    if isinstance(v, Mapping):
        return {k: unwrap(x) for k, x in v.items()}
    return v


def trainer_config(
    *,
    prompt_length: int = 4096,
    response_length: int = 16384,
    calculate_log_probs: bool = True,
    agent_loop_config_path: Optional[str] = None,
    tool_config_path: Optional[str] = None,
    max_assistant_turns: Optional[int] = None,
    default_agent_loop: str = "single_turn_agent",
) -> Config:
    """trainer_config is the subset of VERL's trainer config the agent-loop worker and loops read, with its defaults."""
    return Config(
        {
            "actor_rollout_ref": {
                "model": {"path": "toy/char-model", "custom_chat_template": None},
                "rollout": {
                    "name": "vllm",
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "calculate_log_probs": calculate_log_probs,
                    "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
                    "agent": {"num_workers": 1, "default_agent_loop": default_agent_loop, "agent_loop_config_path": agent_loop_config_path},
                    "multi_turn": {
                        "max_assistant_turns": max_assistant_turns,
                        "max_user_turns": None,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 256,
                        "tool_response_truncate_side": "middle",
                        "tool_config_path": tool_config_path,
                        "interaction_config_path": None,
                        "format": "hermes",
                    },
                    "trace": {"backend": None, "token2text": False},
                },
            },
            "data": {"apply_chat_template_kwargs": {}},
            "reward_model": {"enable": False, "use_reward_loop": False, "enable_resource_pool": False},
            "trainer": {"project_name": "gymserver", "experiment_name": "standin"},
        }
    )
