# `fp8train report` over a real sweep of three tiny CPU runs (one with --fp8-stats and
# --tensorboard, one diverging on purpose), plus a folder that is not a run:
#   - the table lists exactly the config keys that differ, the diverged run is marked;
#   - --md/--tsv/--json/--sort work; a bad input exits 2 and the others are still reported;
#   - the HTML page parses and makes no network request;
#   - train.log holds the FP8 rewrite report and every logged step;
#   - the TensorBoard files read back with the `tensorboard` package match metrics.jsonl.
source "$(dirname "$0")/lib.sh"
tiny() {
  local name=$1; shift
  "$FP8TRAIN" --config "$CONFIG" --out-dir "$WORK/runs" --run-name "$name" --quiet --device cpu \
    --precision fp8 --steps 6 --set model.n_layer=1 --set model.d_model=32 --set model.seq_len=16 \
    --set train.micro_batch_size=4 --set train.warmup_steps=1 --set train.log_interval=2 \
    --set train.eval_interval=3 --set train.eval_batches=1 "$@"
}
tiny sweep-a --fp8-margin 0 --fp8-stats --tensorboard
tiny sweep-b --fp8-margin 1
set +e; tiny sweep-c --fp8-margin 2 --set train.lr=1e30 2>/dev/null; rc=$?; set -e
[ $rc -eq 3 ] || fail "the diverging run should exit 3, got $rc"
mkdir -p notarun

# ---- the table -------------------------------------------------------------------------
"$FP8TRAIN" report runs/sweep-* --tsv > table.tsv || fail "report --tsv failed"
header=$(head -1 table.tsv)
config_cols=$(python3 -c "import sys; h=sys.argv[1].split('\t'); print(' '.join(h[1:h.index('status')]))" "$header")
[ "$config_cols" = "fp8.margin fp8.stats run.tensorboard train.lr" ] || fail "differing keys: '$config_cols'"
[ "$(wc -l < table.tsv)" -eq 4 ] || fail "expected 3 rows: $(cat table.tsv)"
grep -q "^sweep-c	.*	diverged	" table.tsv || fail "the diverged run is not marked: $(cat table.tsv)"
grep -q "^sweep-a	.*	completed	" table.tsv || fail "sweep-a not completed: $(cat table.tsv)"
"$FP8TRAIN" report runs/sweep-* > table.txt
grep -q "^run  *fp8.margin  *fp8.stats  *run.tensorboard  *train.lr  *status" table.txt || fail "text header: $(head -1 table.txt)"
"$FP8TRAIN" report runs/sweep-* --md | head -1 | grep -q "^| run | fp8.margin |" || fail "--md"
"$FP8TRAIN" report runs/sweep-* --json > table.json
[ "$(json_get table.json 'len(d)')" = 3 ] || fail "--json rows"
[ "$(json_get table.json '[r["run"] for r in d if r["status"]=="diverged"]')" = "['sweep-c']" ] || fail "--json status"
[ "$(json_get table.json 'd[0]["most_saturated"] is not None')" = True ] || fail "--fp8-stats worst slot missing"
first=$("$FP8TRAIN" report runs/sweep-* --tsv --sort tokens_per_s --reverse | sed -n 2p | cut -f1)
[ -n "$first" ] || fail "--sort gave no rows"
set +e; err=$("$FP8TRAIN" report runs/sweep-* --sort nope 2>&1 >/dev/null); rc=$?; set -e
[ $rc -eq 2 ] && grep -q "best_val_loss" <<<"$err" || fail "--sort nope: rc $rc, $err"

# ---- a folder that is not a run: exit 2, the others still reported ----------------------
set +e; "$FP8TRAIN" report runs/sweep-a notarun runs/sweep-b --tsv > partial.tsv 2> partial.err; rc=$?; set -e
[ $rc -eq 2 ] || fail "a non-run folder should exit 2, got $rc"
grep -q "notarun: not a run folder" partial.err || fail "no message for notarun: $(cat partial.err)"
[ "$(wc -l < partial.tsv)" -eq 3 ] || fail "the two runs are not reported: $(cat partial.tsv)"

# ---- the HTML page ----------------------------------------------------------------------
"$FP8TRAIN" report runs/sweep-* --html sweep.html > /dev/null || fail "--html failed"
python3 - sweep.html <<'PY' || fail "sweep.html"
import re, sys
from html.parser import HTMLParser
text = open(sys.argv[1], encoding="utf-8").read()
class Page(HTMLParser):
    def __init__(self):
        super().__init__(); self.tags = []; self.refs = []
    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href", "action", "data", "poster", "srcset")]
p = Page(); p.feed(text); p.close()
assert p.tags.count("table") == 1 and p.tags.count("script") == 3, p.tags
assert not p.refs, "references to other files: %r" % p.refs
assert not {"link", "iframe", "img", "object", "embed"} & set(p.tags), set(p.tags)
# No request can leave the page: no URL outside the license comments of the embedded library,
# and none of the APIs that fetch.
code = re.sub(r"/\*!.*?\*/", "", text, flags=re.S)
for bad in ("http://", "https://", "//cdn", "fetch(", "XMLHttpRequest", "import(", "importScripts",
            "WebSocket", "EventSource", "sendBeacon", "@import", "url("):
    assert bad not in code, "network access: %s" % bad
assert "sweep-c" in text and 'class="bad"' in text, "the diverged run is not marked in the page"
assert '"slots":[{' in text and '"slot":"' in text, "no FP8 statistics in the page data"
PY

# ---- train.log: the whole console output, in order --------------------------------------
log=runs/sweep-a/train.log
grep -q "FP8 rewrite: " "$log" || fail "train.log lacks the rewrite report"
grep -q "sweep-a on cpu" "$log" || fail "train.log lacks the model summary"
python3 - runs/sweep-a <<'PY' || fail "train.log lacks logged steps"
import json, sys
d = sys.argv[1]
log = open(d + "/train.log").read()
rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
at = log.index("FP8 rewrite: ")
for r in rows:
    key = "step %d/6 | loss %.4f" % (r["step"], r["loss"]) if "loss" in r else "step %d/6 | val_loss %.4f" % (r["step"], r["val_loss"])
    nxt = log.find(key, at)
    assert nxt >= 0, "not in order in train.log: " + key
    at = nxt
PY

# ---- TensorBoard round trip -------------------------------------------------------------
PY=$FP8T_SOURCE_DIR/.venv/bin/python3
[ -x "$PY" ] || PY=python3
if ! "$PY" -c "import tensorboard" 2>/dev/null; then
  "$PY" -m pip install -q tensorboard >/dev/null 2>&1 || fail "the tensorboard package is missing (scripts/setup.sh installs it)"
fi
ls runs/sweep-a/events.out.tfevents.* > /dev/null || fail "no TensorBoard file in runs/sweep-a"
"$PY" - runs/sweep-a <<'PY' || fail "TensorBoard round trip"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
d = sys.argv[1]
acc = EventAccumulator(d, size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
checked = 0
for key in ("loss", "lr", "grad_norm", "tokens_per_s", "val_loss"):
    want = {r["step"]: r[key] for r in rows if r.get(key) is not None}
    got = {e.step: e.value for e in acc.Scalars(key)}
    assert sorted(got) == sorted(want), (key, sorted(got), sorted(want))
    for s, v in want.items():  # float32 in the event file: relative 1e-6
        assert math.isclose(got[s], v, rel_tol=1e-6, abs_tol=1e-30), (key, s, got[s], v); checked += 1
slot = rows[0]["fp8"][0]["slot"]
for stat in ("amax", "scale"):
    got = {e.step: e.value for e in acc.Scalars("fp8/%s/%s" % (slot, stat))}
    for r in rows:
        if "fp8" in r:
            assert math.isclose(got[r["step"]], r["fp8"][0][stat], rel_tol=1e-6), (stat, r["step"]); checked += 1
assert "peak_memory_bytes" in tags and all(e.value > 0 for e in acc.Scalars("peak_memory_bytes"))
print("tensorboard: %d values match metrics.jsonl" % checked)
PY
echo "ok"
