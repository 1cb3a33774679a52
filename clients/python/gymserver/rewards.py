"""Reward computers and group advantage estimators (RL Primitives' RewardComputer, for gymserver groups).

Reward computers turn a group's outcomes into training rewards, after the
episodes ran:

* :func:`absolute`: every reward as it is.
* :func:`relative`: the normalised rank of each reward within its group, in
  [0, 1]; ties share the mean of the ranks they span.
* :func:`pareto`: the non-dominated front of each rollout over several
  :class:`Objective` s (reward, actions, tokens, time, per-test results),
  each to maximise or minimise, scaled to [0, 1].

Advantage estimators turn a group's rewards into advantages:

* :func:`grpo`: ``(r - mean) / (std + eps)`` (GRPO).
* :func:`dr_grpo`: ``r - mean`` (Dr. GRPO: no division by the std).
* :func:`rloo`: ``r - mean of the others`` (RLOO, leave-one-out).

Every function takes either a plain list of rewards with an optional list
of ``masked`` flags, or a :class:`~gymserver.grpo.GroupResult` (its rewards
and mask). Masked samples (infrastructure failures, see
:mod:`gymserver.grpo`) are left out of every statistic, rank and front,
and get 0.0. Results are plain lists of floats in the input's order.

Example::

    g = await run_group(client, env, policy, n=8, seed=3, estimator="rloo")
    g.advantages                       # RLOO advantages, 0.0 where masked
    r = pareto(g, [REWARD, ACTIONS])   # more reward against fewer tool calls
    adv = dr_grpo(r, g.mask)           # advantages of the Pareto rewards
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # grpo imports this module; only the type names are needed here
    from .grpo import GroupResult, Rollout

__all__ = [
    "Objective",
    "REWARD",
    "ACTIONS",
    "STEPS",
    "TOKENS",
    "TIME",
    "PASSED",
    "tokens",
    "case",
    "case_objectives",
    "absolute",
    "relative",
    "pareto",
    "pareto_fronts",
    "grpo",
    "dr_grpo",
    "rloo",
    "ESTIMATORS",
    "Estimator",
    "advantages",
    "get_estimator",
    "RewardComputer",
]

#: Rewards is what the reward computers and estimators take: a plain
#: sequence of rewards, or a GroupResult (anything with ``rollouts`` whose
#: items have ``reward`` and ``masked``).
Rewards = Union[Sequence[float], "GroupResult"]

#: Estimator is an advantage estimator: ``(rewards, masked) -> advantages``,
#: 0.0 for masked samples.
Estimator = Callable[..., List[float]]

MAX, MIN = "max", "min"


# --- input handling -----------------------------------------------------


def _is_group(v: Any) -> bool:
    return hasattr(v, "rollouts")


def _unpack(values: Rewards, masked: Optional[Sequence[bool]]) -> Tuple[List[float], List[bool]]:
    """_unpack returns (rewards, masked flags) from a plain list or a GroupResult.

    With a GroupResult, ``masked`` (if given) masks further samples on top
    of the group's own mask.
    """
    if _is_group(values):
        rollouts = list(values.rollouts)  # type: ignore[union-attr]
        rewards = [float(r.reward) for r in rollouts]
        flags = [bool(r.masked) for r in rollouts]
    else:
        rewards = [float(v) for v in values]  # type: ignore[union-attr]
        flags = [False] * len(rewards)
    if masked is not None:
        extra = [bool(m) for m in masked]
        if len(extra) != len(rewards):
            raise ValueError(f"rewards and masked differ in length ({len(rewards)} and {len(extra)})")
        flags = [a or b for a, b in zip(flags, extra)]
    return rewards, flags


# --- reward computers ---------------------------------------------------


def absolute(values: Rewards, masked: Optional[Sequence[bool]] = None) -> List[float]:
    """absolute returns each reward as it is (independent scoring); masked samples get 0.0."""
    rewards, flags = _unpack(values, masked)
    return [0.0 if m else r for r, m in zip(rewards, flags)]


def relative(values: Rewards, masked: Optional[Sequence[bool]] = None, direction: str = MAX) -> List[float]:
    """relative returns each reward's normalised rank within the group, in [0, 1].

    Over the n unmasked samples, a sample with ``below`` samples worse than
    it and ``equal`` samples equal to it (itself included) gets
    ``(below + (equal - 1) / 2) / (n - 1)``: the worst gets 0, the best 1,
    and ties share the mean of the ranks they span, so equal rewards get
    equal values and the values always average 0.5. A single sample (or a
    group of equal rewards) gets 0.5. ``direction="min"`` ranks smaller
    values higher. Masked samples get 0.0 and are not ranked.
    """
    sign = _sign(direction)
    rewards, flags = _unpack(values, masked)
    vals = [sign * r for r, m in zip(rewards, flags) if not m]
    n = len(vals)
    out = []
    for r, m in zip(rewards, flags):
        if m:
            out.append(0.0)
            continue
        if n == 1:
            out.append(0.5)
            continue
        v = sign * r
        below = sum(1 for x in vals if x < v)
        equal = sum(1 for x in vals if x == v)
        out.append((below + (equal - 1) / 2) / (n - 1))
    return out


def _sign(direction: str) -> float:
    if direction == MAX:
        return 1.0
    if direction == MIN:
        return -1.0
    raise ValueError(f"direction must be {MAX!r} or {MIN!r}, got {direction!r}")


@dataclass(frozen=True)
class Objective:
    """Objective is one criterion of a Pareto ranking.

    Attributes:
        name: what it measures ("reward", "actions", "case:tests/test_x.py::test_y").
        direction: ``"max"`` (more is better) or ``"min"`` (less is better).
        value: reads the objective from a :class:`~gymserver.grpo.Rollout`;
            needed only when ranking a GroupResult (plain points carry their
            values already).
    """

    name: str
    direction: str = MAX
    value: Optional[Callable[["Rollout"], float]] = None

    def __post_init__(self) -> None:
        _sign(self.direction)


def _tool_calls(r: "Rollout") -> int:
    return sum(len(m.get("tool_calls") or []) for m in r.messages if m.get("role") == "assistant")


#: _TOKEN_RE splits text into word pieces and single punctuation marks: a
#: tokenizer-free estimate of a model's token count.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def _approx_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def _assistant_text(r: "Rollout") -> List[str]:
    """_assistant_text lists what the policy produced: assistant contents and tool call arguments."""
    out: List[str] = []
    for m in r.messages:
        if m.get("role") != "assistant":
            continue
        if isinstance(m.get("content"), str):
            out.append(m["content"])
        for c in m.get("tool_calls") or []:
            fn = c.get("function") if isinstance(c, Mapping) else None
            if isinstance(fn, Mapping):
                out.append(str(fn.get("name") or ""))
                args = fn.get("arguments")
                out.append(args if isinstance(args, str) else repr(args))
    return out


def tokens(count: Optional[Callable[[str], int]] = None) -> Objective:
    """tokens returns the objective "tokens the policy produced" (minimised).

    It counts the assistant messages' content and tool-call names and
    arguments of the transcript with ``count`` (e.g. ``lambda s:
    len(tokenizer.encode(s))``); without one, with an estimate: word pieces
    plus punctuation marks. The server does not see a model's tokens, so
    pass your tokenizer when the exact count matters.
    """
    fn = count or _approx_tokens
    return Objective("tokens", MIN, lambda r: float(sum(fn(t) for t in _assistant_text(r))))


def _passed(r: "Rollout") -> float:
    return float(r.evaluation.passed) if r.evaluation is not None else 0.0


#: REWARD is the rollout's reward (maximised).
REWARD = Objective("reward", MAX, lambda r: float(r.reward))
#: ACTIONS is the number of tool calls in the transcript (minimised).
ACTIONS = Objective("actions", MIN, lambda r: float(_tool_calls(r)))
#: STEPS is the number of steps (turns) taken (minimised).
STEPS = Objective("steps", MIN, lambda r: float(r.steps))
#: TOKENS is the estimated number of tokens the policy produced (minimised); see :func:`tokens`.
TOKENS = tokens()
#: TIME is the episode's wall time in seconds (minimised).
TIME = Objective("time", MIN, lambda r: float(r.duration))
#: PASSED is the number of hidden test cases that passed (maximised).
PASSED = Objective("passed", MAX, _passed)


def case(name: str) -> Objective:
    """case returns the objective "hidden test case ``name`` passed": 1.0 when it passed, else 0.0 (maximised).

    A rollout whose evaluation lacks the test (not run, not evaluated)
    scores 0.0 on it.
    """

    def value(r: "Rollout") -> float:
        if r.evaluation is None:
            return 0.0
        for t in r.evaluation.tests:
            if t.get("name") == name:
                return 1.0 if t.get("status") == "passed" else 0.0
        return 0.0

    return Objective(f"case:{name}", MAX, value)


def case_objectives(group: "GroupResult") -> List[Objective]:
    """case_objectives returns one :func:`case` objective per hidden test case seen in the group's evaluations, sorted by name."""
    names = set()
    for r in group.rollouts:
        if r.evaluation is not None:
            names.update(str(t.get("name")) for t in r.evaluation.tests if t.get("name"))
    return [case(n) for n in sorted(names)]

ObjectiveSpec = Union[Objective, str]


def _points(
    values: Union[Sequence[Sequence[float]], "GroupResult"],
    objectives: Optional[Sequence[ObjectiveSpec]],
    masked: Optional[Sequence[bool]],
) -> Tuple[List[List[float]], List[bool], List[float]]:
    """_points returns the points oriented so that larger is better on every axis, the mask and the signs."""
    if _is_group(values):
        objs = list(objectives) if objectives is not None else [REWARD]
        for o in objs:
            if not isinstance(o, Objective) or o.value is None:
                raise ValueError(f"ranking a GroupResult needs Objectives with a value function, got {o!r}")
        rollouts = list(values.rollouts)  # type: ignore[union-attr]
        raw = [[float(o.value(r)) for o in objs] for r in rollouts]  # type: ignore[misc]
        flags = [bool(r.masked) for r in rollouts]
    else:
        raw = [[float(x) for x in p] for p in values]  # type: ignore[union-attr]
        width = len(raw[0]) if raw else 0
        objs = list(objectives) if objectives is not None else [MAX] * width
        flags = [False] * len(raw)
    signs = [_sign(o.direction if isinstance(o, Objective) else o) for o in objs]
    for i, p in enumerate(raw):
        if len(p) != len(signs):
            raise ValueError(f"point {i} has {len(p)} values for {len(signs)} objectives")
        if any(math.isnan(x) for x in p):
            raise ValueError(f"point {i} has a NaN value")
    if masked is not None:
        extra = [bool(m) for m in masked]
        if len(extra) != len(raw):
            raise ValueError(f"points and masked differ in length ({len(raw)} and {len(extra)})")
        flags = [a or b for a, b in zip(flags, extra)]
    return [[s * x for s, x in zip(signs, p)] for p in raw], flags, signs


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """_dominates reports whether a is at least as good as b everywhere and better somewhere (larger is better)."""
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def pareto_fronts(
    values: Union[Sequence[Sequence[float]], "GroupResult"],
    objectives: Optional[Sequence[ObjectiveSpec]] = None,
    masked: Optional[Sequence[bool]] = None,
) -> List[int]:
    """pareto_fronts returns each sample's non-dominated front: 0 for the Pareto front, 1 for the front left when it is removed, ...

    ``values`` is a list of points (one number per objective) with
    ``objectives`` a list of directions (``"max"``/``"min"``) or
    :class:`Objective` s (default: every objective maximised), or a
    GroupResult with ``objectives`` (default ``[REWARD]``) that read the
    rollouts. A point dominates another when it is at least as good on
    every objective and better on one; equal points share a front. Masked
    samples get -1 and dominate nothing.
    """
    pts, flags, _ = _points(values, objectives, masked)
    front = [-1] * len(pts)
    left = [i for i, m in enumerate(flags) if not m]
    f = 0
    while left:
        cur = [i for i in left if not any(_dominates(pts[j], pts[i]) for j in left if j != i)]
        for i in cur:
            front[i] = f
        left = [i for i in left if front[i] < 0]
        f += 1
    return front


def pareto(
    values: Union[Sequence[Sequence[float]], "GroupResult"],
    objectives: Optional[Sequence[ObjectiveSpec]] = None,
    masked: Optional[Sequence[bool]] = None,
) -> List[float]:
    """pareto returns a reward in [0, 1] per sample from its non-dominated front (see :func:`pareto_fronts`).

    With fronts 0 … F, front f scores ``(F - f) / F``: the Pareto front 1.0,
    the last front 0.0, the ones between evenly spaced. When every sample
    is on the Pareto front (F = 0) all score 1.0. Masked samples get 0.0.
    """
    fronts = pareto_fronts(values, objectives, masked)
    last = max(fronts, default=-1)
    out = []
    for f in fronts:
        if f < 0:
            out.append(0.0)
        elif last == 0:
            out.append(1.0)
        else:
            out.append((last - f) / last)
    return out


# --- advantage estimators -----------------------------------------------


def _valid(rewards: Sequence[float], flags: Sequence[bool]) -> List[float]:
    return [r for r, m in zip(rewards, flags) if not m]


def _flat(vals: Sequence[float]) -> bool:
    """_flat reports whether a group carries no signal: no sample, or all equal.

    The estimators then return exact zeros rather than rounding noise such
    as 0.1 - (0.1 + 0.1 + 0.1) / 3.
    """
    return not vals or min(vals) == max(vals)


def grpo(values: Rewards, masked: Optional[Sequence[bool]] = None, eps: float = 1e-6) -> List[float]:
    """grpo returns GRPO advantages: ``(r - mean) / (std + eps)`` over the unmasked rewards.

    ``std`` is the population standard deviation. When the unmasked rewards
    are all equal (one sample included) every advantage is 0.0, whatever
    ``eps``. Masked samples get 0.0.
    """
    rewards, flags = _unpack(values, masked)
    vals = _valid(rewards, flags)
    if _flat(vals):
        return [0.0] * len(rewards)
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return [0.0 if m else (r - mean) / (std + eps) for r, m in zip(rewards, flags)]


def dr_grpo(values: Rewards, masked: Optional[Sequence[bool]] = None) -> List[float]:
    """dr_grpo returns Dr. GRPO advantages: ``r - mean`` over the unmasked rewards (no division by the std).

    When the unmasked rewards are all equal every advantage is 0.0. Masked
    samples get 0.0.
    """
    rewards, flags = _unpack(values, masked)
    vals = _valid(rewards, flags)
    if _flat(vals):
        return [0.0] * len(rewards)
    mean = sum(vals) / len(vals)
    return [0.0 if m else r - mean for r, m in zip(rewards, flags)]


def rloo(values: Rewards, masked: Optional[Sequence[bool]] = None) -> List[float]:
    """rloo returns RLOO advantages: each reward minus the mean of the other unmasked rewards.

    With n unmasked rewards this is ``n / (n - 1) * (r - mean)``. A single
    unmasked sample has no baseline and gets 0.0; equal rewards get 0.0, as
    do masked samples.
    """
    rewards, flags = _unpack(values, masked)
    vals = _valid(rewards, flags)
    n = len(vals)
    if n < 2 or _flat(vals):
        return [0.0] * len(rewards)
    total = sum(vals)
    return [0.0 if m else r - (total - r) / (n - 1) for r, m in zip(rewards, flags)]


#: ESTIMATORS maps the estimator names that :func:`advantages` and
#: :func:`gymserver.grpo.run_group` accept to their functions.
ESTIMATORS: Dict[str, Estimator] = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo}


def get_estimator(estimator: Union[str, Estimator]) -> Estimator:
    """get_estimator returns the estimator named ``estimator`` (a key of :data:`ESTIMATORS`), or ``estimator`` itself when it is callable.

    Raises ValueError for an unknown name.
    """
    if callable(estimator):
        return estimator
    try:
        return ESTIMATORS[estimator]
    except (KeyError, TypeError):
        raise ValueError(f"unknown advantage estimator {estimator!r} (want one of {sorted(ESTIMATORS)} or a callable)") from None


def advantages(
    values: Rewards,
    estimator: Union[str, Estimator] = "grpo",
    masked: Optional[Sequence[bool]] = None,
    eps: float = 1e-6,
) -> List[float]:
    """advantages returns the advantages of ``values`` with the named (or given) estimator.

    ``eps`` is passed to :func:`grpo` only. A callable estimator is called as
    ``estimator(rewards, masked)`` with plain lists, and must return one
    advantage per reward.
    """
    fn = get_estimator(estimator)
    if fn is grpo:
        return grpo(values, masked, eps)
    rewards, flags = _unpack(values, masked)
    out = [float(a) for a in fn(rewards, flags)]
    if len(out) != len(rewards):
        raise ValueError(f"estimator returned {len(out)} advantages for {len(rewards)} rewards")
    return [0.0 if m else a for a, m in zip(out, flags)]


class RewardComputer:
    """RewardComputer computes rewards for a group after it ran, like RL Primitives' RewardComputer.

    ``objectives`` (default ``[REWARD]``) are what it scores; ``absolute``
    and ``relative`` use the first one (``relative`` honours its
    direction), ``pareto`` all of them. ``compute_rewards(group,
    method=...)`` takes a GroupResult (or a list of Rollouts) and returns
    one reward per rollout, 0.0 for masked ones.
    """

    METHODS = ("absolute", "relative", "pareto")

    def __init__(self, objectives: Optional[Sequence[Objective]] = None, method: str = "absolute") -> None:
        self.objectives = list(objectives) if objectives else [REWARD]
        for o in self.objectives:
            if o.value is None:
                raise ValueError(f"objective {o.name!r} has no value function")
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
        self.method = method

    def compute_rewards(self, group: Union["GroupResult", Sequence["Rollout"]], method: Optional[str] = None) -> List[float]:
        """compute_rewards returns one reward per rollout of ``group`` with ``method`` (default: the computer's)."""
        method = method or self.method
        rollouts = list(group.rollouts) if _is_group(group) else list(group)  # type: ignore[union-attr]
        flags = [bool(r.masked) for r in rollouts]
        first = self.objectives[0]
        if method == "absolute":
            return [0.0 if m else float(first.value(r)) for r, m in zip(rollouts, flags)]  # type: ignore[misc]
        if method == "relative":
            return relative([float(first.value(r)) for r in rollouts], flags, first.direction)  # type: ignore[misc]
        if method == "pareto":
            pts = [[float(o.value(r)) for o in self.objectives] for r in rollouts]  # type: ignore[misc]
            return pareto(pts, self.objectives, flags)
        raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
