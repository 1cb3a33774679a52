#!/bin/bash
# Per-test report in /logs/verifier/junit.xml; reward = passed tests / tests.
mkdir -p /logs/verifier
rm -f /logs/verifier/junit.xml
python3 -m pytest -p no:cacheprovider -rA --junitxml=/logs/verifier/junit.xml /tests/test_*.py
python3 - <<'PY'
import xml.etree.ElementTree as ET

reward = 0.0
try:
    cases = list(ET.parse("/logs/verifier/junit.xml").getroot().iter("testcase"))
except (OSError, ET.ParseError):
    cases = []
if cases:
    bad = {"failure", "error", "skipped"}
    passed = sum(1 for c in cases if not any(child.tag in bad for child in c))
    reward = passed / len(cases)
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.4f\n" % reward)
print("reward", reward)
PY
