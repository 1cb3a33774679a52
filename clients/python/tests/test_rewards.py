"""Reward computers and advantage estimators (gymserver.rewards) against hand-computed values, and run_group's estimator choice on both backends."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, List, Optional

import pytest

import gymserver
from gymserver import rewards
from gymserver.grpo import GroupResult, Rollout, group_advantages, run_group
from gymserver.results import Evaluation
from gymserver.rewards import (
    ACTIONS,
    PASSED,
    REWARD,
    STEPS,
    TIME,
    TOKENS,
    Objective,
    RewardComputer,
    absolute,
    advantages,
    case,
    case_objectives,
    dr_grpo,
    grpo,
    pareto,
    pareto_fronts,
    relative,
    rloo,
)
from conftest import SOLUTION, Backend, wait_no_sessions

# The running example: four rewards, the last one masked (its 0.9 must not count).
R = [1.0, 0.0, 0.5, 0.9]
M = [False, False, False, True]


# --- advantage estimators -------------------------------------------------


def test_grpo_hand_computed() -> None:
    # unmasked 1, 0, 0.5: mean 0.5; population variance (0.25 + 0.25 + 0) / 3 = 1/6, std 0.4082483
    # advantages 0.5 / 0.4082483 = 1.2247449, -1.2247449, 0
    assert grpo(R, M, eps=0.0) == pytest.approx([1.2247449, -1.2247449, 0.0, 0.0], abs=1e-7)
    # eps = 0.1: 0.5 / 0.5082483 = 0.9837711
    assert grpo(R, M, eps=0.1) == pytest.approx([0.9837711, -0.9837711, 0.0, 0.0], abs=1e-7)
    # the old helper is the same function
    assert group_advantages(R, M, eps=0.0) == grpo(R, M, eps=0.0)
    # an unmasked 2-sample group: mean 0.5, std 0.5 -> +1, -1 (eps 0)
    assert grpo([1.0, 0.0], eps=0.0) == [1.0, -1.0]


def test_dr_grpo_hand_computed() -> None:
    # mean 0.5, no division: 0.5, -0.5, 0
    assert dr_grpo(R, M) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    # 0.2, 0.4, 0.9: mean 0.5 -> -0.3, -0.1, 0.4
    assert dr_grpo([0.2, 0.4, 0.9]) == pytest.approx([-0.3, -0.1, 0.4])


def test_rloo_hand_computed() -> None:
    # 1 - mean(0, 0.5) = 0.75; 0 - mean(1, 0.5) = -0.75; 0.5 - mean(1, 0) = 0
    assert rloo(R, M) == pytest.approx([0.75, -0.75, 0.0, 0.0])
    # 0.2, 0.4, 0.9: 0.2 - 0.65 = -0.45; 0.4 - 0.55 = -0.15; 0.9 - 0.3 = 0.6 (= 3/2 * Dr. GRPO's)
    assert rloo([0.2, 0.4, 0.9]) == pytest.approx([-0.45, -0.15, 0.6])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_estimator_edge_cases(name: str) -> None:
    fn = rewards.ESTIMATORS[name]
    assert fn([]) == []
    assert fn([0.7, 0.3], [True, True]) == [0.0, 0.0]  # all masked
    assert fn([0.7]) == [0.0]  # one sample: no one to compare with
    assert fn([0.7, 0.2], [False, True]) == [0.0, 0.0]  # one unmasked sample
    assert fn([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]  # zero std (0.1 * 3 / 3 is not exactly 0.1)
    assert fn([1.0, 1.0, 5.0], [False, False, True]) == [0.0, 0.0, 0.0]  # equal once the masked one is out
    with pytest.raises(ValueError, match="differ in length"):
        fn([1.0, 0.0], [False])


def test_grpo_zero_std_without_eps() -> None:
    # equal rewards with eps=0 must not divide 0 by 0
    assert grpo([0.5, 0.5], eps=0.0) == [0.0, 0.0]
    assert group_advantages([0.3, 0.3, 0.3], eps=0.0) == [0.0, 0.0, 0.0]


def test_advantages_dispatch() -> None:
    assert advantages(R, "grpo", M, eps=0.0) == grpo(R, M, eps=0.0)
    assert advantages(R, "dr_grpo", M) == dr_grpo(R, M)
    assert advantages(R, "rloo", M) == rloo(R, M)

    def best_only(rs: List[float], masked: List[bool]) -> List[float]:
        top = max(r for r, m in zip(rs, masked) if not m)
        return [1.0 if r == top else -1.0 for r in rs]  # says nothing about masks: advantages() zeroes them

    assert advantages(R, best_only, M) == [1.0, -1.0, -1.0, 0.0]
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        advantages(R, "ppo")
    with pytest.raises(ValueError, match="returned 1 advantages for 4 rewards"):
        advantages(R, lambda rs, ms: [0.0])


# --- reward computers -----------------------------------------------------


def test_absolute() -> None:
    assert absolute(R, M) == [1.0, 0.0, 0.5, 0.0]
    assert absolute([]) == []


def test_relative_hand_computed() -> None:
    # unmasked 0.2, 0.9, 0.2, 0.5 (n = 4, ranks 0..3 scaled by 1/3):
    # the two 0.2 share ranks 0 and 1 -> 0.5 / 3 = 1/6; 0.5 has rank 2 -> 2/3; 0.9 rank 3 -> 1
    vals = [0.2, 0.9, 0.2, 0.5, 1.0]
    got = relative(vals, [False, False, False, False, True])
    assert got == pytest.approx([1 / 6, 1.0, 1 / 6, 2 / 3, 0.0])
    assert sum(got[:4]) / 4 == pytest.approx(0.5)  # ties keep the mean at 0.5
    # smaller is better: the order flips
    assert relative([3.0, 1.0, 2.0], direction="min") == pytest.approx([0.0, 1.0, 0.5])
    assert relative([3.0, 1.0, 2.0]) == pytest.approx([1.0, 0.0, 0.5])


def test_relative_edge_cases() -> None:
    assert relative([0.4]) == [0.5]  # one sample sits in the middle
    assert relative([0.4, 0.4, 0.4]) == [0.5, 0.5, 0.5]  # all tied
    assert relative([0.4, 0.8], [True, True]) == [0.0, 0.0]  # all masked
    assert relative([0.4, 0.8], [True, False]) == [0.0, 0.5]
    assert relative([]) == []
    with pytest.raises(ValueError, match="direction"):
        relative([1.0], direction="up")


# Points (reward: max, actions: min) and their fronts, worked out by hand:
#   A (1.0, 3)  C (0.5, 2)  E (0.0, 1)  nobody is at least as good on both and better on one -> front 0
#   B (1.0, 5) is dominated by A, D (0.5, 4) by C, F (0.0, 6) by E; among B, D, F, F is dominated by D:
#   B, D -> front 1; F -> front 2. Rewards (F - f) / F with F = 2: 1, 0.5, 0.
POINTS = [(1.0, 3), (1.0, 5), (0.5, 2), (0.5, 4), (0.0, 1), (0.0, 6)]


def test_pareto_hand_computed() -> None:
    assert pareto_fronts(POINTS, ["max", "min"]) == [0, 1, 0, 1, 0, 2]
    assert pareto(POINTS, ["max", "min"]) == [1.0, 0.5, 1.0, 0.5, 1.0, 0.0]
    # Objectives work as directions too
    assert pareto(POINTS, [REWARD, ACTIONS]) == [1.0, 0.5, 1.0, 0.5, 1.0, 0.0]
    # masking A: B is no longer dominated (front 0); D still is by C, F by E -> front 0: B C E;
    # then D dominates F: D front 1, F front 2
    assert pareto_fronts(POINTS, ["max", "min"], [True, False, False, False, False, False]) == [-1, 0, 0, 1, 0, 2]
    assert pareto(POINTS, ["max", "min"], [True, False, False, False, False, False]) == [0.0, 1.0, 1.0, 0.5, 1.0, 0.0]
    # both maximised (the default): (1, 5) dominates everything else but (0, 6)
    assert pareto_fronts(POINTS) == [1, 0, 2, 1, 3, 0]


def test_pareto_edge_cases() -> None:
    assert pareto([]) == []
    assert pareto([(0.3, 2)], ["max", "min"]) == [1.0]  # one sample is the front
    assert pareto([(0.3, 2), (0.3, 2)], ["max", "min"]) == [1.0, 1.0]  # equal points share a front
    assert pareto([(1, 1), (0, 0)], ["max", "min"]) == [1.0, 1.0]  # a trade-off: both on the front
    assert pareto([(1, 1), (0, 0)], ["max", "min"], [True, True]) == [0.0, 0.0]
    assert pareto_fronts([(1, 1), (0, 0)], ["max", "min"], [True, True]) == [-1, -1]
    assert pareto([(1.0,), (0.5,), (0.5,), (0.0,)]) == [1.0, 0.5, 0.5, 0.0]  # one objective: fronts are the distinct values
    with pytest.raises(ValueError, match="point 1 has 1 values for 2 objectives"):
        pareto([(1, 1), (0,)], ["max", "min"])
    with pytest.raises(ValueError, match="NaN"):
        pareto([(math.nan, 1)], ["max", "min"])
    with pytest.raises(ValueError, match="direction"):
        pareto([(1, 1)], ["max", "least"])


# --- on a GroupResult -----------------------------------------------------


def _call(name: str, args: Any) -> dict:
    return {"id": name, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _rollout(i: int, reward: float, calls: int, seconds: float, statuses: List[str], masked: bool = False) -> Rollout:
    msgs: List[dict] = [{"role": "user", "content": "do it"}]
    for _ in range(calls):
        msgs.append({"role": "assistant", "content": "ok", "tool_calls": [_call("execute_command", {"command": "ls"})]})
        msgs.append({"role": "tool", "content": "app.py"})
    tests = [{"name": f"t{k}", "status": s} for k, s in enumerate(statuses)]
    ev = Evaluation(reward=reward, passed=statuses.count("passed"), total=len(statuses), tests=tests)
    return Rollout(index=i, reward=0.0 if masked else reward, masked=masked, steps=calls, messages=msgs, evaluation=ev, duration=seconds)


def _group() -> GroupResult:
    return GroupResult(
        rollouts=[
            _rollout(0, 1.0, 3, 2.0, ["passed", "passed"]),
            _rollout(1, 1.0, 5, 1.0, ["passed", "passed"]),
            _rollout(2, 0.5, 2, 4.0, ["passed", "failed"]),
            _rollout(3, 0.5, 4, 3.0, ["error", "passed"]),
            _rollout(4, 0.9, 1, 1.0, ["passed", "passed"], masked=True),
        ]
    )


def test_objectives_read_rollouts() -> None:
    g = _group()
    r0 = g.rollouts[0]
    assert (REWARD.value(r0), ACTIONS.value(r0), STEPS.value(r0), TIME.value(r0), PASSED.value(r0)) == (1.0, 3.0, 3.0, 2.0, 2.0)
    # per call: "ok" (1) + "execute_command" (1) + '{"command": "ls"}' ({ " command " : " ls " } = 9) = 11; 3 calls = 33
    assert TOKENS.value(r0) == 33.0
    assert rewards.tokens(len).value(r0) == 3 * (2 + 15 + 17)  # a "tokenizer" counting characters
    assert [o.name for o in case_objectives(g)] == ["case:t0", "case:t1"]
    assert [case("t0").value(r) for r in g.rollouts] == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert case("t9").value(r0) == 0.0 and case("t0").value(Rollout(index=0)) == 0.0
    with pytest.raises(ValueError, match="direction"):
        Objective("x", "bigger")


def test_computers_on_group() -> None:
    g = _group()
    assert absolute(g) == [1.0, 1.0, 0.5, 0.5, 0.0]
    # unmasked 1, 1, 0.5, 0.5: the 1s share ranks 2 and 3 (2.5 / 3), the 0.5s ranks 0 and 1 (0.5 / 3)
    assert relative(g) == pytest.approx([5 / 6, 5 / 6, 1 / 6, 1 / 6, 0.0])
    # unmasked mean 0.75: Dr. GRPO 0.25, 0.25, -0.25, -0.25; RLOO r - (3.0 - r) / 3: 1/3, 1/3, -1/3, -1/3
    assert dr_grpo(g) == pytest.approx([0.25, 0.25, -0.25, -0.25, 0.0])
    assert rloo(g) == pytest.approx([1 / 3, 1 / 3, -1 / 3, -1 / 3, 0.0])
    # std 0.25 -> +-1
    assert grpo(g, eps=0.0) == pytest.approx([1.0, 1.0, -1.0, -1.0, 0.0])
    # an extra mask on top of the group's: rollout 0 out too; unmasked 1, 0.5, 0.5 -> RLOO 0.5, -0.25, -0.25
    assert rloo(g, [True, False, False, False, False]) == pytest.approx([0.0, 0.5, -0.25, -0.25, 0.0])
    # the rollouts are POINTS' A..D (reward, actions), E masked: fronts A0 C0, B1 D1 -> 1, 0, 1, 0
    assert pareto_fronts(g, [REWARD, ACTIONS]) == [0, 1, 0, 1, -1]
    assert pareto(g, [REWARD, ACTIONS]) == [1.0, 0.0, 1.0, 0.0, 0.0]
    # reward vs time: 1 (1.0, 1s) dominates all; then 0 (1.0, 2s) dominates 3 (0.5, 3s), which dominates 2 (0.5, 4s)
    assert pareto_fronts(g, [REWARD, TIME]) == [1, 0, 3, 2, -1]
    # per-test results: 0 and 1 pass both; 2 passes t0, 3 passes t1: fronts 0, 0, 1, 1
    assert pareto(g, case_objectives(g)) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert pareto(g) == [1.0, 1.0, 0.0, 0.0, 0.0]  # default objective: the reward alone
    with pytest.raises(ValueError, match="value function"):
        pareto(g, ["max"])


def test_reward_computer() -> None:
    g = _group()
    assert RewardComputer().compute_rewards(g) == [1.0, 1.0, 0.5, 0.5, 0.0]
    assert RewardComputer().compute_rewards(g.rollouts, method="relative") == pytest.approx([5 / 6, 5 / 6, 1 / 6, 1 / 6, 0.0])
    rc = RewardComputer([REWARD, ACTIONS], method="pareto")
    assert rc.compute_rewards(g) == [1.0, 0.0, 1.0, 0.0, 0.0]
    # relative on a minimised objective: fewer actions rank higher (2 < 3 < 4 < 5)
    assert RewardComputer([ACTIONS]).compute_rewards(g, "relative") == pytest.approx([2 / 3, 0.0, 1.0, 1 / 3, 0.0])
    assert RewardComputer([ACTIONS]).compute_rewards(g) == [3.0, 5.0, 2.0, 4.0, 0.0]
    with pytest.raises(ValueError, match="method"):
        RewardComputer(method="elo")
    with pytest.raises(ValueError, match="method"):
        RewardComputer().compute_rewards(g, "elo")
    with pytest.raises(ValueError, match="no value function"):
        RewardComputer([Objective("x")])


# --- run_group(estimator=...) on both backends ----------------------------


def test_run_group_unknown_estimator(fake_server: Any) -> None:
    async def policy(session: gymserver.AsyncSession, last: Optional[gymserver.StepResult]) -> Any:
        raise AssertionError("no episode may start")

    async def main() -> None:
        async with gymserver.AsyncClient(fake_server.url) as c:
            with pytest.raises(ValueError, match="unknown advantage estimator"):
                await run_group(c, "calculator_api", policy, n=2, estimator="ppo")
            assert c.sessions == []

    asyncio.run(main())


def test_run_group_estimators(backend: Backend) -> None:
    async def policy(session: gymserver.AsyncSession, last: Optional[gymserver.StepResult]) -> Any:
        # member 0 solves in 2 actions, member 1 writes nothing useful in 2, member 2 solves in 3, member 3's model fails
        k = session.group_index
        turn = sum(1 for m in session.messages if m["role"] == "assistant")
        if k == 3:
            raise RuntimeError("model API down")
        if turn == 0:
            content = SOLUTION if k != 1 else "print('nothing')\n"
            return [{"name": "write_file", "arguments": {"filepath": backend.solution_path, "content": content}}]
        if turn == 1 and k == 2:
            return [{"name": "execute_command", "arguments": {"command": "ls"}}]
        return [{"name": "mark_done", "arguments": {}}]

    async def main() -> None:
        async with gymserver.AsyncClient(backend.url) as c:
            g = await run_group(c, backend.env, policy, n=4, seed=5, max_turns=5, estimator="rloo")
        assert g.estimator == "rloo" and g.mask == [False, False, False, True]
        assert g.rewards == pytest.approx([1.0, 0.0, 1.0, 0.0])
        # RLOO over 1, 0, 1: 1 - 0.5, 0 - 1, 1 - 0.5
        assert g.advantages == pytest.approx([0.5, -1.0, 0.5, 0.0])
        assert dr_grpo(g) == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.0])
        assert [ACTIONS.value(r) for r in g.rollouts[:3]] == [2.0, 2.0, 3.0]
        # (reward, actions): member 0 (1, 2) dominates 1 (0, 2) and 2 (1, 3); 1 and 2 trade off -> fronts 0, 1, 1
        assert pareto(g, [REWARD, ACTIONS]) == [1.0, 0.0, 0.0, 0.0]
        cases = case_objectives(g)
        if backend.kind == "live":  # the real evaluator reports every test case; members 0 and 2 pass them all
            assert len(cases) >= 5
            assert pareto(g, cases) == [1.0, 0.0, 1.0, 0.0]
        wait_no_sessions(backend)

    asyncio.run(main())


def test_run_group_callable_estimator(fake_server: Any) -> None:
    async def policy(session: gymserver.AsyncSession, last: Optional[gymserver.StepResult]) -> Any:
        if session.messages[-1]["role"] == "tool":
            return None  # evaluated by run_group
        content = SOLUTION if session.group_index == 0 else "x = 1\n"
        return [{"name": "write_file", "arguments": {"filepath": "app.py", "content": content}}]

    def plus_one(rs: List[float], masked: List[bool]) -> List[float]:
        return [r + 1.0 for r in rs]

    async def main() -> None:
        async with gymserver.AsyncClient(fake_server.url) as c:
            g = await run_group(c, "calculator_api", policy, n=3, seed=1, estimator=plus_one)
            d = await run_group(c, "calculator_api", policy, n=3, seed=1, estimator="dr_grpo")
        assert g.estimator == "plus_one" and g.rewards == [1.0, 0.0, 0.0] and g.advantages == [2.0, 1.0, 1.0]
        assert d.advantages == pytest.approx([2 / 3, -1 / 3, -1 / 3])
        # the default stays GRPO: mean 1/3, std sqrt(2)/3 = 0.4714045 -> (2/3) / 0.4714045 = 1.4142136
        async with gymserver.AsyncClient(fake_server.url) as c:
            dflt = await run_group(c, "calculator_api", policy, n=3, seed=1, eps=0.0)
        assert dflt.estimator == "grpo" and dflt.advantages == pytest.approx([1.4142136, -0.7071068, -0.7071068])

    asyncio.run(main())
