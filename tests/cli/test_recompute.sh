# train.recompute end to end (CPU, fp8 emulation): every mode (casts too) trains the loss sequence
# of none bit for bit, also when stopped and resumed; a resume may switch recompute on (a train.* key); with
# model.dropout > 0 it is exit 2 naming both keys, before the run folder is written.
source "$(dirname "$0")/lib.sh"
common=(--precision fp8 --steps 6 --set train.log_interval=1)
fp8train_short none "${common[@]}"
for mode in attention mlp casts; do
  fp8train_short "$mode" "${common[@]}" --recompute "$mode"
  diff <(losses runs/none/metrics.jsonl) <(losses "runs/$mode/metrics.jsonl") \
    || fail "$mode: the loss sequence differs from recompute none"
done
fp8train_short block "${common[@]}" --recompute block --stop-after 3
[ "$(json_get runs/block/summary.json 'd["status"]')" = stopped ] || fail "block: stop-after status"
fp8train_short block "${common[@]}" --recompute block --resume
diff <(losses runs/none/metrics.jsonl) <(losses runs/block/metrics.jsonl) \
  || fail "block, stopped and resumed: the loss sequence differs from recompute none"
fp8train_short switched "${common[@]}" --stop-after 3
fp8train_short switched "${common[@]}" --recompute mlp --resume
diff <(losses runs/none/metrics.jsonl) <(losses runs/switched/metrics.jsonl) \
  || fail "switching recompute on at a resume changed the loss sequence"
[ "$(losses runs/switched/metrics.jsonl | wc -l)" = 6 ] || fail "expected 6 loss rows"

set +e
out=$(fp8train_short refused --recompute mlp --set model.dropout=0.1 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] || fail "recompute with dropout: exit $rc, expected 2: $out"
grep -q "train.recompute" <<<"$out" && grep -q "model.dropout" <<<"$out" || fail "the message must name both keys: $out"
[ ! -e runs/refused ] || fail "a refused run wrote its folder"
echo "ok"
