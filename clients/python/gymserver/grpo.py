"""GRPO helper: run a group of sessions of one task concurrently and compute group-relative advantages.

A group is N episodes of the same task with the same seed, driven by one
policy. Each rollout's reward is compared with the group's: by default
advantage = (r - mean) / (std + eps) (GRPO); ``run_group(estimator=...)``
picks Dr. GRPO (``"dr_grpo"``), RLOO (``"rloo"``) or a callable instead
(:mod:`gymserver.rewards`, which also has relative and Pareto rewards).
Rollouts that failed for reasons that say nothing about the agent (the
server's mask hint, a sandbox or verifier error, a policy exception, a lost
connection) are flagged ``masked`` and left out of the group statistics,
so a trainer can drop them.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from .client import AsyncClient, AsyncSession
from .errors import GymServerError
from .results import Action, Evaluation, Message, StepResult
from .rewards import Estimator, advantages, get_estimator
from .rewards import grpo as _grpo

__all__ = ["Policy", "Rollout", "GroupResult", "run_group", "group_advantages"]

#: Policy is the user's async policy: given the session (whose ``messages``
#: is the transcript so far and ``tools`` the tool schemas) and the last
#: step result (None on the first turn), it returns the next action: raw
#: model text or tool calls. Returning ``None`` ends the episode early (it is
#: then evaluated). ``session.group_index`` tells the policy which member of
#: the group it is playing (0 … n-1).
Policy = Callable[[AsyncSession, Optional[StepResult]], Awaitable[Optional[Action]]]


@dataclass
class Rollout:
    """Rollout is one episode of a group.

    Attributes:
        index: position in the group.
        session_id: the server session id ("" if reset failed).
        reward: final reward (0.0 when masked).
        advantage: group-relative advantage from the group's estimator
            (0.0 when masked).
        masked: True when the sample should be dropped by the trainer.
        error_class: why it was masked or failed: ``policy_error``,
            ``sandbox_error``, ``connection_lost``, ... ("" if none).
        error: the error message.
        steps: steps taken.
        terminated, truncated: how the episode ended (both False when it
            was cut by ``max_turns`` and evaluated).
        termination_reason: the server's termination reason.
        messages: the full chat transcript (for the policy-gradient loss).
        evaluation: the hidden tests' verdict, when available.
        duration: wall seconds.
    """

    index: int
    session_id: str = ""
    reward: float = 0.0
    advantage: float = 0.0
    masked: bool = False
    error_class: str = ""
    error: str = ""
    steps: int = 0
    terminated: bool = False
    truncated: bool = False
    termination_reason: str = ""
    messages: List[Message] = field(default_factory=list)
    evaluation: Optional[Evaluation] = None
    duration: float = 0.0


@dataclass
class GroupResult:
    """GroupResult is the outcome of :func:`run_group`.

    Attributes:
        rollouts: one per group member, in index order.
        mean, std: statistics of the unmasked rewards (0.0 when none).
        eps: the epsilon used in the GRPO advantage denominator.
        estimator: the advantage estimator's name (``"grpo"``,
            ``"dr_grpo"``, ``"rloo"``), or the callable's name.
    """

    rollouts: List[Rollout]
    mean: float = 0.0
    std: float = 0.0
    eps: float = 1e-6
    estimator: str = "grpo"

    @property
    def rewards(self) -> List[float]:
        """rewards lists every rollout's reward, in index order."""
        return [r.reward for r in self.rollouts]

    @property
    def advantages(self) -> List[float]:
        """advantages lists every rollout's advantage (0.0 for masked ones)."""
        return [r.advantage for r in self.rollouts]

    @property
    def mask(self) -> List[bool]:
        """mask lists, per rollout, True when the trainer should drop it."""
        return [r.masked for r in self.rollouts]

    @property
    def valid(self) -> List[Rollout]:
        """valid lists the rollouts that were not masked."""
        return [r for r in self.rollouts if not r.masked]


def group_advantages(rewards: Sequence[float], masked: Optional[Sequence[bool]] = None, eps: float = 1e-6) -> List[float]:
    """group_advantages returns (r - mean) / (std + eps) per reward, with statistics over unmasked rewards only.

    ``std`` is the population standard deviation. Masked entries get 0.0.
    With no unmasked reward, or all unmasked rewards equal, every advantage
    is 0.0. It is :func:`gymserver.rewards.grpo` on plain lists.
    """
    return _grpo(list(rewards), masked, eps)


def _mean_std(vals: Sequence[float]) -> Tuple[float, float]:
    """_mean_std returns the mean and population standard deviation of vals, (0.0, 0.0) when empty."""
    if not vals:
        return 0.0, 0.0
    mean = sum(vals) / len(vals)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))


async def _one(
    client: AsyncClient,
    index: int,
    env: str,
    task: Optional[str],
    seed: Optional[int],
    options: Optional[Mapping[str, Any]],
    policy: Policy,
    max_turns: Optional[int],
    parser: Optional[str],
) -> Rollout:
    ro = Rollout(index=index)
    start = time.monotonic()
    session: Optional[AsyncSession] = None
    try:
        session = await client.reset(env, task, seed, options, parser=parser)
        session.group_index = index
        ro.session_id = session.id
        last: Optional[StepResult] = None
        while True:
            if max_turns is not None and ro.steps >= max_turns:
                break
            try:
                action = await policy(session, last)
            except Exception as e:  # the model API failed: not the agent's fault
                ro.masked, ro.error_class, ro.error = True, "policy_error", f"{type(e).__name__}: {e}"
                break
            if action is None:
                break
            last = await session.step(action)
            ro.steps += 1
            if last.mask:
                ro.masked = True
                ro.error_class = _masked_class(last)
            if last.terminated or last.truncated:
                ro.terminated, ro.truncated = last.terminated, last.truncated
                ro.termination_reason = last.termination_reason
                ro.reward = float(last.reward)
                ro.evaluation = last.evaluation
                break
        if not ro.masked and not (ro.terminated or ro.truncated):
            ro.evaluation = await session.evaluate()
            ro.reward = ro.evaluation.reward
            ro.termination_reason = "evaluated"
        if ro.evaluation is not None and ro.evaluation.mask:
            ro.masked = True
            ro.error_class = ro.evaluation.error_class or "verifier_error"
            ro.error = ro.evaluation.error
    except GymServerError as e:
        ro.error_class, ro.error = e.code, str(e)
        # An error the agent caused (it should not happen: bad actions are
        # observations) still says nothing reliable about the reward.
        ro.masked = True
    finally:
        if session is not None:
            ro.messages = list(session.messages)
            try:
                await session.close()
            except GymServerError:
                pass
    if ro.masked:
        ro.reward = 0.0
    ro.duration = time.monotonic() - start
    return ro


def _masked_class(res: StepResult) -> str:
    for c in res.info.get("calls") or []:
        if isinstance(c, Mapping) and c.get("error_class"):
            return str(c["error_class"])
    ev = res.evaluation
    if ev is not None and ev.error_class:
        return ev.error_class
    return "sandbox_error"


async def run_group(
    client: AsyncClient,
    env: str,
    policy: Policy,
    *,
    n: int,
    task: Optional[str] = None,
    seed: Optional[int] = None,
    options: Optional[Mapping[str, Any]] = None,
    max_turns: Optional[int] = None,
    parser: Optional[str] = None,
    eps: float = 1e-6,
    estimator: Union[str, Estimator] = "grpo",
) -> GroupResult:
    """run_group runs ``n`` episodes of one task with one seed concurrently and returns rewards and advantages.

    Each episode: reset, then ``policy(session, last_step)`` → ``step``
    until the episode terminates or is truncated, the policy returns
    ``None``, or ``max_turns`` steps were taken (then the episode is
    evaluated). Sessions are always closed. Rewards of masked rollouts
    (infrastructure failures, policy exceptions) are excluded from the group
    statistics and their advantage is 0.0.

    ``estimator`` computes the advantages: ``"grpo"`` (default, (r - mean) /
    (std + eps)), ``"dr_grpo"`` (r - mean), ``"rloo"`` (r - mean of the
    others), or a callable ``(rewards, masked) -> advantages``
    (:mod:`gymserver.rewards`). An unknown name raises ValueError before
    any episode starts.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    fn = get_estimator(estimator)
    rollouts = await asyncio.gather(
        *(_one(client, i, env, task, seed, options, policy, max_turns, parser) for i in range(n))
    )
    advs = advantages([r.reward for r in rollouts], fn, [r.masked for r in rollouts], eps)
    for r, a in zip(rollouts, advs):
        r.advantage = a
    mean, std = _mean_std([r.reward for r in rollouts if not r.masked])
    name = estimator if isinstance(estimator, str) else getattr(estimator, "__name__", type(estimator).__name__)
    return GroupResult(rollouts=list(rollouts), mean=mean, std=std, eps=eps, estimator=name)

