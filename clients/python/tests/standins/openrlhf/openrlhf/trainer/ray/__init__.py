"""Stand-in for ``openrlhf.trainer.ray`` (upstream imports vllm_engine, which needs ray; this one is empty)."""
