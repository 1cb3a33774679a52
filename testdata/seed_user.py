"""Reads a gymserver rollout's outputs the way a Real Work user's script
reads the seed's: results.json as a list of whole trajectories (steps,
test_results, episode_result), results.stats.json by the seed's aggregate
names. Every timestamp must parse with datetime.fromisoformat and match the
grammar Python 3.9's fromisoformat accepts (which rejects nanoseconds and a
"Z" suffix; Python 3.11 accepts both, so parsing alone proves nothing).

usage: seed_user.py RESULTS STATS TRAJECTORY_DIR
Prints one line per episode and a summary; exits non-zero on any mismatch.
"""
import json
import os
import re
import sys
from datetime import datetime

# Python 3.9's datetime.fromisoformat: YYYY-MM-DD, one separator character,
# HH[:MM[:SS[.fff[fff]]]], then an optional +HH:MM[:SS[.ffffff]] offset.
ISO39 = re.compile(
    r"^\d{4}-\d{2}-\d{2}.\d{2}(:\d{2}(:\d{2}(\.(\d{3}|\d{6}))?)?)?"
    r"([+-]\d{2}:\d{2}(:\d{2}(\.\d{6})?)?)?$"
)
TIME_KEYS = {"start_time", "end_time", "timestamp", "created", "last_used"}

# The check can fail: Go's RFC 3339 forms are outside the 3.9 grammar.
for bad in ("2026-11-23T10:00:00.123456789Z", "2026-11-23T10:00:00Z", "2026-11-23T10:00:00.1234+00:00"):
    assert not ISO39.match(bad), bad
assert ISO39.match("2026-11-23T10:00:00.123456+00:00")


def check_times(value, where, found):
    if isinstance(value, dict):
        for k, v in value.items():
            if k in TIME_KEYS and isinstance(v, str):
                if not ISO39.match(v):
                    sys.exit(f"{where}.{k} = {v!r}: Python 3.9's fromisoformat rejects it")
                datetime.fromisoformat(v)
                found.append(v)
            else:
                check_times(v, f"{where}.{k}", found)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_times(v, f"{where}[{i}]", found)


def main():
    results_path, stats_path, traj_dir = sys.argv[1:4]
    with open(results_path) as f:
        results = json.load(f)
    with open(stats_path) as f:
        stats = json.load(f)
    found = []
    for r in results:
        er = r["episode_result"]
        steps = r["steps"]
        for s in steps:
            _ = (s["step_id"], s["action"]["type"], s["action"]["content"], s["result"]["success"],
                 s["result"]["output"], float(s["result"]["duration"]))
            datetime.fromisoformat(s["timestamp"])
        for t in r["test_results"]:
            _ = (t["command"], t["success"], t["output"], float(t["duration"]))
        usage = er["token_usage"]
        start = datetime.fromisoformat(r["start_time"])
        end = datetime.fromisoformat(r["end_time"])
        assert end >= start, (start, end)
        print(f"episode {r['metadata']['episode_id']} env={r['environment_id']} success={er['success']} "
              f"score={er['final_score']} reason={er['terminated_reason']} actions={er['total_actions']} "
              f"steps={len(steps)} tests={len(r['test_results'])} "
              f"tests_passed={sum(1 for t in r['test_results'] if t['success'])} "
              f"input_tokens={usage['total_input_tokens']} api_calls={usage['api_calls']} cache_hits={usage['cache_hits']}")
    check_times(results, "results", found)
    check_times(stats, "stats", found)
    for root, _, files in os.walk(traj_dir):
        for name in files:
            with open(os.path.join(root, name)) as f:
                check_times(json.load(f), name, found)
    envs = " ".join(
        f"{k}:episodes={v['episodes']},successful={v['successful']},failed={v['failed']},avg_score={v['avg_score']}"
        for k, v in sorted(stats["environments"].items()))
    print(f"stats total_episodes={stats['total_episodes']} successful_episodes={stats['successful_episodes']} "
          f"failed_episodes={stats['failed_episodes']} success_rate={stats['success_rate']} "
          f"total_duration_positive={stats['total_duration'] > 0} {envs}")
    print(f"timestamps checked: {len(found)}")


main()
