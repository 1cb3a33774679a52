"""Stand-in for ``vllm.utils``: ``random_uuid``."""

import uuid


def random_uuid() -> str:
    """random_uuid returns a fresh hex id, as vLLM's does."""
    return uuid.uuid4().hex
