#!/bin/bash
# Check the Harbor tasks below tasks/ without gymserver, against a real Docker Engine.
#
# For each task (or the ones named as arguments) it builds environment/Dockerfile, if
# there is one, as gymserver-example-test:<task>, else uses [environment] docker_image
# from task.toml. Then, in throwaway containers without network:
#   solved:   copy solution/ to /solution, run `bash /solution/solve.sh` as uid 1000 in the
#             image's WORKDIR (as the agent would), then copy tests/ to /tests, create
#             /logs/verifier and run `bash /tests/test.sh` as root; the reward must be 1.
#   unsolved: the same without the solution; the reward must be below 1.
# Containers and images it made are removed on exit. Exit status 1 if a check fails.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
label=gymserver-example-test=$$
containers=()
images=()

cleanup() {
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1; done
  for i in "${images[@]}"; do docker rmi -f "$i" >/dev/null 2>&1; done
}
trap cleanup EXIT

# reward IMAGE TASKDIR SOLVE: print the reward of one run; SOLVE is yes or no.
reward() {
  local image=$1 dir=$2 solve=$3 c
  c=$(docker run -d --network none --label "$label" "$image" sleep 600) || return 1
  containers+=("$c")
  if [ "$solve" = yes ]; then
    docker cp "$dir/solution/." "$c:/solution" >&2 &&
      docker exec -u 1000 "$c" bash /solution/solve.sh >&2 || echo "solve.sh failed" >&2
  fi
  docker cp "$dir/tests/." "$c:/tests" >&2
  docker exec "$c" mkdir -p /logs/verifier
  docker exec "$c" bash /tests/test.sh > "$tmp/$(basename "$dir")-$solve.log" 2>&1
  docker exec "$c" cat /logs/verifier/reward.txt 2>/dev/null || echo missing
  docker rm -f "$c" >/dev/null
}

tmp=$(mktemp -d)
failed=0
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=($(ls "$here/tasks"))
for name in "${tasks[@]}"; do
  dir=$here/tasks/$name
  if [ -f "$dir/environment/Dockerfile" ]; then
    image=gymserver-example-test:$name
    images+=("$image")
    if ! docker build -q --label "$label" -t "$image" "$dir/environment" >/dev/null; then
      echo "$name: docker build failed"
      failed=1
      continue
    fi
  else
    image=$(sed -n 's/^docker_image *= *"\(.*\)"/\1/p' "$dir/task.toml")
  fi
  solved=$(reward "$image" "$dir" yes)
  unsolved=$(reward "$image" "$dir" no)
  verdict=ok
  awk -v r="$solved" 'BEGIN { exit !(r == 1) }' || verdict="FAIL: solved reward is not 1"
  awk -v r="$unsolved" 'BEGIN { exit !(r + 0 < 1 && r != "missing") }' || verdict="FAIL: unsolved reward is not below 1"
  [ "$verdict" = ok ] || failed=1
  printf '%-20s image=%-40s solved=%-8s unsolved=%-8s %s\n' "$name" "$image" "$solved" "$unsolved" "$verdict"
done
echo "verifier logs: $tmp"
exit $failed
