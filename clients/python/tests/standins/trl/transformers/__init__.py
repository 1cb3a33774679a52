"""Stand-in for the ``transformers`` package: only what TRL's environment path uses from it.

The real package is not installed here. ``transformers.utils.get_json_schema``
is the part that matters: TRL hands an environment's bound methods to
``apply_chat_template(tools=...)``, which converts every callable with it.
TRL's environment_factory needs transformers >= 5.2 (trl/trainer/grpo_trainer.py:592-597
at TRL f2cd5771).
"""

__version__ = "5.8.0"
