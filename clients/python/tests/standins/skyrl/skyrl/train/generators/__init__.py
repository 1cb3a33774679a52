"""Stand-in for ``skyrl.train.generators`` (SkyRL a9564572, ``skyrl/train/generators/__init__.py``; the VLM generator is left out)."""

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator

__all__ = ["GeneratorInterface", "GeneratorInput", "GeneratorOutput", "SkyRLGymGenerator"]
