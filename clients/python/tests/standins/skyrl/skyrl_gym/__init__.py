"""Stand-in for ``skyrl_gym`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/__init__.py``).

It exports the same names: ``Env``, ``make``, ``spec``, ``register``,
``registry``, ``error``, ``envs`` (``tools`` and ``pprint_registry`` are left out).
"""

from skyrl_gym.core import Env
from skyrl_gym import error
from skyrl_gym.envs.registration import make, register, registry, spec
from skyrl_gym import envs

__all__ = ["Env", "make", "spec", "register", "registry", "envs", "error"]
