# --help and --version work and describe the recipe flags.
source "$(dirname "$0")/lib.sh"
out=$("$FP8TRAIN" --help) || fail "--help exited non-zero"
for flag in --config --fp8-margin --fp8-interval --fp8-format --fp8-amax-history-len \
            --fp8-amax-compute-algo --fp8-override-linear-precision --set --print-config --dry-run --resume; do
  grep -q -- "$flag" <<<"$out" || fail "--help does not mention $flag"
done
grep -q "train.lr" <<<"$out" || fail "--help does not list config keys"
# What the program trains, with which recipes, and what --quiet keeps. Every list of the recipes
# is the registry's (lib/config/fp8_recipe_fields.cpp), as an unknown recipe's error gives it.
set +e
"$FP8TRAIN" --fp8-recipe no-such-recipe --print-config > unknown.txt 2>&1
set -e
recipes=$(sed -n "s/.*fp8.recipe (--fp8-recipe): expected one of \([a-z0-9, ]*\), got 'no-such-recipe'.*/\1/p" unknown.txt | head -1)
[ -n "$recipes" ] && [[ "$recipes" == *delayed* ]] || { cat unknown.txt; fail "an unknown recipe's error does not list the recipes"; }
grep -q "GPT- and LLaMA-style" <<<"$out" && grep -qF "recipes: $recipes;" <<<"$out" \
  || fail "--help does not name the model families and the FP8 recipes ($recipes): $(head -3 <<<"$out")"
eval_help=$("$FP8TRAIN" eval --help) || fail "eval --help exited non-zero"
grep -F -- "--fp8-recipe" <<<"$eval_help" | grep -qF "$recipes" || fail "eval --help's --fp8-recipe does not list $recipes"
bench_help=$("$FP8TRAIN" bench --help | tr -s ' \n' ' ') || fail "bench --help exited non-zero"
grep -qF "$recipes" <<<"$bench_help" || fail "bench --help's --recipes does not list $recipes"
keys=$("$FP8TRAIN" --list-keys | grep "^ *fp8.recipe ") || fail "--list-keys has no fp8.recipe"
for r in ${recipes//,/ }; do grep -q "$r: " <<<"$keys" || fail "fp8.recipe's description leaves out $r: $keys"; done
# The README's flag table lists them in the registry's order.
readme_row="| \`--fp8-recipe ${recipes//, /\\|}\` |"
grep -qF "$readme_row" "$FP8T_SOURCE_DIR/README.md" || fail "README's flag table does not list the recipes as $readme_row"
grep -q -- "--quiet silences the progress, not the result" <<<"$out" || fail "--help does not say what --quiet keeps"
ver=$("$FP8TRAIN" --version) || fail "--version exited non-zero"
grep -q "fp8train" <<<"$ver" && grep -q "LibTorch" <<<"$ver" || fail "--version output: $ver"
echo "ok"
