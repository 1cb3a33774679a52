#!/bin/bash
# Binary reward: 1 when every test passes, else 0.
mkdir -p /logs/verifier
if python3 -m pytest -p no:cacheprovider -rA /tests/test_report.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
