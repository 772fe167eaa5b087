#!/usr/bin/env bash
# scripts/test.sh, the first hour's test command (issue 62): it gives each of the tests it runs
# at once a share of the cores (OMP_NUM_THREADS = cores / FP8T_TEST_JOBS, at least 1; a value
# already set is kept), since LibTorch's default pool per test made two tests on 2 cores spin
# against each other (21 min 24 s for the suite, 6 min 44 s with one thread each); and the
# longest ctest entries carry a COST, so that a fresh build folder starts them first.
# scripts/test.sh runs here in a copy of scripts/ with stand-ins for setup.sh, nproc and ctest.
source "$(dirname "$0")/lib.sh"
mkdir -p tree/scripts tree/build fakebin
cp "$FP8T_SOURCE_DIR/scripts/test.sh" tree/scripts/
printf '#!/usr/bin/env bash\nexit 0\n' > tree/scripts/setup.sh  # the build: nothing to do here
printf '#!/usr/bin/env bash\necho 8\n' > fakebin/nproc
printf '#!/usr/bin/env bash\necho "threads=${OMP_NUM_THREADS:-unset} args=$*"\n' > fakebin/ctest
chmod +x fakebin/nproc fakebin/ctest
# test_sh [VAR=VALUE...] -- ARGS: scripts/test.sh ARGS with the stand-ins, OMP_NUM_THREADS unset
# unless given.
test_sh() {
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  env -u OMP_NUM_THREADS PATH="$WORK/fakebin:$PATH" "${vars[@]}" bash tree/scripts/test.sh "$@"
}
got=$(test_sh --) && [ "$got" = "threads=4 args=--output-on-failure -LE cuda -j 2" ] \
  || fail "8 cores, 2 jobs: $got"
got=$(test_sh FP8T_TEST_JOBS=16 -- -R plan) && [ "$got" = "threads=1 args=--output-on-failure -LE cuda -j 16 -R plan" ] \
  || fail "8 cores, 16 jobs (at least one thread each): $got"
got=$(test_sh OMP_NUM_THREADS=3 --) && [ "$got" = "threads=3 args=--output-on-failure -LE cuda -j 2" ] \
  || fail "an OMP_NUM_THREADS already set is not kept: $got"

# The COSTs of this build's entries: the three longest first, then the next ones, the rest none.
build=$(dirname "$FP8TRAIN")
(cd "$build" && ctest --show-only=json-v1) > tests.json || fail "ctest --show-only=json-v1 in $build"
python3 - tests.json <<'PY' || fail "the longest tests do not carry the highest COST"
import json, sys
cost = {}
for t in json.load(open(sys.argv[1]))["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    cost[t["name"]] = float(props.get("COST", 0))
longest = ["cli_test_fp8_recipe", "cli_test_train", "cli_test_resume"]
others = [c for n, c in cost.items() if n not in longest]
assert min(cost[n] for n in longest) > max(others) > 0, {n: c for n, c in cost.items() if c}
print("COST:", {n: c for n, c in sorted(cost.items(), key=lambda x: -x[1]) if c})
PY
echo "ok"
