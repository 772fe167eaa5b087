# --help and --version work and describe the recipe flags.
source "$(dirname "$0")/lib.sh"
out=$("$FP8TRAIN" --help) || fail "--help exited non-zero"
for flag in --config --fp8-margin --fp8-interval --fp8-format --fp8-amax-history-len \
            --fp8-amax-compute-algo --fp8-override-linear-precision --set --print-config --dry-run --resume; do
  grep -q -- "$flag" <<<"$out" || fail "--help does not mention $flag"
done
grep -q "train.lr" <<<"$out" || fail "--help does not list config keys"
# What the program trains, with which recipes, and what --quiet keeps.
grep -q "GPT- and LLaMA-style" <<<"$out" && grep -q "delayed, current, block or rowwise" <<<"$out" \
  || fail "--help does not name the model families and the FP8 recipes: $(head -3 <<<"$out")"
grep -q -- "--quiet silences the progress, not the result" <<<"$out" || fail "--help does not say what --quiet keeps"
ver=$("$FP8TRAIN" --version) || fail "--version exited non-zero"
grep -q "fp8train" <<<"$ver" && grep -q "LibTorch" <<<"$ver" || fail "--version output: $ver"
echo "ok"
