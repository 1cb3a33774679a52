"""Frame encoding and the WebSocket connection factory.

Everything that depends on the exact wire layout (PROTOCOL.md §1–§2) or on
the installed ``websockets`` version lives here, so the rest of the client is
independent of both. Supported: websockets 10.4 (Debian bookworm, the legacy
asyncio client) and websockets 13+ (``websockets.asyncio.client``).
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Mapping, Optional

import msgpack

#: SUBPROTOCOL is the WebSocket subprotocol of protocol version 1.
SUBPROTOCOL = "gymserver.v1+msgpack"
#: WS_PATH is the WebSocket endpoint path.
WS_PATH = "/v1/ws"
#: MAX_ID is the largest request id the protocol allows (2^53 - 1).
MAX_ID = (1 << 53) - 1
#: DEFAULT_MAX_FRAME_BYTES is the server's default frame limit; the client
#: accepts frames at least this large (PROTOCOL.md §5).
DEFAULT_MAX_FRAME_BYTES = 16 << 20


def encode(frame: Mapping[str, Any]) -> bytes:
    """encode packs one request frame as a msgpack map (str as str, bytes as bin)."""
    return msgpack.packb(dict(frame), use_bin_type=True)


def decode(data: Any) -> Dict[str, Any]:
    """decode unpacks one response frame.

    It raises ValueError for a text message, malformed msgpack, trailing
    bytes, or a value that is not a map.
    """
    if isinstance(data, str):
        raise ValueError("text message on a binary protocol")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise ValueError(f"bad msgpack frame: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"frame is a {type(obj).__name__}, not a map")
    return obj


def normalize_url(url: str) -> str:
    """normalize_url accepts ws(s)://, http(s):// and bare host:port URLs, with or without the /v1/ws path."""
    u = url.strip()
    if u.startswith("http://"):
        u = "ws://" + u[len("http://") :]
    elif u.startswith("https://"):
        u = "wss://" + u[len("https://") :]
    elif "://" not in u:
        u = "ws://" + u
    scheme, rest = u.split("://", 1)
    if "/" not in rest or rest.endswith("/") and rest.count("/") == 1:
        u = f"{scheme}://{rest.rstrip('/')}{WS_PATH}"
    return u


def http_base(url: str) -> str:
    """http_base returns the http(s) origin of a server URL (for /healthz, /v1/envs)."""
    u = normalize_url(url)
    scheme, rest = u.split("://", 1)
    host = rest.split("/", 1)[0]
    return ("https" if scheme == "wss" else "http") + "://" + host


def handshake_status(exc: BaseException) -> Optional[int]:
    """handshake_status returns the HTTP status of a refused upgrade, or None.

    websockets 10.x raises InvalidStatusCode(status_code); 11+ raises
    InvalidStatus(response) as well.
    """
    code = getattr(exc, "status_code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    code = getattr(resp, "status_code", None)
    return code if isinstance(code, int) else None


def handshake_body(exc: BaseException) -> bytes:
    """handshake_body returns the body of a refused upgrade when the websockets version keeps it."""
    resp = getattr(exc, "response", None)
    body = getattr(resp, "body", None)
    return body if isinstance(body, (bytes, bytearray)) else b""


async def open_connection(
    url: str,
    *,
    token: Optional[str],
    open_timeout: Optional[float],
    ping_interval: Optional[float],
    ping_timeout: Optional[float],
    max_size: Optional[int],
    user_agent: Optional[str] = None,
) -> Any:
    """open_connection dials the server and returns an open websockets connection.

    It offers the gymserver subprotocol, sends ``Authorization: Bearer`` when
    a token is given, disables compression (the server does not negotiate
    it) and lets the library answer the server's pings.
    """
    headers: Dict[str, str] = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        from websockets.asyncio.client import connect as new_connect  # websockets >= 13
    except ImportError:
        new_connect = None
    kwargs: Dict[str, Any] = dict(
        subprotocols=[SUBPROTOCOL],
        open_timeout=open_timeout,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        max_size=max_size,
        compression=None,
        close_timeout=5,
    )
    if new_connect is not None:
        if headers:
            kwargs["additional_headers"] = headers
        if user_agent:
            kwargs["user_agent_header"] = user_agent
        return await new_connect(url, **kwargs)
    from websockets.legacy.client import connect as legacy_connect

    if headers:
        kwargs["extra_headers"] = headers
    if user_agent:
        kwargs["user_agent_header"] = user_agent
    params = inspect.signature(legacy_connect.__init__).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in params}
    return await legacy_connect(url, **kwargs)
