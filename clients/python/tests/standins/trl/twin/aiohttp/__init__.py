"""Twin-test stub of aiohttp, and the twin's vLLM server: POST /v1/completions is answered by the scripted policy.

TRL's rollout worker talks to vLLM through ``aiohttp.ClientSession``
(``_run_loops`` opens it, ``_post`` sends ``/v1/completions`` with the prompt
token ids and ``max_tokens``, ``_generate_one_turn`` reads
``choices[0].token_ids`` and ``choices[0].logprobs.token_logprobs``). This
session answers such requests in process, as vLLM would with
``return_token_ids``, so all of TRL's worker code runs unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import _twin_stub


class ClientError(Exception):
    """ClientError is aiohttp's base transport error (TRL retries on it)."""


class ClientTimeout:
    """ClientTimeout holds a request timeout."""

    def __init__(self, total: Optional[float] = None, **kwargs: Any) -> None:
        self.total = total


class TCPConnector:
    """TCPConnector holds connection-pool settings."""

    def __init__(self, **kwargs: Any) -> None:
        self.options = kwargs


def _completion(payload: Dict[str, Any]) -> Dict[str, Any]:
    """_completion answers a vLLM /v1/completions request whose prompt is token ids."""
    from scripted_policy import ToyTokenizer, respond

    tok = ToyTokenizer()
    ids = tok.encode(respond(tok.decode(payload["prompt"])))[: payload["max_tokens"]]
    return {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": [-0.5] * len(ids)}}]}


class _Response:
    def __init__(self, body: Dict[str, Any]) -> None:
        self._body = body

    async def __aenter__(self) -> "_Response":
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        return False

    def raise_for_status(self) -> None:
        """raise_for_status never raises: every request is answered."""

    async def json(self) -> Dict[str, Any]:
        """json returns the response body."""
        return self._body


class ClientSession:
    """ClientSession answers POST .../v1/completions like a vLLM server running the scripted policy."""

    def __init__(self, connector: Any = None, **kwargs: Any) -> None:
        self.connector = connector

    async def __aenter__(self) -> "ClientSession":
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        return False

    def post(self, url: str, json: Optional[Dict[str, Any]] = None, timeout: Any = None) -> _Response:
        """post answers one request."""
        if not url.endswith("/v1/completions") or json is None:
            raise ClientError(f"the twin's vLLM only serves /v1/completions, not {url}")
        return _Response(_completion(json))


_twin_stub.stub_package(__name__, ClientError=ClientError, ClientTimeout=ClientTimeout, TCPConnector=TCPConnector, ClientSession=ClientSession)
