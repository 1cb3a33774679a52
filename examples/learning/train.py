#!/usr/bin/python3
"""Train a tiny PyTorch policy through gymserver: policy gradient with group advantages on choose_op.

Start a server with this example's environment, then train against it:

    go build -o /tmp/gymserver . && /tmp/gymserver serve --config examples/learning/config.json --addr 127.0.0.1:8080 &
    /usr/bin/python3 examples/learning/train.py --url ws://127.0.0.1:8080 --out /tmp/learning

Each task of ``choose_op`` asks in words for combine(a, b): the sum, the
difference, the product or the larger of a and b. The policy reads the
prompt as a bag of words and picks one of four candidate bodies; the
episode writes it with ``write_file`` and calls ``mark_done``, and the
hidden tests (pytest, in the task's Docker sandbox) score it. Every
iteration runs one group of episodes per sampled task with
:func:`gymserver.grpo.run_group`, takes the group advantages (GRPO by
default; ``--estimator dr_grpo`` or ``rloo``) and makes one REINFORCE step:
loss = -mean(advantage * log pi(action | prompt)) over unmasked samples.

It writes ``rewards.json`` (per-iteration mean reward and more) and
``curve.png`` (the reward curve) to ``--out``. Needs Debian's
``python3-torch``; downloads nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import gymserver  # noqa: F401
except ImportError:  # run from a checkout: use the client next door
    sys.path.insert(0, str(HERE.parent.parent / "clients" / "python"))

import gen  # noqa: E402
import pngcurve  # noqa: E402
from gymserver import AsyncClient, AsyncSession, StepResult  # noqa: E402
from gymserver.grpo import GroupResult, run_group  # noqa: E402

#: ENV is the environment this example trains on (examples/learning/config.json).
ENV = "choose_op"
#: OPS are the operations, in the order of the policy's outputs.
OPS: List[str] = [op for op, _, _ in gen.OPS]
#: CANDIDATES are the contents of combine.py the policy chooses among, one per op.
CANDIDATES: List[str] = gen.candidates()
#: MODULE is where the chosen contents go.
MODULE = "/workspace/" + gen.MODULE

_WORD = re.compile(r"[a-z]+")


def words(text: str) -> List[str]:
    """words splits text into lower-case words."""
    return _WORD.findall(text.lower())


@dataclass
class Settings:
    """Settings are the training run's knobs; the defaults learn choose_op in about 10 iterations."""

    iterations: int = 20
    tasks_per_iter: int = 4
    group_size: int = 4
    lr: float = 2.0
    seed: int = 0
    estimator: str = "grpo"
    max_turns: int = 4


class BagOfWordsPolicy(nn.Module):
    """BagOfWordsPolicy maps a prompt to a distribution over the candidates: a linear layer over IDF-weighted words.

    The vocabulary and the weights come from a corpus (the environment's
    prompts): a word in every prompt says nothing and is left out; a word
    in a fraction f of them weighs log(1 / f), so the rare words that name
    the operation count more than the common ones around them.
    """

    def __init__(self, corpus: Sequence[str], k: int) -> None:
        super().__init__()
        docs = [set(words(p)) for p in corpus]
        df: Dict[str, int] = {}
        for d in docs:
            for w in d:
                df[w] = df.get(w, 0) + 1
        vocab = sorted(w for w, n in df.items() if n < len(docs))
        self.index = {w: i for i, w in enumerate(vocab)}
        self.idf = torch.tensor([math.log(len(docs) / df[w]) for w in vocab])
        self.linear = nn.Linear(len(vocab), k)

    def features(self, prompts: Sequence[str]) -> torch.Tensor:
        """features returns one row per prompt: the IDF weight of each vocabulary word it contains, else 0."""
        x = torch.zeros(len(prompts), len(self.index))
        for row, p in enumerate(prompts):
            for w in words(p):
                if w in self.index:
                    x[row, self.index[w]] = 1.0
        return x * self.idf

    def forward(self, prompts: Sequence[str]) -> torch.Tensor:
        """forward returns the log-probabilities of the candidates, one row per prompt."""
        return torch.log_softmax(self.linear(self.features(prompts)), dim=-1)


@dataclass
class Iteration:
    """Iteration is one row of rewards.json."""

    iteration: int
    mean_reward: float
    episodes: int
    masked: int
    loss: float
    greedy_accuracy: float
    seconds: float
    tasks: List[str] = field(default_factory=list)


def uniform(*key: Any) -> float:
    """uniform returns a number in [0, 1) that depends only on key (a hash, not a shared generator).

    Each (seed, iteration, task, group member) draws its action with its
    own number, so the draws do not depend on the order in which the
    concurrent episodes reach the policy and a run is reproducible from
    its seed.
    """
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def draw(probs: Sequence[float], u: float) -> int:
    """draw returns the index that u in [0, 1) picks from the distribution probs (inverse CDF)."""
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return i
    return len(probs) - 1


async def train(
    url: str,
    settings: Settings,
    out: Optional[Path] = None,
    log: Callable[[str], None] = print,
    token: Optional[str] = None,
) -> List[Iteration]:
    """train runs the training loop against the server at url and returns one record per iteration.

    With ``out``, it writes ``rewards.json`` and ``curve.png`` there after
    every iteration (so a long run can be watched).
    """
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    history: List[Iteration] = []
    async with AsyncClient(url, token=token) as client:
        tasks = [t async for t in client.iter_tasks(ENV)]
        prompts = {t["id"]: t["prompt"] for t in tasks}
        # the op in the metadata is used only to report greedy accuracy, never to train
        truth = {t["id"]: OPS.index(op) for t in tasks if (op := (t.get("metadata") or {}).get("op")) in OPS}
        ids = sorted(prompts)
        model = BagOfWordsPolicy([prompts[t] for t in ids], len(CANDIDATES))
        opt = torch.optim.SGD(model.parameters(), lr=settings.lr)
        log(f"{len(ids)} tasks, vocabulary {len(model.index)} words, {len(CANDIDATES)} candidates, estimator {settings.estimator}")

        for it in range(settings.iterations):
            start = time.monotonic()
            batch = rng.sample(ids, settings.tasks_per_iter)
            chosen: Dict[Tuple[str, int], int] = {}

            def make_policy(task_id: str, task_no: int) -> Any:
                async def policy(session: AsyncSession, last: Optional[StepResult]) -> Any:
                    turn = sum(1 for m in session.messages if m.get("role") == "assistant")
                    if turn == 0:  # choose a candidate from the prompt the server sent
                        k = int(session.group_index or 0)
                        with torch.no_grad():
                            probs = model([session.prompt])[0].exp()
                        a = draw(probs.tolist(), uniform(settings.seed, it, task_no, k))
                        chosen[(task_id, k)] = a
                        return [{"name": "write_file", "arguments": {"filepath": MODULE, "content": CANDIDATES[a]}}]
                    if turn == 1:
                        return [{"name": "mark_done", "arguments": {}}]
                    return None

                return policy

            groups: List[GroupResult] = await asyncio.gather(
                *(
                    run_group(client, ENV, make_policy(t, j), n=settings.group_size, task=t,
                              max_turns=settings.max_turns, estimator=settings.estimator)
                    for j, t in enumerate(batch)
                )
            )

            # REINFORCE with the group advantages: push up log pi(a) where the advantage is positive.
            rows: List[str] = []
            acts: List[int] = []
            advs: List[float] = []
            rewards: List[float] = []
            masked = 0
            for t, g in zip(batch, groups):
                for r in g.rollouts:
                    if r.masked or (t, r.index) not in chosen:
                        masked += 1
                        continue
                    rows.append(prompts[t])
                    acts.append(chosen[(t, r.index)])
                    advs.append(r.advantage)
                    rewards.append(r.reward)
            loss_val = 0.0
            if rows:
                logp = model(rows).gather(1, torch.tensor(acts).unsqueeze(1)).squeeze(1)
                loss = -(torch.tensor(advs) * logp).sum() / len(rows)
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss_val = float(loss)
            with torch.no_grad():
                greedy = model([prompts[t] for t in ids]).argmax(dim=1).tolist()
            acc = sum(1 for t, a in zip(ids, greedy) if truth.get(t) == a) / max(1, len(truth))
            rec = Iteration(
                iteration=it,
                mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
                episodes=sum(len(g.rollouts) for g in groups),
                masked=masked,
                loss=loss_val,
                greedy_accuracy=acc,
                seconds=round(time.monotonic() - start, 2),
                tasks=list(batch),
            )
            history.append(rec)
            log(f"iter {it:3d}  mean reward {rec.mean_reward:.3f}  greedy accuracy {acc:.3f}  masked {masked}  loss {loss_val:+.4f}  {rec.seconds:.1f}s")
            if out is not None:
                write_outputs(out, settings, history)
    return history


def write_outputs(out: Path, settings: Settings, history: Sequence[Iteration]) -> None:
    """write_outputs writes rewards.json and curve.png into out."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "env": ENV,
        "settings": asdict(settings),
        "mean_rewards": [h.mean_reward for h in history],
        "iterations": [asdict(h) for h in history],
    }
    (out / "rewards.json").write_text(json.dumps(doc, indent=2) + "\n")
    pngcurve.write_curve(
        str(out / "curve.png"),
        {"MEAN REWARD": [h.mean_reward for h in history], "GREEDY ACCURACY": [h.greedy_accuracy for h in history]},
        title=f"CHOOSE_OP: {settings.estimator.upper()} GROUPS OF {settings.group_size}, {settings.tasks_per_iter} TASKS PER ITERATION",
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """main parses the command line and trains."""
    d = Settings()
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("GYMSERVER_URL", "ws://127.0.0.1:8080"))
    ap.add_argument("--out", type=Path, default=Path("learning-out"), help="folder for rewards.json and curve.png")
    ap.add_argument("--iterations", type=int, default=d.iterations)
    ap.add_argument("--tasks-per-iter", type=int, default=d.tasks_per_iter)
    ap.add_argument("--group-size", type=int, default=d.group_size)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--estimator", choices=["grpo", "dr_grpo", "rloo"], default=d.estimator)
    args = ap.parse_args(argv)
    s = Settings(
        iterations=args.iterations, tasks_per_iter=args.tasks_per_iter, group_size=args.group_size,
        lr=args.lr, seed=args.seed, estimator=args.estimator,
    )
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    history = asyncio.run(train(args.url, s, args.out, log, token=os.environ.get("GYMSERVER_TOKEN")))
    print(json.dumps({"mean_rewards": [round(h.mean_reward, 4) for h in history], "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
