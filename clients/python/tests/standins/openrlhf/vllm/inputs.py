"""Stand-in for ``vllm.inputs``: ``TokensPrompt`` is a dict with ``prompt_token_ids`` (and optionally ``multi_modal_data``)."""

from typing import Any, Dict


class TokensPrompt(Dict[str, Any]):
    """TokensPrompt is vLLM's token-ids prompt: a TypedDict upstream, a dict here."""
