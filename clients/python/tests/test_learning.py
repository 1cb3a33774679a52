"""A tiny PyTorch policy learns through the real server (examples/learning): the reward goes up.

It starts ``gymserver serve`` with examples/learning/config.json (the
choose_op environment: 36 tasks, hidden pytest tests run in Docker) and runs
a short, seeded version of examples/learning/train.py against it: 8
iterations of 4 tasks x groups of 4 = 128 real episodes, about two minutes
here. The run is deterministic (every action is drawn from a number that
depends only on the seed, the iteration, the task and the group member, and
the tests' verdicts are deterministic), so the curve is the same on every
machine with the same torch: 0.125 0.438 0.312 0.312 0.500 0.625 0.938
0.938. A masked sample (a sandbox failure) changes it a little; in
simulation the seed's margin stayed above 0.3 with 10% of the samples
masked at random. Needs python3-torch (like the LlamaGym adapter test).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from conftest import EXAMPLES, Backend, LiveServer, start_live, wait_no_sessions

LEARNING = EXAMPLES / "learning"


def _load_train() -> Any:
    """_load_train imports examples/learning/train.py under a name of its own."""
    sys.path.insert(0, str(LEARNING))  # train.py imports gen and pngcurve next to it
    spec = importlib.util.spec_from_file_location("gymserver_learning_train", LEARNING / "train.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_tasks_file_is_generated() -> None:
    """tasks.jsonl is exactly what gen.py writes (edit gen.py, then rerun it)."""
    sys.path.insert(0, str(LEARNING))
    import gen

    lines = (LEARNING / "tasks.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == gen.tasks()
    assert len(lines) == 36 and len({json.loads(x)["id"] for x in lines}) == 36


def _read_png(data: bytes) -> Dict[str, Any]:
    """_read_png checks a PNG's signature and chunk CRCs and returns its size and RGB rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, out = 8, b"", {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, kind
        if kind == b"IHDR":
            out["w"], out["h"], depth, color = struct.unpack(">IIBB", body[:10])
            assert (depth, color) == (8, 2)  # 8-bit RGB
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + 3 * out["w"]
    assert len(raw) == stride * out["h"]
    out["rows"] = [raw[i * stride + 1 : (i + 1) * stride] for i in range(out["h"])]
    return out


def test_curve_png(tmp_path: Path) -> None:
    sys.path.insert(0, str(LEARNING))
    import pngcurve

    path = tmp_path / "c.png"
    pngcurve.write_curve(str(path), {"MEAN REWARD": [0.25, 0.5, 1.0]}, title="T", width=300, height=200)
    png = _read_png(path.read_bytes())
    assert (png["w"], png["h"]) == (300, 200)
    blue = bytes(pngcurve.COLORS[0])
    # the series is drawn: the point at iteration 2, value 1.0 sits at the top right of the plot area (x 280, y 40)
    assert png["rows"][40][3 * 280 : 3 * 281] == blue
    assert sum(r.count(blue) for r in png["rows"]) > 200
    pngcurve.write_curve(str(path), {"EMPTY": []})  # no data: axes only, still a valid PNG
    _read_png(path.read_bytes())


@pytest.fixture(scope="module")
def learning_server(live_env: Dict[str, Path]) -> Iterator[LiveServer]:
    """learning_server is a real server serving examples/learning/config.json."""
    srv = start_live(live_env["binary"], LEARNING / "config.json")
    try:
        yield srv
    finally:
        srv.stop()


def test_policy_learns_through_gymserver(learning_server: LiveServer, tmp_path: Path) -> None:
    train = _load_train()
    settings = train.Settings(iterations=8, tasks_per_iter=4, group_size=4, lr=2.0, seed=0, estimator="grpo")
    lines = []
    history = asyncio.run(train.train(learning_server.url, settings, out=tmp_path, log=lines.append))
    rewards = [h.mean_reward for h in history]
    print("mean rewards:", " ".join(f"{r:.3f}" for r in rewards))

    assert len(history) == 8 and all(h.episodes == 16 for h in history)
    masked = sum(h.masked for h in history)
    assert masked <= 8, f"{masked} of 128 episodes masked: the sandbox is failing\n" + "\n".join(learning_server.stderr_lines[-20:])
    first, last = sum(rewards[:2]) / 2, sum(rewards[-3:]) / 3
    assert last >= first + 0.25, f"no clear learning: first two iterations {first:.3f}, last three {last:.3f}: {rewards}"
    assert last >= 0.6, rewards
    # what the policy believes (argmax over all 36 prompts) improved too
    assert history[-1].greedy_accuracy > history[0].greedy_accuracy

    doc = json.loads((tmp_path / "rewards.json").read_text())
    assert doc["env"] == "choose_op" and doc["mean_rewards"] == rewards
    assert [it["iteration"] for it in doc["iterations"]] == list(range(8))
    assert _read_png((tmp_path / "curve.png").read_bytes())["w"] == 720

    wait_no_sessions(Backend("live", learning_server.url))
