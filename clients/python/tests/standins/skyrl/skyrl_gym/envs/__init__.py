"""Stand-in for ``skyrl_gym.envs`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/envs/__init__.py``).

Upstream also registers its built-in envs (gsm8k, text2sql, ...); the
stand-in registers none.
"""

from skyrl_gym.envs.registration import deregister, register

__all__ = ["deregister", "register"]
