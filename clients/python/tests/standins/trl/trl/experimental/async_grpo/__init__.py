"""Stand-in for ``trl.experimental.async_grpo``; upstream imports AsyncGRPOConfig and AsyncGRPOTrainer here, the stand-in only has the rollout worker module."""
