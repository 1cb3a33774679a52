"""Adapters that plug gymserver into RL trainers, one small module each.

Each module imports its trainer lazily and falls back to a small local base
class when the trainer is not installed, so it is always importable:

* :mod:`gymserver.adapters.verl`: ``GymServerAgentLoop`` (VERL
  ``AgentLoopBase``) and ``GymServerTool`` (VERL ``BaseTool``).
* :mod:`gymserver.adapters.trl`: ``GymServerToolEnv`` for GRPOTrainer's
  ``environment_factory`` and reward functions.
* :mod:`gymserver.adapters.skyrl`: ``GymServerTextEnv`` (SkyRL ``BaseTextEnv``).
* :mod:`gymserver.adapters.openrlhf`: ``GymServerAgentInstance`` /
  ``GymServerAgentExecutor`` (OpenRLHF agent API) and the function-style
  ``reset``/``step`` of an ``agent_func`` file.
* :mod:`gymserver.adapters.llamagym`: a LlamaGym-style ``Agent`` running on
  :class:`~gymserver.gym.RemoteEnv`.

Connection settings come from arguments or the ``GYMSERVER_URL`` and
``GYMSERVER_TOKEN`` environment variables.
"""
