"""Stand-in for ``skyrl_gym.metrics`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/metrics.py``).

The generator aggregates each env class's ``get_metrics()`` dicts with that
class's ``aggregate_metrics`` (default: the mean of the numeric values).
"""

from __future__ import annotations

from typing import Any, Dict, List

from skyrl_gym.envs.registration import load_env_creator, registry


def default_aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, float]:
    """default_aggregate_metrics averages the numeric (and bool) values per key; other values are dropped."""
    sums: Dict[str, List[float]] = {}
    for m in metrics:
        for k, v in m.items():
            if isinstance(v, (bool, int, float)):
                sums.setdefault(k, []).append(float(v))
    return {k: sum(vs) / len(vs) for k, vs in sums.items()}


def aggregate_for_environment(env_name: str, metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
    """aggregate_for_environment calls ``aggregate_metrics`` of the class registered as env_name."""
    env_spec = registry.get(env_name)
    if env_spec is None:
        raise ValueError(f"No registered env with id: {env_name}")
    entry = env_spec.entry_point
    env_cls = load_env_creator(entry) if isinstance(entry, str) else entry
    aggregate = getattr(env_cls, "aggregate_metrics", None)
    return aggregate(metrics) if aggregate is not None else default_aggregate_metrics(metrics)
