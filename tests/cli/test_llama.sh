# A tiny LLaMA (RoPE, GQA with 2 K/V heads, RMSNorm, SwiGLU, no bias, untied head, separate
# q/k/v in fp8) trains on the CPU in fp32 and in fp8 emulation: the loss drops, and a run stopped
# and resumed gives the uninterrupted run's losses bit for bit.
source "$(dirname "$0")/lib.sh"
LLAMA=(--set model.position=rope --set model.n_kv_head=2 --set model.norm=rmsnorm --set model.activation=swiglu
       --set model.bias=false --set model.d_model=64 --set model.seq_len=32 --set train.micro_batch_size=8)
first_last() { losses "$1" | sed -n '1p;$p' | tr '\n' ' '; }
for prec in fp32 fp8; do
  extra=()
  [ "$prec" = fp8 ] && extra=(--set model.fused_qkv=false)
  common=(--precision "$prec" --steps 30 --set train.log_interval=1 "${LLAMA[@]}" "${extra[@]}")
  fp8train_short "straight-$prec" "${common[@]}"
  read -r first last <<<"$(first_last "runs/straight-$prec/metrics.jsonl")"
  python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') - 0.3 else 1)" \
    || fail "$prec: loss did not drop ($first -> $last)"
  fp8train_short "split-$prec" "${common[@]}" --stop-after 12
  fp8train_short "split-$prec" "${common[@]}" --resume
  diff <(losses "runs/straight-$prec/metrics.jsonl") <(losses "runs/split-$prec/metrics.jsonl") \
    || fail "$prec: resumed loss sequence differs"
done
# The FP8 rewrite covers every Linear of the block (separate q/k/v included).
grep -q "h0.attn.k_proj" runs/straight-fp8/train.log || fail "the rewrite report does not list h0.attn.k_proj"
echo "ok"
