#!/usr/bin/python3
"""Check examples/pyfuncs/tasks.jsonl on the host, without gymserver.

For every task it writes the starter files and the hidden tests into a
fresh temporary folder (standing in for /workspace), runs pytest there
and counts passed tests from a JUnit report; then it writes the reference
solution over the starter files and runs the tests again. A task is good
when the untouched stub scores below 1.0 and the reference scores 1.0.
It also checks that tasks.jsonl is what gen.py generates now.

    /usr/bin/python3 examples/pyfuncs/check.py [task_id ...]

Needs pytest for the same Python (Debian: apt-get install python3-pytest).
Exits 1 if any task fails a check.
"""

import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gen  # noqa: E402  (gen.py sits next to this file)


def write_files(root, files):
    """Write files (relative path -> content) below root."""
    for rel, content in files.items():
        if os.path.isabs(rel):
            raise ValueError("absolute path %s: check.py only handles paths relative to the working directory" % rel)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)


def run_tests(root):
    """Run the tests below root as the environment does; return (passed, total)."""
    report = os.path.join(root, ".report.xml")
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", report, "tests/"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    if not os.path.exists(report):
        return 0, 0
    total = passed = 0
    for case in ET.parse(report).getroot().iter("testcase"):
        total += 1
        if not any(child.tag in ("failure", "error", "skipped") for child in case):
            passed += 1
    os.remove(report)
    return passed, total


def score(passed, total):
    """Return the pass rate, 0.0 when nothing ran."""
    return passed / total if total else 0.0


def check_task(task):
    """Check one task; return (stub result, reference result, problems)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="pyfuncs-") as root:
        write_files(root, task.get("files", {}))
        write_files(root, task["hidden_files"])
        stub = run_tests(root)
        write_files(root, task["reference_solution"]["contents"])
        ref = run_tests(root)
    want = task["metadata"]["tests"]
    if score(*stub) >= 1.0:
        problems.append("stub scores %.2f" % score(*stub))
    if ref[1] != want:
        problems.append("%d tests ran, metadata says %d" % (ref[1], want))
    if ref[1] < 4:
        problems.append("only %d tests" % ref[1])
    if score(*ref) != 1.0:
        problems.append("reference scores %.2f" % score(*ref))
    return stub, ref, problems


def main(argv):
    path = os.path.join(HERE, "tasks.jsonl")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    bad = 0
    if text != gen.render(gen.TASKS):
        print("tasks.jsonl is stale: run gen.py")
        bad += 1
    tasks = [json.loads(line) for line in text.splitlines()]
    if argv:
        tasks = [t for t in tasks if t["id"] in argv]
    print("%-24s %-7s %9s %9s  %s" % ("task", "level", "stub", "reference", "result"))
    for task in tasks:
        stub, ref, problems = check_task(task)
        bad += bool(problems)
        print("%-24s %-7s %5d/%-3d %5d/%-3d  %s" % (
            task["id"], task["metadata"]["difficulty"], stub[0], stub[1], ref[0], ref[1],
            "ok" if not problems else "FAIL: " + "; ".join(problems)))
    print("%d tasks checked, %d failed" % (len(tasks), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
