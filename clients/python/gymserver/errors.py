"""Typed exceptions for gymserver errors.

Every error the server reports (``{ok: false, error: {code, message}}``)
becomes an instance of one subclass of :class:`GymServerError`, chosen by the
error code; the client adds :class:`ConnectionLost`, :class:`RequestTimeout`
and :class:`ProtocolError` for failures it detects itself.

The mapping from wire codes to classes lives in exactly one place,
:func:`error_from_wire`, mirroring the Go side's single mapping function.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "GymServerError",
    "AgentError",
    "ToolTimeout",
    "SandboxError",
    "VerifierError",
    "PolicyError",
    "InvalidArgument",
    "NotFound",
    "EpisodeDone",
    "ResourceExhausted",
    "Unavailable",
    "Unauthenticated",
    "InternalError",
    "ConnectionLost",
    "RequestTimeout",
    "ProtocolError",
    "error_from_wire",
    "wire_error_for_http_status",
    "MASKED_CLASSES",
    "ERROR_CODES",
]

#: ERROR_CODES is the closed set of wire error codes (PROTOCOL.md §6).
ERROR_CODES = frozenset(
    {
        "invalid_argument",
        "not_found",
        "episode_done",
        "resource_exhausted",
        "unavailable",
        "unauthenticated",
        "internal",
        "agent_error",
        "tool_timeout",
        "sandbox_error",
        "verifier_error",
        "policy_error",
    }
)

# MASKED_CLASSES are the error classes that say nothing about the agent: a
# sample that failed with one of them should be dropped by a trainer, not
# scored. It matches gym.Masked on the Go side.
MASKED_CLASSES = frozenset(
    {"sandbox_error", "verifier_error", "policy_error", "unavailable", "internal", "connection_lost", "timeout"}
)


class GymServerError(Exception):
    """GymServerError is the base class of every error raised by the client.

    Attributes:
        code: the stable wire code (for example ``"not_found"``).
        error_class: the gym error class; equal to ``code`` for server
            errors, and a client-side class for client errors.
        reason: the server's refinement of the code (``"unknown_session"``,
            ``"draining"``, ...), or ``""``.
        mask: True when a sample that failed with this error should be
            dropped by a trainer rather than scored (an infrastructure
            failure that says nothing about the agent).
        message: the human-readable message.
        details: any extra fields the server sent with the error.
    """

    #: code is the default wire code of the class.
    code: str = "internal"

    def __init__(
        self,
        message: str = "",
        *,
        code: Optional[str] = None,
        mask: Optional[bool] = None,
        reason: str = "",
        details: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message
        self.reason = reason
        self.error_class = self.code
        self.mask = (self.code in MASKED_CLASSES) if mask is None else bool(mask)
        self.details: Dict[str, Any] = dict(details or {})
        super().__init__(message)

    def __str__(self) -> str:
        head = f"{self.code}/{self.reason}" if self.reason else self.code
        return f"{head}: {self.message}" if self.message else head

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, reason={self.reason!r}, "
            f"message={self.message!r}, mask={self.mask})"
        )


class AgentError(GymServerError):
    """AgentError is a bad action: unknown tool, malformed arguments."""

    code = "agent_error"


class ToolTimeout(GymServerError):
    """ToolTimeout is a tool call that ran past its time limit."""

    code = "tool_timeout"


class SandboxError(GymServerError):
    """SandboxError is an infrastructure failure of the sandbox (masked)."""

    code = "sandbox_error"


class VerifierError(GymServerError):
    """VerifierError is a failure to run or parse the hidden tests (masked)."""

    code = "verifier_error"


class PolicyError(GymServerError):
    """PolicyError is a failure of an LLM policy (masked)."""

    code = "policy_error"


class InvalidArgument(GymServerError):
    """InvalidArgument is a malformed request (bad parser, bad options...)."""

    code = "invalid_argument"


class NotFound(GymServerError):
    """NotFound is an unknown environment, task, session or tool."""

    code = "not_found"


class EpisodeDone(GymServerError):
    """EpisodeDone is a step on a session whose episode has ended."""

    code = "episode_done"


class ResourceExhausted(GymServerError):
    """ResourceExhausted is a breached server limit (sessions, frame size...)."""

    code = "resource_exhausted"


class Unavailable(GymServerError):
    """Unavailable is a server that is draining or not ready (masked)."""

    code = "unavailable"


class Unauthenticated(GymServerError):
    """Unauthenticated is a missing or wrong bearer token."""

    code = "unauthenticated"


class InternalError(GymServerError):
    """InternalError is a server bug: anything not classified otherwise (masked)."""

    code = "internal"


class ConnectionLost(GymServerError):
    """ConnectionLost is raised when the connection to the server is gone.

    Every request that was pending when the socket closed fails with it, and
    so does every later request on the same client. It is masked: the
    episode's outcome says nothing about the agent.
    """

    code = "connection_lost"


class RequestTimeout(GymServerError, TimeoutError):
    """RequestTimeout is a request that got no answer within its timeout.

    It also subclasses :class:`TimeoutError` so generic handlers catch it.
    """

    code = "timeout"


class ProtocolError(GymServerError):
    """ProtocolError is a frame the client could not understand."""

    code = "protocol_error"


# _BY_CODE maps each code to its class: every class above is a direct
# subclass of GymServerError with its own code.
_BY_CODE: Dict[str, Type[GymServerError]] = {cls.code: cls for cls in GymServerError.__subclasses__()}


def error_from_wire(err: Any) -> GymServerError:
    """error_from_wire builds the typed exception for a wire error object.

    It is the client's one mapping from wire codes to exception classes.
    ``err`` is the ``error`` map of a failed response: ``code``, ``message``,
    ``mask`` and optionally ``reason``; other fields end up in ``details``.
    The server's ``mask`` hint wins over the class default. A code outside
    the closed set (a newer server) is treated as ``internal`` but keeps its
    original code string.
    """
    if not isinstance(err, Mapping):
        return ProtocolError(f"malformed error object: {err!r}")
    code = str(err.get("code") or "internal")
    message = str(err.get("message") or "")
    mask = err.get("mask")
    reason = str(err.get("reason") or "")
    details = {k: v for k, v in err.items() if k not in ("code", "message", "mask", "reason")}
    cls = _BY_CODE.get(code, InternalError)
    return cls(message, code=code, mask=None if mask is None else bool(mask), reason=reason, details=details)


def wire_error_for_http_status(status: int, body: bytes = b"") -> Dict[str, Any]:
    """wire_error_for_http_status turns a refused WebSocket upgrade into a wire error map.

    The server answers a refused upgrade with a JSON ``{"error": {...}}``
    body (PROTOCOL.md §1); when the body is unavailable (websockets 10.x
    drops it) the HTTP status picks the code. Feed the result to
    :func:`error_from_wire`.
    """
    import json

    try:
        obj = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, UnicodeDecodeError):
        obj = None
    if isinstance(obj, Mapping) and isinstance(obj.get("error"), Mapping):
        return dict(obj["error"])
    codes = {400: "invalid_argument", 401: "unauthenticated", 403: "unauthenticated", 404: "not_found", 503: "unavailable"}
    code = codes.get(status, "unavailable")
    return {"code": code, "message": f"WebSocket upgrade refused with HTTP {status}", "mask": code == "unavailable"}
