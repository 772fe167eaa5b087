# Overrides show in --print-config; bad input exits 2 with the key named and writes nothing.
source "$(dirname "$0")/lib.sh"
out=$("$FP8TRAIN" --config "$CONFIG" --fp8-margin 3 --set train.lr=3e-4 --print-config)
# value_of KEY: the value printed for the first "KEY:" line
value_of() { sed -n "s/^[[:space:]]*$1:[[:space:]]*\([^#]*\).*/\1/p" <<<"$out" | head -1 | tr -d ' '; }
[ "$(value_of margin)" = 3 ] || fail "margin not 3 in --print-config: $(value_of margin)"
python3 -c "import sys; sys.exit(0 if float('$(value_of lr)') == 3e-4 else 1)" || fail "lr not 3e-4: $(value_of lr)"

# The printed config loads again and prints identically (round trip through a file).
echo "$out" > printed.yaml
[ "$("$FP8TRAIN" --config printed.yaml --print-config)" = "$out" ] || fail "printed config does not round-trip"

expect_bad() {  # expect_bad NEEDLE ARGS... : exit code 2, NEEDLE in stderr, no run folder
  local needle=$1; shift
  set +e; err=$("$FP8TRAIN" --out-dir "$WORK/bad-runs" "$@" 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 2 ] || fail "expected exit 2 for '$*', got $rc: $err"
  grep -q -- "$needle" <<<"$err" || fail "error for '$*' does not mention '$needle': $err"
  [ ! -e "$WORK/bad-runs" ] || fail "bad input '$*' created the output folder"
}
printf 'model:\n  n_layer: 2\n  n_heads: 4\n' > typo.yaml
expect_bad "model.n_heads" --config typo.yaml
printf 'model:\n  d_model: 100\n  n_head: 3\n' > indivisible.yaml
expect_bad "n_head" --config indivisible.yaml
expect_bad "fp8.margin" --config "$CONFIG" --fp8-margin 200
expect_bad "train.lr" --config "$CONFIG" --set train.lr=abc
expect_bad "fp8_format" --config "$CONFIG" --fp8-format E5M2
expect_bad "data.train_path" --config "$CONFIG" --set data.source=text --set model.vocab_size=256 \
  --set data.train_path=/no/such/file.txt
expect_bad "no_such" --config "$CONFIG" --set no_such.key=1

# A config may leave keys out: they take their defaults (--help's DEFAULT column). The run folder's
# config.yaml still lists every key, and --resume with the same short file sees no change.
printf 'model:\n  n_layer: 1\n  d_model: 64\ntrain:\n  steps: 4\n  warmup_steps: 1\n  eval_interval: 0\n' > short.yaml
short=(--config short.yaml --out-dir "$WORK/runs" --run-name short --quiet)
"$FP8TRAIN" "${short[@]}" --stop-after 2
# flat_keys FILE: section.key for every key line of a printed config
flat_keys() { awk '/^[a-z_0-9]+:$/ {s=substr($1, 1, length($1)-1); next}
                   /^  [a-z_0-9]+:/ {print s "." substr($1, 1, length($1)-1); next}
                   /^[a-z_0-9]+: / {print substr($1, 1, length($1)-1)}' "$1" | sort; }
diff <(flat_keys runs/short/config.yaml) <("$FP8TRAIN" --list-keys | awk 'NR > 1 {print $1}' | sort) \
  || fail "the run folder's config.yaml of a short config does not list every key"
"$FP8TRAIN" "${short[@]}" --print-config | diff - runs/short/config.yaml || fail "config.yaml is not the resolved config"
"$FP8TRAIN" "${short[@]}" --resume || fail "--resume with the same short config failed"
[ "$(json_get runs/short/summary.json 'd["status"]')" = completed ] || fail "short config: resumed run did not complete"
! ls runs/short/config.resume-*.yaml >/dev/null 2>&1 || fail "a resume with the same short config recorded a change"
echo "ok"
