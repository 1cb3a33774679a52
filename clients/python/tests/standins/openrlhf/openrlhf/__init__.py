"""Stand-in for the ``openrlhf`` package (OpenRLHF v0.11.0, commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7).

Only what drives an agent_func file is mirrored: ``openrlhf.utils.agent``
(the executor loop), ``openrlhf.trainer.ray.vllm_engine`` (loading the
agent_func file, ``RolloutRayActor.generate`` / ``generate_responses``),
``openrlhf.trainer.ppo_utils.samples_generator`` (batch gathering and the
response -> Experience conversion), ``openrlhf.trainer.ppo_utils.experience``
(batch concatenation) and ``openrlhf.utils.loss_utils`` (loss
normalizers). The upstream package ``__init__`` files import heavy modules
(transformers, deepspeed, ray); these are empty.
"""
