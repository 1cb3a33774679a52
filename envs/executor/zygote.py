# gymserver's verifier zygote: a Python process the executor starts as root
# (never as the agent) with pytest already imported, which forks the
# process of a pytest test command on request. See zygote.go.
#
# Channel: file descriptor 3, one end of a SOCK_SEQPACKET socket pair whose
# other end only the executor holds. Every message is one JSON object.
#   executor -> zygote, first: {"preload": [module names]}, which the
#       zygote waits for before it imports anything.
#   zygote -> executor, once: {"ready": true, "python": ..., "pytest": ...,
#       "main": ...} when pytest is imported, and the modules of the first
#       message it allows (see _PRELOADABLE), or {"error": ...}.
#   executor -> zygote: {"argv", "env", "dir", "uid", "gid"} with the
#       command's stdout, stderr and (optionally) report pipe as SCM_RIGHTS;
#       or {"preload": [module names]}, answered by nothing: the zygote
#       imports those of them it allows before it forks the next child.
#   zygote -> executor: {"pid": N} once the child exists (or {"error"}),
#       then {"pid": N, "status": S}, S the raw wait status.
# One command at a time: the zygote answers nothing while its child runs.
import json
import os
import socket
import stat
import sys
import threading

_CHANNEL = 3


# The standard library modules the zygote imports when asked to preload
# them (the hidden tests import them): those whose import costs a test run
# time and depends on nothing but the interpreter's start-up settings and
# the OpenSSL ones, which a test command must share with the zygote to
# run through it. The zygote imports only from the system's directories,
# so a module of the same name the agent wrote is never among them.
# multiprocessing is not: it draws its authentication key at import.
_PRELOADABLE = frozenset("""
    asyncio concurrent.futures configparser csv dataclasses decimal difflib
    email.message email.parser email.utils fractions gzip hashlib hmac html
    html.parser http http.client http.cookies http.server ipaddress
    logging.handlers pickle queue secrets socketserver sqlite3 ssl statistics
    tarfile tomllib unittest unittest.mock urllib.error urllib.parse
    urllib.request uuid wsgiref xml.dom.minidom xml.etree.ElementTree zipfile
    zoneinfo
""".split())


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _lowest(fn, *args):
    """Runs fn in a thread of its own at the lowest CPU priority (Linux
    priorities are per thread: the agent's steps come first, and the
    thread that forks the test run keeps the normal one); returns what it
    raised, or None."""
    failed = []

    def run():
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        try:
            fn(*args)
        except BaseException as e:
            failed.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return failed[0] if failed else None


def _import(preload):
    import importlib
    import pytest
    import _pytest.config

    for name in _pytest.config.default_plugins:
        importlib.import_module("_pytest." + name)
    # What pytest.main and the report need beyond its plugins.
    import _pytest.junitxml
    import pytest.__main__  # noqa: F401 (only its path is wanted)
    # What every run imports after it starts: the debugging plugin's pdb.
    import pdb  # noqa: F401

    _preload(preload)


def _preload(names):
    import importlib

    for name in names:
        if name in _PRELOADABLE and name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass  # the test run imports it itself, and fails as usual


def _pytest_script():
    # The pytest console script on PATH, if it is the system's: owned by
    # root, writable by no one else, started by this interpreter.
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d.startswith("/"):
            continue
        p = os.path.join(d, "pytest")
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISREG(st.st_mode):
            return None
        with open(p, "rb") as f:
            head = f.read(4096)
        first = head.split(b"\n", 1)[0]
        if not first.startswith(b"#!") or b"console_main" not in head:
            return None
        interp = first[2:].strip().split()[0].decode()
        if os.path.realpath(interp) != os.path.realpath(sys.executable):
            return None
        return p
    return None


def _serve(sock):
    """Answers requests until one has forked a child; returns the child's
    request and file descriptors in the child, never in the zygote."""
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the executor is gone
        try:
            req = json.loads(msg)
            if "preload" in req:
                names = req["preload"]
                _lowest(_preload, names if isinstance(names, list) else [])
                for fd in fds:  # none is sent with it
                    os.close(fd)
                continue
            pid = os.fork()
        except Exception as e:  # a bad request or no process left
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": "fork: %s" % e})
            continue
        if pid == 0:
            # The child's copy of the channel goes now, and with it the
            # socket object's claim on fd 3 (which the report takes).
            sock.close()
            return req, fds
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        _send(sock, {"pid": pid, "status": status})


def _become(req, fds):
    """Turns the forked child into the test command's process, as the
    executor starts one: its own process group, the out-of-memory killer's
    first choice, stdin /dev/null, stdout, stderr and the report on 1, 2
    and 3, every other descriptor closed (the channel too), the agent's
    uid and gid with no supplementary group; and only then, as the agent,
    its working directory, environment and arguments."""
    os.setpgid(0, 0)
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    keep = 3
    if len(fds) > 2:
        os.dup2(fds[2], 3)  # closes the channel
        keep = 4
    os.closerange(keep, os.sysconf("SC_OPEN_MAX"))
    os.setgroups([])
    os.setresgid(req["gid"], req["gid"], req["gid"])
    os.setresuid(req["uid"], req["uid"], req["uid"])
    if os.getuid() == 0 or os.geteuid() == 0:
        os._exit(126)
    # From here on everything runs as the agent.
    os.chdir(req["dir"])
    os.environ.clear()
    for kv in req["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    # Where Python puts PYTHONPATH: before the standard library.
    if os.environ.get("PYTHONPATH"):
        sys.path[0:0] = [os.environ["PYTHONPATH"]]
    # As /bin/sh does before it starts the command: PWD names the working
    # directory.
    pwd = os.environ.get("PWD", "")
    try:
        same = pwd.startswith("/") and os.path.samestat(os.stat(pwd), os.stat("."))
    except OSError:
        same = False
    if not same:
        os.environ["PWD"] = os.getcwd()
    sys.argv = list(req["argv"])


def _main():
    sock = socket.socket(fileno=_CHANNEL)
    try:
        first = json.loads(sock.recv(1 << 20) or b"{}")
        names = first.get("preload")
        failed = _lowest(_import, names if isinstance(names, list) else [])
        if failed is not None:
            raise failed
        import pytest

        _send(sock, {
            "ready": True,
            "python": os.path.realpath(sys.executable),
            "pytest": _pytest_script(),
            "main": os.path.abspath(sys.modules["pytest.__main__"].__file__),
            "version": pytest.__version__,
            "environ": dict(os.environ),
        })
    except Exception as e:
        try:
            _send(sock, {"error": "%s: %s" % (type(e).__name__, e)})
        finally:
            os._exit(1)
    return _serve(sock)


_req, _fds = _main()
# In the child. A failure before pytest starts must never reach the
# zygote's loop: it ends the child.
try:
    _become(_req, _fds)
except BaseException as e:
    try:
        os.write(2, ("gymserver zygote: %s\n" % e).encode())
    finally:
        os._exit(126)
del _req, _fds
import pytest  # noqa: E402 (imported by the zygote already)

raise SystemExit(pytest.console_main())
