"""Calculator HTTP API (standard library only): the reference solution.

Run with: PORT=8000 python3 app.py
"""

import json
import os
from functools import reduce
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPERATIONS = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
}


class BadRequest(Exception):
    pass


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def calculate(body):
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    if "operation" not in body:
        raise BadRequest("missing field: operation")
    if "numbers" not in body:
        raise BadRequest("missing field: numbers")
    op = OPERATIONS.get(body["operation"]) if isinstance(body["operation"], str) else None
    if op is None:
        raise BadRequest("unknown operation: %r" % (body["operation"],))
    numbers = body["numbers"]
    if not isinstance(numbers, list) or not numbers:
        raise BadRequest("numbers must be a non-empty list")
    if not all(is_number(n) for n in numbers):
        raise BadRequest("numbers must all be numbers")
    if body["operation"] == "divide" and any(n == 0 for n in numbers[1:]):
        raise BadRequest("division by zero")
    return reduce(op, numbers)


class Handler(BaseHTTPRequestHandler):
    def _send(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"status": "ok"})
            return
        self._send(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/calculate":
            self._send(404, {"error": "not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._send(400, {"error": "body is not valid JSON"})
            return
        try:
            self._send(200, {"result": calculate(body)})
        except BadRequest as e:
            self._send(400, {"error": str(e)})

    def log_message(self, fmt, *args):
        pass


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8000"))
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
