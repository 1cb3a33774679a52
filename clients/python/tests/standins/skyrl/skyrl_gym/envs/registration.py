"""Stand-in for ``skyrl_gym.envs.registration`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/envs/registration.py``).

``make`` merges the registered kwargs with its own (a deep copy of the
registered ones, updated with the call's, so ``extras`` is the caller's
dict), constructs the env, checks it is an ``Env`` and then assigns
``env.spec = EnvSpec(...)``, overwriting any ``spec`` attribute the env set.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Union

from skyrl_gym import Env, error


@dataclass
class EnvSpec:
    """EnvSpec describes how to build a registered environment."""

    id: str
    entry_point: Optional[Union[Callable[..., Env], str]] = field(default=None)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.id

    def make(self, **kwargs: Any) -> Env:
        """make builds the environment of this spec."""
        return make(self, **kwargs)


#: registry maps env ids to their specs.
registry: Dict[str, EnvSpec] = {}


def load_env_creator(name: str) -> Callable[..., Env]:
    """load_env_creator imports ``module:attr`` and returns the attribute."""
    mod_name, attr_name = name.split(":")
    return getattr(importlib.import_module(mod_name), attr_name)


def register(id: str, entry_point: Optional[Union[Callable[..., Env], str]] = None, kwargs: Optional[Dict[str, Any]] = None) -> None:
    """register adds an env to the registry; a second env of the same name is an error."""
    assert entry_point is not None, "`entry_point` must be provided"
    new_spec = EnvSpec(id=id, entry_point=entry_point, kwargs=kwargs if kwargs is not None else {})
    for s in registry.values():
        if s.name == new_spec.name:
            raise error.RegistrationError(f"An environment with name `{new_spec.name}` is already registered (id=`{s.id}`).")
    registry[new_spec.id] = new_spec


def deregister(id: str) -> None:
    """deregister removes an env from the registry."""
    if id not in registry:
        raise error.Error(f"No registered env with id: {id}.")
    del registry[id]


def spec(env_id: str) -> EnvSpec:
    """spec returns the registered spec of env_id."""
    s = registry.get(env_id)
    if s is None:
        raise error.Error(f"No registered env with id: {env_id}")
    return s


def make(id: Union[str, EnvSpec], **kwargs: Any) -> Env:
    """make builds a registered environment and sets its ``spec``."""
    if isinstance(id, EnvSpec):
        env_spec = id
    else:
        env_spec = registry.get(id)  # type: ignore[assignment]
        if env_spec is None:
            raise error.Error(f"No registered env with id: {id}.")
    env_spec_kwargs = copy.deepcopy(env_spec.kwargs)
    env_spec_kwargs.update(kwargs)
    if env_spec.entry_point is None:
        raise error.Error(f"{env_spec.id} registered but entry_point is not specified")
    creator = env_spec.entry_point if callable(env_spec.entry_point) else load_env_creator(env_spec.entry_point)
    try:
        env = creator(**env_spec_kwargs)
    except TypeError as e:
        raise type(e)(f"{e} was raised from the environment creator for {env_spec.id} with kwargs ({env_spec_kwargs})")
    if not isinstance(env, Env):
        raise TypeError(f"The environment must inherit from the skyrl_gym.Env class, actual class: {type(env)}. ")
    env.spec = EnvSpec(id=env_spec.id, entry_point=env_spec.entry_point, kwargs=env_spec_kwargs)  # type: ignore[attr-defined]
    return env
