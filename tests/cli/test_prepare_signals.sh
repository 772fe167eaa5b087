# scripts/prepare_data.py stopped by a signal leaves nothing partial: SIGTERM while it writes shards, and
# SIGTERM while it trains a tokenizer, each give exit 143, a message, no --out folder and no temporary
# folder; SIGINT gives 130 the same way; then the same command runs to the end. An existing --out keeps
# its files when a run into it (--overwrite) is stopped.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import tokenizers, tqdm' 2>/dev/null || { echo "SKIP: $PY lacks tokenizers or tqdm (scripts/setup.sh installs them)"; exit 0; }
SCRIPT="$FP8T_SOURCE_DIR/scripts/prepare_data.py"

"$PY" "$FP8T_SOURCE_DIR/tests/cli/make_corpus.py" book.txt 12000  # about 2.5 MB
"$PY" - <<'PY' || fail "could not make the test inputs"
import json
paragraphs = open("book.txt", encoding="utf-8").read().split("\n\n")
with open("val.jsonl", "w") as f:
    for p in paragraphs[:200]:
        f.write(json.dumps({"text": p}) + "\n")
with open("train.jsonl", "w") as f:
    for p in paragraphs[200:]:
        f.write(json.dumps({"text": p}) + "\n")
PY
# Small shards make the run write hundreds of files: long enough to be stopped midway.
RUN=("$PY" "$SCRIPT" --quiet --workers 2 --shard-tokens 1000 --val-input val.jsonl train.jsonl)
"$PY" "$SCRIPT" --quiet --train-tokenizer 400 --val-input val.jsonl --out tok train.jsonl > /dev/null \
  || fail "could not train the test tokenizer"

started() { compgen -G "$1/*.bin" > /dev/null || compgen -G ".$1.prepare-*/*.bin" > /dev/null; }  # shards appear
started_inside() { compgen -G "$1/.*.prepare-*/*.bin" > /dev/null; }  # in the temporary folder inside an existing $1
stop_midway() {  # stop_midway SIGNAL WANT_RC WAIT_FOR OUT ARGS...: start, wait for WAIT_FOR, signal, check
  local sig=$1 want=$2 wait_for=$3 out=$4; shift 4
  "$@" --out "$out" > stop.log 2>&1 &
  local pid=$! rc=0
  for _ in $(seq 1500); do $wait_for "$out" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
  $wait_for "$out" || { wait "$pid" || true; cat stop.log; fail "$out: the run ended or never started before the signal"; }
  kill -s "$sig" "$pid"
  timeout 30 tail --pid="$pid" -f /dev/null || { kill -9 "$pid"; fail "$out: still running 30 s after SIG$sig"; }
  wait "$pid" || rc=$?
  [ "$rc" = "$want" ] || { cat stop.log; fail "$out: SIG$sig gave exit $rc, expected $want"; }
  grep -q "prepare_data.py: .* SIG$sig\|prepare_data.py: interrupted" stop.log || { cat stop.log; fail "$out: no message"; }
  grep -q "what it wrote was removed" stop.log || { cat stop.log; fail "$out: the message does not say what became of the output"; }
  [ -z "$(ls -A | grep 'prepare-')" ] || fail "$out: a temporary folder remains: $(ls -A | grep prepare-)"
}

stop_midway TERM 143 started term "${RUN[@]}" --tokenizer tok/tokenizer.json
[ ! -e term ] || fail "SIGTERM left term/: $(ls -A term | head -5)"
grep -q "stopped by SIGTERM" stop.log || fail "the message does not name SIGTERM"
# A background job of a script starts with SIGINT ignored: restore it, as a terminal's Ctrl-C finds it.
WITH_SIGINT=("$PY" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')
stop_midway INT 130 started int "${WITH_SIGINT[@]}" "${RUN[@]}" --tokenizer tok/tokenizer.json
[ ! -e int ] || fail "SIGINT left int/: $(ls -A int | head -5)"

training() { grep -q "training a" stop.log; }
stop_midway TERM 143 training trained "$PY" "$SCRIPT" --train-tokenizer 4000 --val-input val.jsonl book.txt train.jsonl
[ ! -e trained ] || fail "SIGTERM while training left trained/"

"${RUN[@]}" --tokenizer tok/tokenizer.json --out term > run.log 2>&1 || { cat run.log; fail "the rerun failed"; }
[ "$(json_get term/manifest.json 'len(d["shards"])')" -gt 100 ] || fail "the rerun wrote too few shards"
cp -r term kept
stop_midway TERM 143 started_inside term "${RUN[@]}" --tokenizer tok/tokenizer.json --overwrite
diff -r kept term > /dev/null || fail "a stopped --overwrite run changed the existing --out"
echo "ok"
