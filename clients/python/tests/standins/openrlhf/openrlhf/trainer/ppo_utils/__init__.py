"""Stand-in for ``openrlhf.trainer.ppo_utils`` (upstream re-exports its submodules; this one is empty)."""
