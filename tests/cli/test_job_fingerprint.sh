# One job, one configuration: two ranks (Gloo, launched by hand) given a different train.lr, or
# the same data path holding other bytes (each rank started in its own folder), both stop at the
# join with exit 2, each naming the key or the file, and nothing is written. The agreeing case
# is every other data-parallel test (tests/cli/test_data_parallel.sh).
source "$(dirname "$0")/lib.sh"

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
TINY=(--quiet --steps 2 --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=16
      --set model.vocab_size=256 --set train.micro_batch_size=2 --set train.eval_batches=1 --set dist.timeout_s=60
      --set train.warmup_steps=0
      --set data.source=text --set data.train_path=train.txt --out-dir runs --run-name fp)
# two_ranks "RANK0 FLAGS" "RANK1 FLAGS": rank r runs in folder r/; sets rc0, rc1.
two_ranks() {
  local port; port=$(free_port)
  local flags=("$1" "$2") pids=()
  for r in 0 1; do
    # shellcheck disable=SC2086
    (cd "$r" && RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      exec "$FP8TRAIN" "${TINY[@]}" ${flags[$r]} > out.txt 2>&1) &
    pids+=($!)
  done
  set +e; wait "${pids[0]}"; rc0=$?; wait "${pids[1]}"; rc1=$?; set -e
}
expect_both() {  # expect_both LABEL NEEDLE: exit 2 on both ranks, each naming NEEDLE, no run folder
  for r in 0 1; do
    local rc; rc=$([ "$r" = 0 ] && echo "$rc0" || echo "$rc1")
    [ "$rc" = 2 ] || { cat "$r/out.txt" >&2; fail "$1: rank $r exit $rc, expected 2"; }
    grep -q -- "$2" "$r/out.txt" || { cat "$r/out.txt" >&2; fail "$1: rank $r does not name '$2'"; }
    [ ! -e "$r/runs" ] || fail "$1: rank $r wrote $(ls -R "$r/runs")"
  done
}
mkdir -p 0 1
python3 -c "print('the same text on both ranks. ' * 400)" > 0/train.txt
cp 0/train.txt 1/train.txt

two_ranks "" "--set train.lr=0.001"
expect_both "another train.lr" "config key train.lr differs between the ranks"
grep -q "rank 1: 0.001" 1/out.txt || { cat 1/out.txt; fail "rank 1 does not show its own value"; }

# The same path, other bytes at its head (as another node's copy of a file would be).
python3 -c "print('other text on this rank only. ' * 400)" > 1/train.txt
two_ranks "" ""
expect_both "other data behind one path" "file train.txt (data.train_path) differs between the ranks"
echo "test_job_fingerprint: ok"
