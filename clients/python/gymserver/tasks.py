"""Task listing and task choice by seed (PROTOCOL.md §4.3, §4.11).

An environment may hold thousands of tasks. ``envs`` lists the first 100 and
``task_count``; :meth:`AsyncClient.tasks <gymserver.client.AsyncClient.tasks>`
fetches one page and ``iter_tasks`` walks them all. :func:`seed_index` is the
server's mapping from a reset seed to a task index, so a trainer can tell in
advance which task ``reset(env, seed=s)`` will run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping

from .shapes import TaskSpec

__all__ = ["TaskPage", "seed_index", "DEFAULT_TASKS_LIMIT", "MAX_TASKS_LIMIT"]

#: DEFAULT_TASKS_LIMIT is the page size of ``tasks`` when none is given.
DEFAULT_TASKS_LIMIT = 100
#: MAX_TASKS_LIMIT is the largest page size the server accepts.
MAX_TASKS_LIMIT = 1000

_MASK64 = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def seed_index(seed: int, n: int) -> int:
    """seed_index returns the index of the task that ``reset`` with ``seed`` (and no task) picks among ``n`` tasks.

    It is the first output of SplitMix64 seeded with ``seed``, modulo ``n``,
    in unsigned 64-bit arithmetic (a negative seed counts as its two's
    complement), exactly as the server computes it (PROTOCOL.md §4.3)::

        seed_index(0, 1000) == 535
        seed_index(42, 7) == 5

    Raises ValueError when ``n`` is not positive or ``seed`` is not a signed
    64-bit integer (the wire's range for seeds).
    """
    if n <= 0:
        raise ValueError(f"seed_index: n must be positive, got {n}")
    if not _INT64_MIN <= seed <= _INT64_MAX:
        raise ValueError(f"seed_index: seed {seed} is not a signed 64-bit integer")
    z = (seed + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return z % n


@dataclass
class TaskPage:
    """TaskPage is one page of an environment's tasks, the result of ``tasks``.

    Attributes:
        env: the environment id.
        total: how many tasks the environment has.
        offset: the index of the page's first task.
        tasks: the task maps ``{id, prompt, test_commands, has_reference,
            metadata?}``, empty past the end. A page may hold fewer tasks
            than asked for even before the end (the server keeps responses
            under its frame limit); the next page starts at
            ``offset + len(tasks)``.
        raw: the full result map.
    """

    env: str = ""
    total: int = 0
    offset: int = 0
    tasks: List[TaskSpec] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def next_offset(self) -> int:
        """next_offset is where the next page starts."""
        return self.offset + len(self.tasks)

    @property
    def last(self) -> bool:
        """last reports whether no tasks follow this page."""
        return not self.tasks or self.next_offset >= self.total

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> "TaskPage":
        """from_wire builds a TaskPage from a ``tasks`` result map."""
        tasks = m.get("tasks")
        return cls(
            env=str(m.get("env") or ""),
            total=int(m.get("total") or 0),
            offset=int(m.get("offset") or 0),
            tasks=[dict(t) for t in (tasks if isinstance(tasks, (list, tuple)) else []) if isinstance(t, Mapping)],
            raw=dict(m),
        )
