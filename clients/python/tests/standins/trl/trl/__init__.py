"""Stand-in for the ``trl`` package (TRL is not installed here).

Only the environment path of TRL is reproduced, in the modules of the same
names as upstream (huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8,
2026-07-24; the same contract holds in v1.9.0 35def3ee and v1.8.0):

* ``trl.trainer.grpo_trainer.GRPOTrainer``: environment_factory, tools,
  ``get_reward``, the tool-calling loop and reward scoring;
* ``trl.experimental.async_grpo.async_rollout_worker``: AsyncGRPOTrainer's
  rollout worker, which pickles its arguments into a spawned process;
* ``trl.chat_template_utils.parse_response``.

Tests put this directory first on ``sys.path`` so these are imported under
the real names, in the test process and in spawned worker processes alike.
"""

__version__ = "1.9.0"
