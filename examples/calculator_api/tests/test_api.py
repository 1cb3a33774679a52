"""Hidden tests for the calculator API. They start /workspace/app.py on a
free port and talk HTTP to it."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

APP = os.path.join(os.environ.get("WORKSPACE", "/workspace"), "app.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_url():
    port = free_port()
    env = dict(os.environ, PORT=str(port))
    proc = subprocess.Popen([sys.executable, APP], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Wait until the app accepts connections. A refused connect costs
    # microseconds, so polling often does not slow the app's own start.
    deadline = time.time() + 15
    while True:
        if proc.poll() is not None:
            pytest.fail("app.py exited: %s" % proc.stderr.read().decode(errors="replace")[-2000:])
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                pytest.fail("app.py did not start listening on PORT")
            time.sleep(0.005)
    yield "http://127.0.0.1:%d" % port
    proc.kill()
    proc.wait()


def request(url, method="GET", body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, None


def calc(base_url, body=None, raw=None):
    return request(base_url + "/calculate", "POST", body=body, raw=raw)


def assert_error(status, payload):
    assert status == 400
    assert isinstance(payload, dict) and "error" in payload


def test_health(base_url):
    assert request(base_url + "/health") == (200, {"status": "ok"})


def test_add(base_url):
    assert calc(base_url, {"operation": "add", "numbers": [1, 2, 3.5]}) == (200, {"result": 6.5})


def test_subtract_folds_left(base_url):
    assert calc(base_url, {"operation": "subtract", "numbers": [10, 3, 2]}) == (200, {"result": 5})


def test_multiply(base_url):
    assert calc(base_url, {"operation": "multiply", "numbers": [2, 3, 4]}) == (200, {"result": 24})


def test_divide_folds_left(base_url):
    status, payload = calc(base_url, {"operation": "divide", "numbers": [100, 5, 2]})
    assert status == 200 and payload["result"] == pytest.approx(10)


def test_single_number(base_url):
    assert calc(base_url, {"operation": "subtract", "numbers": [7]}) == (200, {"result": 7})


def test_floats(base_url):
    status, payload = calc(base_url, {"operation": "add", "numbers": [0.1, 0.2]})
    assert status == 200 and payload["result"] == pytest.approx(0.3)


def test_divide_by_zero(base_url):
    assert_error(*calc(base_url, {"operation": "divide", "numbers": [1, 0]}))


def test_unknown_operation(base_url):
    assert_error(*calc(base_url, {"operation": "power", "numbers": [2, 3]}))


def test_empty_numbers(base_url):
    assert_error(*calc(base_url, {"operation": "add", "numbers": []}))


def test_non_numeric(base_url):
    assert_error(*calc(base_url, {"operation": "add", "numbers": [1, "2"]}))


def test_boolean_is_not_a_number(base_url):
    assert_error(*calc(base_url, {"operation": "add", "numbers": [1, True]}))


def test_missing_operation(base_url):
    assert_error(*calc(base_url, {"numbers": [1, 2]}))


def test_missing_numbers(base_url):
    assert_error(*calc(base_url, {"operation": "add"}))


def test_body_not_json(base_url):
    assert_error(*calc(base_url, raw=b"not json"))


def test_unknown_path(base_url):
    status, payload = request(base_url + "/nope")
    assert status == 404 and "error" in payload
