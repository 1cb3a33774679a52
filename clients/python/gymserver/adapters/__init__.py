"""Adapters that plug gymserver into RL trainers, one module each.

Each module imports its trainer lazily and stays importable without it
(``HAVE_VERL``, ``HAVE_SKYRL``, ... say whether the trainer was found); it
never exports look-alike trainer classes. The release and commit each one was
checked against are in its module docstring and in the README's "Trainers"
section.

* :mod:`gymserver.adapters.verl`: ``GymServerAgentLoop`` (VERL
  ``AgentLoopBase``), ``GymServerTool`` (``BaseTool``) and
  ``GymServerToolAgentLoop`` (VERL's ``ToolAgentLoop`` that ends the tools'
  session with the trajectory).
* :mod:`gymserver.adapters.skyrl`: ``GymServerTextEnv`` (``BaseTextEnv``),
  ``GymServerGenerator`` (``SkyRLGymGenerator`` that drops masked samples and
  rewards length-cut episodes), ``train_config_class`` and ``register_env``.
* :mod:`gymserver.adapters.trl`: ``tool_env_factory`` for GRPOTrainer's and
  AsyncGRPOTrainer's ``environment_factory`` (the server's tools as methods,
  the environment-owned ``get_reward`` of TRL >= 1.8); ``gymserver_reward``
  for TRL < 1.8.
* :mod:`gymserver.adapters.openrlhf`: ``GymServerAgentInstance`` /
  ``GymServerAgentExecutor`` for an ``--agent_func_path`` file.
* :mod:`gymserver.adapters.llamagym`: LlamaGym's ``Agent`` (drop-in, PPO step
  in plain PyTorch) and ``run_episode`` on :class:`~gymserver.gym.RemoteEnv`.

Connection settings come from arguments or the ``GYMSERVER_URL`` and
``GYMSERVER_TOKEN`` environment variables; connections are per-process
:class:`~gymserver.pool.AsyncPool` s (``_shared``).
"""
