"""Result types of the gymserver client (PROTOCOL.md §4).

They are plain dataclasses built from the server's msgpack maps. Field names
follow the wire (and the Go ``gym`` package's JSON names); every type keeps
the full map it came from in ``raw`` so nothing the server sends is lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .errors import ERROR_CODES, MASKED_CLASSES
from .shapes import CommandResult, TestCase

__all__ = [
    "Message",
    "ToolCall",
    "Observation",
    "Evaluation",
    "StepResult",
    "CloseResult",
    "Action",
    "MASKED_ERROR_CLASSES",
    "normalize_tool_calls",
]

#: Message is one chat message in the OpenAI shape (role, content, ...).
Message = Dict[str, Any]
#: ToolCall is one tool call in the OpenAI shape
#: ``{"id", "type": "function", "function": {"name", "arguments"}}``.
ToolCall = Dict[str, Any]
#: Action is what :meth:`Session.step` accepts: raw model text, one tool
#: call, a list of tool calls, or a message-like dict with ``tool_calls``.
Action = Union[str, Mapping[str, Any], Sequence[Mapping[str, Any]]]


#: MASKED_ERROR_CLASSES are the per-call error classes that mark a step as
#: an infrastructure failure (PROTOCOL.md §6): the masked classes that are
#: wire codes.
MASKED_ERROR_CLASSES = MASKED_CLASSES & ERROR_CODES


def _map(v: Any) -> Dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> List[Any]:
    return list(v) if isinstance(v, (list, tuple)) else []


@dataclass
class Observation:
    """Observation is what the agent sees after a step.

    Attributes:
        messages: one OpenAI ``tool`` message per tool call, in call order.
        text: the same results as plain text, for text-only policies.
    """

    messages: List[Message] = field(default_factory=list)
    text: str = ""

    @classmethod
    def from_wire(cls, m: Any) -> "Observation":
        """from_wire builds an Observation from its wire map."""
        m = _map(m)
        return cls(messages=[dict(x) for x in _list(m.get("messages")) if isinstance(x, Mapping)], text=str(m.get("text") or ""))


@dataclass
class Evaluation:
    """Evaluation is the verdict of the hidden tests on an episode.

    Attributes:
        reward: in [0, 1]: the pass rate, or 0/1 in binary mode.
        success: True when the reward reached the task's threshold.
        mask: True when a trainer should drop the sample (the failure says
            nothing about the agent).
        error_class: set when the tests could not be run (``verifier_error``)
            or the sandbox failed (``sandbox_error``).
        passed, failed, errors, skipped, total: test case counts.
        tests: one map per test case (name, status, message, command).
        commands: one map per unit-test command (command, exit_code,
            output, duration, source, success).
        raw: the full wire map.
    """

    reward: float = 0.0
    success: bool = False
    mask: bool = False
    error_class: str = ""
    error: str = ""
    mode: str = ""
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    total: int = 0
    tests: List[TestCase] = field(default_factory=list)
    commands: List[CommandResult] = field(default_factory=list)
    duration: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_wire(cls, m: Any) -> "Evaluation":
        """from_wire builds an Evaluation from its wire map."""
        m = _map(m)
        return cls(
            reward=float(m.get("reward") or 0.0),
            success=bool(m.get("success")),
            mask=bool(m.get("mask")),
            error_class=str(m.get("error_class") or ""),
            error=str(m.get("error") or ""),
            mode=str(m.get("mode") or ""),
            passed=int(m.get("passed") or 0),
            failed=int(m.get("failed") or 0),
            errors=int(m.get("errors") or 0),
            skipped=int(m.get("skipped") or 0),
            total=int(m.get("total") or 0),
            tests=[dict(t) for t in _list(m.get("tests")) if isinstance(t, Mapping)],
            commands=[dict(t) for t in _list(m.get("commands")) if isinstance(t, Mapping)],
            duration=float(m.get("duration") or 0.0),
            raw=m,
        )


@dataclass
class StepResult:
    """StepResult is the outcome of one step, in Gym terms.

    Attributes:
        observation: the tool messages and their plain-text rendering.
        reward: 0 until the episode ends; the final step carries the
            evaluation's reward.
        terminated: the episode reached a terminal state (``mark_done``).
        truncated: the episode was cut short (action limit, timeout,
            sandbox failure).
        info: diagnostics: ``step``, ``actions``, ``calls`` (exit codes,
            durations, error classes), ``termination_reason`` and
            ``evaluation`` on the final step, plus anything else the server
            sends.
        tool_calls: with a raw-text action, the calls the server parsed
            from it (with their ids), to build the assistant message.
        raw: the full wire map.
    """

    observation: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Dict[str, Any] = field(default_factory=dict)
    tool_calls: List[ToolCall] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        """done reports whether the episode ended with this step."""
        return self.terminated or self.truncated

    @property
    def evaluation(self) -> Optional[Evaluation]:
        """evaluation is the final evaluation, set on the step that ended the episode."""
        ev = self.info.get("evaluation")
        return Evaluation.from_wire(ev) if isinstance(ev, Mapping) else None

    @property
    def termination_reason(self) -> str:
        """termination_reason says why the episode ended ("" while it runs)."""
        return str(self.info.get("termination_reason") or "")

    @property
    def mask(self) -> bool:
        """mask reports an infrastructure failure in this step: a trainer should drop the sample.

        It is the server's ``info.mask`` hint, or a masked error class on a
        call or on the evaluation.
        """
        if self.info.get("mask"):
            return True
        for c in _list(self.info.get("calls")):
            if isinstance(c, Mapping) and c.get("error_class") in MASKED_ERROR_CLASSES:
                return True
        ev = self.evaluation
        return bool(ev is not None and ev.mask)

    @classmethod
    def from_wire(cls, m: Any) -> "StepResult":
        """from_wire builds a StepResult from its wire map."""
        m = _map(m)
        return cls(
            observation=Observation.from_wire(m.get("observation")),
            reward=float(m.get("reward") or 0.0),
            terminated=bool(m.get("terminated")),
            truncated=bool(m.get("truncated")),
            info=_map(m.get("info")),
            tool_calls=[dict(c) for c in _list(m.get("tool_calls")) if isinstance(c, Mapping)],
            raw=m,
        )


@dataclass
class CloseResult:
    """CloseResult is the final record of a closed session.

    Attributes:
        termination_reason: how the episode ended (``closed`` when it was
            closed while still running).
        evaluation: None when the episode was closed before it ended and was
            never evaluated.
        raw: the full wire map.
    """

    session_id: str = ""
    env: str = ""
    task: str = ""
    steps: int = 0
    actions: int = 0
    termination_reason: str = ""
    agent_done: bool = False
    evaluation: Optional[Evaluation] = None
    start_time: float = 0.0
    end_time: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def reward(self) -> float:
        """reward is the evaluation's reward, 0.0 when the episode was not evaluated."""
        return self.evaluation.reward if self.evaluation is not None else 0.0

    @classmethod
    def from_wire(cls, m: Any) -> "CloseResult":
        """from_wire builds a CloseResult from its wire map."""
        m = _map(m)
        ev = m.get("evaluation")
        return cls(
            session_id=str(m.get("session_id") or m.get("session") or ""),
            env=str(m.get("env") or ""),
            task=str(m.get("task") or ""),
            steps=int(m.get("steps") or 0),
            actions=int(m.get("actions") or 0),
            termination_reason=str(m.get("termination_reason") or ""),
            agent_done=bool(m.get("agent_done")),
            evaluation=Evaluation.from_wire(ev) if isinstance(ev, Mapping) else None,
            start_time=float(m.get("start_time") or 0.0),
            end_time=float(m.get("end_time") or 0.0),
            raw=m,
        )


def _one_call(c: Mapping[str, Any], index: int) -> ToolCall:
    """_one_call normalises one tool call to the OpenAI shape.

    It accepts ``{"function": {"name", "arguments"}}`` (OpenAI) and the flat
    ``{"name", "arguments"}`` form; dict arguments are JSON-encoded, since
    the wire carries the raw argument text exactly as a model produced it.
    """
    fn = c.get("function")
    if isinstance(fn, Mapping):
        name, args = fn.get("name"), fn.get("arguments")
    else:
        name, args = c.get("name"), c.get("arguments", c.get("args", c.get("parameters")))
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool call {index}: no function name in {dict(c)!r}")
    if args is None:
        args = "{}"
    elif not isinstance(args, str):
        args = json.dumps(args)
    out: ToolCall = {"id": str(c.get("id") or ""), "type": "function", "function": {"name": name, "arguments": args}}
    return out


def normalize_tool_calls(action: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> List[ToolCall]:
    """normalize_tool_calls turns a structured action into a list of OpenAI tool calls.

    Accepted shapes: a single call (OpenAI or flat ``{"name", "arguments"}``),
    a list of calls, or a message-like dict with a ``tool_calls`` list (an
    assistant message from a chat-completions API). Dict arguments are
    JSON-encoded. An empty list is allowed (the server answers with an
    agent_error observation).
    """
    if isinstance(action, Mapping):
        if "tool_calls" in action:
            calls = action.get("tool_calls") or []
        else:
            calls = [action]
    elif isinstance(action, (list, tuple)):
        calls = list(action)
    else:
        raise TypeError(f"action must be text, a tool call or a list of tool calls, not {type(action).__name__}")
    out = []
    for i, c in enumerate(calls):
        if not isinstance(c, Mapping):
            raise TypeError(f"tool call {i} must be a mapping, not {type(c).__name__}")
        out.append(_one_call(c, i))
    return out
