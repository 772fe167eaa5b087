# The README's commands work as written from the repository root after scripts/setup.sh, which
# builds build/fp8train and puts nothing on PATH:
#   - every fp8train command in its code blocks calls build/fp8train (a bare `fp8train` is exit 127);
#   - the "Running experiments" commands parse: each, run with --print-config, exits 0 (a
#     --plan-* line plans instead and may exit 2, "does not fit", as the README shows).
source "$(dirname "$0")/lib.sh"
README="$FP8T_SOURCE_DIR/README.md"

# commands BLOCK_HEADING: the commands of every fenced block (continuation lines joined, a "$ "
# prompt dropped), one per line; BLOCK_HEADING "" takes the whole README.
commands() {
  python3 - "$README" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
if sys.argv[2]:
    start = text.index("\n" + sys.argv[2] + "\n")
    end = text.find("\n#", start + 1)
    text = text[start:end]
for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip()
        print(line[2:] if line.startswith("$ ") else line)
PY
}

# Every command word `fp8train` (at the start, or after ;, &&, ||, do, then) is a bare call.
bare=$(commands "" | grep -E '(^|;|&&|\|\||\bdo|\bthen)[[:space:]]*fp8train\b' || true)
[ -z "$bare" ] || fail "README commands call a bare fp8train, which nothing puts on PATH:
$bare"

n=0
while IFS= read -r cmd; do
  [[ "$cmd" == build/fp8train* ]] || continue
  read -r -a words <<<"${cmd%%#*}"  # the comment dropped; the README's commands quote no spaces
  set +e
  (cd "$FP8T_SOURCE_DIR" && "$FP8TRAIN" "${words[@]:1}" --print-config --out-dir "$WORK/runs") > cmd.out 2>&1
  rc=$?
  set -e
  if [[ "$cmd" == *--plan-* ]]; then
    [ "$rc" = 0 ] || [ "$rc" = 2 ] && grep -q "^verdict: " cmd.out || { cat cmd.out; fail "'$cmd': exit $rc, no verdict"; }
  else
    [ "$rc" = 0 ] || { cat cmd.out; fail "'$cmd' --print-config: exit $rc"; }
  fi
  n=$((n + 1))
done < <(commands "## Running experiments")
[ "$n" -ge 5 ] || fail "found $n commands under 'Running experiments', expected at least 5"
[ ! -e "$WORK/runs" ] || fail "--print-config wrote $WORK/runs"
echo "ok: $n README commands"
