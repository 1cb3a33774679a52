"""A tiny in-process stand-in for ``gymserver serve``, for unit tests of the client.

It speaks the wire protocol (msgpack maps over binary WebSocket messages,
subprotocol gymserver.v1+msgpack, bearer auth) with a toy sandbox: files in
a dict, ``echo``/``sleep``/``cat`` commands, and a reward of 1.0 when
``app.py`` defines ``calculate``. Every test backed by it has a twin that
runs against the real server (tests/test_live_*.py).
"""

from __future__ import annotations

import asyncio
import http
import itertools
import json
import re
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import msgpack
from websockets.legacy.server import serve

SUBPROTOCOL = "gymserver.v1+msgpack"

TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": p, "required": r, "additionalProperties": False}}}
    for n, p, r in [
        ("execute_command", {"command": {"type": "string", "description": "cmd"}}, ["command"]),
        ("write_file", {"filepath": {"type": "string", "description": "p"}, "content": {"type": "string", "description": "c"}}, ["filepath", "content"]),
        ("read_file", {"filepath": {"type": "string", "description": "p"}}, ["filepath"]),
        ("mark_done", {"message": {"type": "string", "description": "m"}}, []),
    ]
]
ENVS = {"calculator_api": "Implement a calculator HTTP API in app.py.", "fix_inventory": "Fix inventory.py."}


class WireError(Exception):
    """WireError is an error response."""

    def __init__(self, code: str, message: str, reason: str = "", mask: bool = False) -> None:
        super().__init__(message)
        self.err = {"code": code, "message": message, "mask": mask}
        if reason:
            self.err["reason"] = reason


class FakeSession:
    """FakeSession is one toy episode."""

    def __init__(self, sid: str, env: str, task: str) -> None:
        self.id, self.env, self.task = sid, env, task
        self.files: Dict[str, str] = {"app.py": "# starter\n"}
        self.steps = 0
        self.actions = 0
        self.ended = ""
        self.closed = False
        self.evaluation: Optional[Dict[str, Any]] = None
        self.lock = asyncio.Lock()
        self.start = time.time()

    def evaluate(self) -> Dict[str, Any]:
        if self.evaluation is None:
            ok = "def calculate" in self.files.get("app.py", "")
            self.evaluation = {"reward": 1.0 if ok else 0.0, "success": ok, "mode": "pass_rate", "passed": 2 if ok else 0,
                               "failed": 0 if ok else 2, "errors": 0, "skipped": 0, "total": 2, "tests": [], "commands": [],
                               "duration": 0.01, "mask": False}
        return self.evaluation

    def result(self) -> Dict[str, Any]:
        return {"session_id": self.id, "env": self.env, "task": self.task, "steps": self.steps, "actions": self.actions,
                "termination_reason": self.ended, "agent_done": self.ended == "completed", "evaluation": self.evaluation,
                "start_time": self.start, "end_time": time.time()}


def parse_text(parser: str, text: str) -> List[Tuple[str, str]]:
    """parse_text extracts (name, arguments-json) pairs like the real parsers, roughly."""
    objs: List[Any] = []
    if parser == "hermes":
        for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
            objs.append(json.loads(block))
    elif parser == "json":
        t = text.strip()
        m = re.search(r"```(?:json)?\s*(.*?)```", t, re.S)
        if m:
            t = m.group(1)
        if t.startswith("{") or t.startswith("["):
            v = json.loads(t)
            objs = v if isinstance(v, list) else [v]
    elif parser == "react":
        for name, args in re.findall(r"Action:\s*(\S+)\s*\nAction Input:\s*(\{.*?\})\s*(?:\n|$)", text, re.S):
            objs.append({"name": name, "arguments": json.loads(args)})
    else:
        raise WireError("invalid_argument", f"tool-call parser {parser!r} is unknown", "unknown_parser")
    return [(o["name"], json.dumps(o.get("arguments", {}))) for o in objs]


class FakeServer:
    """FakeServer runs the toy server on 127.0.0.1:<free port> in a background thread."""

    def __init__(self, token: Optional[str] = None, max_sessions_per_connection: int = 512, port: int = 0) -> None:
        self.token = token
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: Any = None
        self.port = port
        self.ids = itertools.count(1)
        self.connections: List[Any] = []
        self.sessions: Dict[str, FakeSession] = {}
        self.max_sessions_per_connection = max_sessions_per_connection
        self.requests: List[Dict[str, Any]] = []

    @property
    def url(self) -> str:
        """url is the ws:// URL of the server."""
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> "FakeServer":
        """start starts the loop thread and the listener."""
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        self.server = await serve(self._handler, "127.0.0.1", self.port, subprotocols=[SUBPROTOCOL],
                                  process_request=self._process_request, compression=None, max_size=None)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _process_request(self, path: str, headers: Any) -> Any:
        if self.token and headers.get("Authorization") != f"Bearer {self.token}":
            body = json.dumps({"error": {"code": "unauthenticated", "message": "bad token", "mask": False}}).encode()
            return http.HTTPStatus.UNAUTHORIZED, [("WWW-Authenticate", "Bearer"), ("Content-Type", "application/json")], body
        return None

    def kill(self) -> None:
        """kill drops every connection abruptly (no close frame), like a SIGKILLed server."""
        def _abort() -> None:
            for ws in self.connections:
                ws.transport.abort()
            self.server.close()
        self.loop.call_soon_threadsafe(_abort)

    def stop(self) -> None:
        """stop closes the listener and the loop thread."""
        async def _stop() -> None:
            self.server.close()
            await self.server.wait_closed()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
        try:
            asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _handler(self, ws: Any, path: str = "") -> None:
        self.connections.append(ws)
        mine: List[str] = []
        tasks = set()
        try:
            async for data in ws:
                t = asyncio.ensure_future(self._serve_one(ws, data, mine))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except Exception:
            pass
        finally:
            for sid in mine:
                s = self.sessions.get(sid)
                if s and not s.closed:
                    s.closed = True
                    s.ended = s.ended or "closed"

    async def _serve_one(self, ws: Any, data: Any, mine: List[str]) -> None:
        rid = 0
        try:
            if isinstance(data, str):
                raise WireError("invalid_argument", "text message", "bad_frame")
            req = msgpack.unpackb(data, raw=False)
            if not isinstance(req, dict):
                raise WireError("invalid_argument", "not a map", "bad_frame")
            rid = req.get("id", 0)
            self.requests.append(req)
            result = await self._dispatch(req, mine)
            resp = {"id": rid, "ok": True, "result": result}
        except WireError as e:
            resp = {"id": rid, "ok": False, "error": e.err}
        try:
            await ws.send(msgpack.packb(resp, use_bin_type=True))
        except Exception:
            pass

    def _session(self, req: Dict[str, Any], mine: List[str]) -> FakeSession:
        sid = req.get("session") or ""
        if sid not in mine:
            raise WireError("not_found", f"session {sid!r} is unknown", "unknown_session")
        return self.sessions[sid]

    async def _dispatch(self, req: Dict[str, Any], mine: List[str]) -> Dict[str, Any]:
        op = req.get("op")
        if op == "hello":
            return {"server": "gymserver", "server_version": "fake", "protocol": 1, "subprotocol": SUBPROTOCOL, "instance": "fake",
                    "ops": ["hello", "envs", "reset", "step", "evaluate", "close"], "parsers": ["hermes", "json", "react"],
                    "capabilities": ["pipelining", "multi_session", "multi_call", "raw_text", "evaluate"],
                    "limits": {"max_sessions_per_connection": self.max_sessions_per_connection}, "draining": False}
        if op == "envs":
            return {"envs": [{"id": k, "tasks": [{"id": k, "prompt": v, "test_commands": 1, "has_reference": True}], "tools": TOOLS}
                             for k, v in sorted(ENVS.items())]}
        if op == "reset":
            env = req.get("env") or ""
            if env not in ENVS:
                raise WireError("not_found", f"environment {env!r} is unknown", "unknown_env")
            task = req.get("task") or env
            if task != env:
                raise WireError("not_found", f"task {task!r} is unknown")
            old = req.get("session")
            if old:
                s = self._session(req, mine)
                s.closed = True
            await asyncio.sleep(0.01)
            if sum(1 for m in mine if not self.sessions[m].closed) >= self.max_sessions_per_connection:
                raise WireError("resource_exhausted", "connection has the maximum of sessions", "max_connection_sessions")
            sid = f"{env}-{next(self.ids):08x}"
            self.sessions[sid] = FakeSession(sid, env, task)
            mine.append(sid)
            seed = req.get("seed")
            prompt = ENVS[env] + (f" (seed {seed})" if seed is not None else "")
            return {"session_id": sid, "env": env, "task": task, "system_prompt": "You are an agent.", "prompt": prompt, "tools": TOOLS,
                    "messages": [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": prompt}],
                    "limits": {"max_actions": 50, "global_timeout": 900, "command_timeout": 120}}
        if op == "step":
            s = self._session(req, mine)
            if "text" in req and req.get("tool_calls"):
                raise WireError("invalid_argument", "tool_calls with text", "bad_request")
            async with s.lock:
                if s.closed:
                    raise WireError("episode_done", "session closed", "session_closed")
                if s.ended:
                    raise WireError("episode_done", f"episode ended ({s.ended})")
                return await self._step(s, req)
        if op == "evaluate":
            s = self._session(req, mine)
            if s.closed and s.evaluation is None:
                raise WireError("episode_done", "session closed", "session_closed")
            s.ended = s.ended or "evaluated"
            return s.evaluate()
        if op == "close":
            s = self._session(req, mine)
            if not s.closed:
                s.closed = True
                s.ended = s.ended or "closed"
            return s.result()
        raise WireError("invalid_argument", f"unknown op {op!r}", "unknown_op")

    async def _step(self, s: FakeSession, req: Dict[str, Any]) -> Dict[str, Any]:
        s.steps += 1
        parsed = None
        calls: List[Tuple[str, str, str]] = []
        calls_info: List[Dict[str, Any]] = []
        texts: List[str] = []
        msgs: List[Dict[str, Any]] = []
        if "text" in req:
            try:
                pairs = parse_text(req.get("parser") or "", req["text"])
            except (ValueError, KeyError, TypeError) as e:
                pairs = None
                texts.append(f"Error: tool call is not valid JSON ({e})")
                calls_info.append({"id": "", "name": "", "exit_code": -1, "duration": 0, "error_class": "agent_error", "error": str(e)})
            if pairs is not None:
                calls = [(f"call_{i}", n, a) for i, (n, a) in enumerate(pairs)]
                parsed = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
        else:
            for i, c in enumerate(req.get("tool_calls") or []):
                fn = c["function"]
                args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                calls.append((c.get("id") or f"call_{s.steps}_{i}", fn["name"], args))
        if not calls and not calls_info:
            texts.append("Error: no tool call found.")
            calls_info.append({"id": "", "name": "", "exit_code": -1, "duration": 0, "error_class": "agent_error", "error": "no tool call"})
        terminated = False
        for cid, name, args in calls:
            s.actions += 1
            info: Dict[str, Any] = {"id": cid, "name": name, "exit_code": -1, "duration": 0.0}
            try:
                a = json.loads(args)
            except ValueError as e:
                out = f"Error: arguments are not valid JSON ({e})"
                info.update(error_class="agent_error", error=out)
            else:
                out = await self._tool(s, name, a, info)
                if name == "mark_done":
                    terminated = True
            texts.append(out)
            msgs.append({"role": "tool", "content": out, "tool_call_id": cid, "name": name})
            calls_info.append(info)
        result_info: Dict[str, Any] = {"step": s.steps, "actions": s.actions, "calls": calls_info}
        reward = 0.0
        if any(c.get("error_class") == "sandbox_error" for c in calls_info):
            result_info["mask"] = True
        if terminated:
            s.ended = "completed"
            ev = s.evaluate()
            reward = ev["reward"]
            result_info.update(termination_reason="completed", evaluation=ev, agent_done=True)
        out_res: Dict[str, Any] = {"observation": {"messages": msgs, "text": "\n".join(texts)}, "reward": reward,
                                   "terminated": terminated, "truncated": False, "info": result_info}
        if parsed is not None:
            out_res["tool_calls"] = parsed
        return out_res

    async def _tool(self, s: FakeSession, name: str, a: Dict[str, Any], info: Dict[str, Any]) -> str:
        if name == "execute_command":
            cmd = a.get("command", "")
            if cmd.startswith("sleep "):
                await asyncio.sleep(float(cmd.split()[1]))
                info["exit_code"] = 0
                return "exit code: 0\n"
            if cmd == "__sandbox_fail__":
                info.update(error_class="sandbox_error", error="container died")
                return "Error: the sandbox failed"
            if cmd.startswith("echo "):
                info["exit_code"] = 0
                return f"exit code: 0\nstdout:\n{cmd[5:]}\n"
            if cmd.startswith("cat "):
                info["exit_code"] = 0 if cmd[4:] in s.files else 1
                return s.files.get(cmd[4:], "no such file")
            info["exit_code"] = 127
            return "exit code: 127\n"
        if name == "write_file":
            s.files[a["filepath"].split("/")[-1]] = a["content"]
            return f"Wrote {len(a['content'])} bytes to {a['filepath']}."
        if name == "read_file":
            return s.files.get(a["filepath"].split("/")[-1], "Error: no such file")
        if name == "mark_done":
            return "Marked done."
        info.update(error_class="agent_error", error=f"unknown tool {name!r}")
        return f"Error: unknown tool {name!r}"
