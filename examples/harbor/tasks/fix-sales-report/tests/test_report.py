"""Tests for /app/report.py. They read their own copies of the data in /tests."""

import subprocess

import pytest


def report(path):
    out = subprocess.run(["python3", "/app/report.py", path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_sample_totals_highest_first():
    assert report("/tests/sales.csv") == ["east,32.20", "south,31.30", "north,29.00", "west,10.75"]


def test_equal_totals_alphabetical():
    assert report("/tests/ties.csv") == ["alpha,2.50", "beta,2.50", "gamma,0.30"]


HEADER = "date,region,product,units,unit_price\n"


@pytest.mark.parametrize("body", [HEADER, HEADER + "\n\n"], ids=["header", "header-and-blank-lines"])
def test_header_only_prints_nothing(tmp_path, body):
    path = tmp_path / "empty.csv"
    path.write_text(body)
    assert report(str(path)) == []
