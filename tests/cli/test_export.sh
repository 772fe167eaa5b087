# fp8train export and model.init_from end to end:
#  - a tiny GPT-2, a tiny LLaMA (RoPE, GQA, RMSNorm, SwiGLU, no bias, tied head) and a tiny OLMoE
#    (a mixture of experts), exported with Hugging Face names, load in transformers and give
#    fp8train's logits within 1e-4 relative;
#  - the HF export read back through model.init_from and exported again with fp8train's names is
#    bit for bit the run's own fp8train-names export (one update of lr 1e-30 cannot move an FP32 weight);
#  - a file for another shape is refused with exit 2, naming the tensor.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import safetensors, transformers' 2>/dev/null; then
  "$PY" -m pip install -q safetensors transformers || fail "cannot install safetensors and transformers into $PY"
fi
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
LLAMA=(--set model.position=rope --set model.n_kv_head=2 --set model.norm=rmsnorm --set model.activation=swiglu
       --set model.bias=false --set model.tie_embeddings=true --set model.rope_theta=500000)
tiny=(--steps 20 --set model.n_layer=2 --set model.d_model=64 --set model.seq_len=32 --set train.micro_batch_size=4)

check_family() {  # NAME ARCHITECTURE [flags...]
  local name=$1 arch=$2; shift 2
  fp8train_short "$name" "${tiny[@]}" "$@"
  mkdir -p "hf-$name"
  "$FP8TRAIN" export --run "runs/$name" --out "hf-$name/model.safetensors" --names hf \
    --dump-logits "$name-logits.safetensors" || fail "$name: export --names hf"
  [ -f "hf-$name/config.json" ] || fail "$name: no config.json"
  "$PY" "$FP8T_SOURCE_DIR/tests/cli/hf_logits_check.py" "hf-$name" "$name-logits.safetensors" "$arch" \
    || fail "$name: transformers' logits differ"
  "$FP8TRAIN" export --run "runs/$name" --out "$name-own.safetensors" || fail "$name: export"
  # Round trip: HF names -> init_from -> fp8train names, bit for bit.
  fp8train_short "$name-back" "${tiny[@]}" "$@" --steps 1 --set train.warmup_steps=0 --set train.lr=1e-30 \
    --set train.min_lr=0 --set train.weight_decay=0 --set "model.init_from=$WORK/hf-$name/model.safetensors"
  "$FP8TRAIN" export --run "runs/$name-back" --out "$name-back.safetensors" || fail "$name: export after init_from"
  "$PY" - "$name-own.safetensors" "$name-back.safetensors" <<'EOF' || fail "$name: round trip is not bit-exact"
import sys, torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
bad = [k for k in a if not torch.equal(a[k], b[k])]
assert not bad, bad
EOF
}

check_family gpt2 GPT2LMHeadModel
check_family llama LlamaForCausalLM "${LLAMA[@]}"
# A mixture of experts (OLMoE's layout: q/k norms, a softmax router, 4 experts, top-2), exported as
# OlmoeForCausalLM with per-expert names (the published checkpoints' layout, which transformers
# also loads into its fused expert weights).
check_family olmoe OlmoeForCausalLM "${LLAMA[@]}" --set model.tie_embeddings=false --set model.qk_norm=true \
  --set moe.experts=4 --set moe.top_k=2 --set moe.d_ff=32

# bf16 export: every tensor BF16, config.json says so.
"$FP8TRAIN" export --run runs/llama --out llama-bf16.safetensors --dtype bf16 || fail "export --dtype bf16"
"$PY" -c "
import sys; from safetensors import safe_open
with safe_open('llama-bf16.safetensors', 'pt') as f:
    assert all(str(f.get_slice(k).get_dtype()) == 'BF16' for k in f.keys())" || fail "bf16 export dtype"

# Another shape: exit 2, naming the tensor; nothing written.
set +e
out=$(fp8train_short bad "${tiny[@]}" --set model.d_model=32 "--set" "model.init_from=$WORK/gpt2-own.safetensors" 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] || fail "init_from of another shape: exit $rc, expected 2: $out"
grep -q "wte.weight' has shape" <<<"$out" || fail "init_from shape error names no tensor: $out"
[ ! -e runs/bad ] || fail "a refused init_from created the run folder"

# A bad flag value: exit 2.
set +e
out=$("$FP8TRAIN" export --run runs/gpt2 --out x.safetensors --names nope 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || fail "--names nope: exit $rc"
echo "ok"
