#!/bin/bash
if grep -qx 'Hello, world!' /app/hello.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
