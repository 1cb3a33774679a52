"""Tests for /workspace/csvstats.py; each writes its own CSV file."""

import json
import os
import subprocess

import pytest

TOOL = "/workspace/csvstats.py"


def run(tmp_path, text, column):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return tool(str(path), column)


def tool(*args):
    # Without this check a missing tool would pass the error tests: python3 also exits 2.
    assert os.path.isfile(TOOL), TOOL + " does not exist"
    return subprocess.run(["python3", TOOL, *args], capture_output=True, text=True, timeout=30)


def stats(tmp_path, text, column):
    out = run(tmp_path, text, column)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_integers(tmp_path):
    got = stats(tmp_path, "a,b\n1,2\n3,4\n5,6\n", "b")
    assert got == {"count": 3, "min": 2, "max": 6, "mean": 4}


def test_decimals_and_negatives(tmp_path):
    got = stats(tmp_path, "x,y\n-1.5,a\n2.5,b\n", "x")
    assert got["count"] == 2
    assert got["min"] == -1.5
    assert got["max"] == 2.5
    assert got["mean"] == pytest.approx(0.5)


def test_empty_cells_are_skipped(tmp_path):
    got = stats(tmp_path, "n,v\na,10\nb,\nc,  \nd,20\n", "v")
    assert got == {"count": 2, "min": 10, "max": 20, "mean": 15}


def test_no_values(tmp_path):
    got = stats(tmp_path, "n,v\na,\n", "v")
    assert got == {"count": 0, "min": None, "max": None, "mean": None}


def test_quoted_fields(tmp_path):
    got = stats(tmp_path, 'name,score\n"Smith, J",10\n"Doe, A",20\n', "score")
    assert got == {"count": 2, "min": 10, "max": 20, "mean": 15}


def test_unknown_column(tmp_path):
    out = run(tmp_path, "a,b\n1,2\n", "c")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip() != ""


def test_not_a_number(tmp_path):
    out = run(tmp_path, "a\n1\ntwo\n", "a")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip() != ""


def test_missing_file(tmp_path):
    out = tool(str(tmp_path / "nope.csv"), "a")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip() != ""
