#!/bin/bash
# Plain shell checks, no pytest: reward = checks passed / checks run.
mkdir -p /logs/verifier
script=/workspace/status_counts.sh
work=$(mktemp -d)
passed=0
total=0

# check NAME EXPECTED_OUTPUT LOGFILE: run the script on LOGFILE and compare its
# stdout with EXPECTED_OUTPUT; the exit status must be 0.
check() {
  local name=$1 want=$2 log=$3 got status
  total=$((total + 1))
  got=$(timeout 20 "$script" "$log" 2>"$work/stderr")
  status=$?
  if [ "$status" -eq 0 ] && [ "$got" = "$want" ]; then
    passed=$((passed + 1))
    echo "PASS $name"
  else
    echo "FAIL $name (exit $status)"
    printf 'want:\n%s\ngot:\n%s\n' "$want" "$got"
    cat "$work/stderr"
  fi
}

total=$((total + 1))
if [ -f "$script" ] && [ -x "$script" ]; then
  passed=$((passed + 1))
  echo "PASS executable"
else
  echo "FAIL executable: $script is missing or not executable"
fi

cat > "$work/mixed.log" <<'LOG'
10.0.0.1 - - [10/Oct/2024:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326
10.0.0.2 - - [10/Oct/2024:13:55:37 +0000] "GET /missing HTTP/1.1" 404 153
10.0.0.1 - - [10/Oct/2024:13:55:38 +0000] "POST /api/items HTTP/1.1" 201 17
10.0.0.3 - - [10/Oct/2024:13:55:39 +0000] "GET / HTTP/1.1" 200 1024
10.0.0.4 - - [10/Oct/2024:13:55:41 +0000] "GET /boom HTTP/1.1" 500 0
10.0.0.1 - - [10/Oct/2024:13:55:42 +0000] "GET /index.html HTTP/1.1" 200 2326
LOG
check mixed "$(printf '200 3\n201 1\n404 1\n500 1')" "$work/mixed.log"

: > "$work/empty.log"
check empty "" "$work/empty.log"

cat > "$work/odd.log" <<'LOG'

10.0.0.2 - - [10/Oct/2024:13:55:40 +0000] "-" 408 0
10.0.0.5 - bob [10/Oct/2024:13:56:00 +0000] "GET /a%20b?q=x y z HTTP/1.1" 301 0

10.0.0.6 - - [10/Oct/2024:13:56:01 +0000] "GET /a HTTP/1.1" 408 0

LOG
check blank-lines-and-odd-requests "$(printf '301 1\n408 2')" "$work/odd.log"

rm -rf "$work"
echo "$passed of $total checks passed"
awk -v p="$passed" -v t="$total" 'BEGIN { printf "%.4f\n", p / t }' > /logs/verifier/reward.txt
