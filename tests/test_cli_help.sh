#!/usr/bin/env bash
# The command line documents itself (src/app/cli.h): `trident COMMAND --help` for every
# subcommand lists every option its parser accepts, with a meaning and a default; an unknown
# option or command exits 2 naming it, suggesting the closest name and --help; "did you mean"
# for config enum values. Prints PASS/FAIL lines.
#
# What "every option" is checked against, from both sides:
#   - each option the help lists is tried on the parser (given without its value, or alone
#     for a flag): the parser must know it (never "unknown option");
#   - each option name written as a C string literal anywhere in src/ (`"--tokens"`: what
#     a hand-written parser would compare with) must be in some subcommand's help.
set -u
cd "$(dirname "$0")/.."
T=${TRIDENT_BIN:-build/trident}
CFG=tests/configs/tiny.yaml
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
# expect NAME CODE PATTERN CMD...: exit code CODE and stdout+stderr matching PATTERN (ERE)
expect() {
    local name=$1 code=$2 pattern=$3; shift 3
    "$@" >"$W/out" 2>&1
    local rc=$?
    if [ $rc != "$code" ]; then fail "$name" "exit $rc, expected $code: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" "$W/out"; then fail "$name" "output lacks /$pattern/: $(tail -n 3 "$W/out" | tr '\n' ' ')"
    else pass "$name"; fi
}

# --- the subcommands, from `trident --help`
$T --help >"$W/top" 2>&1 || fail top_help "exit $?"
mapfile -t cmds < <(sed -nE 's/^  trident ([a-z][a-z-]*) .*/\1/p' "$W/top")
if [ "${#cmds[@]}" -ge 7 ]; then pass "top_help_lists_commands ${cmds[*]}"
else fail top_help_lists_commands "found ${cmds[*]:-none} in trident --help"; fi
for want in train check plan sample export tokenize comm-test; do
    [[ " ${cmds[*]} " == *" $want "* ]] || fail "top_help_$want" "trident --help does not list $want"
done

# --- each subcommand's help, and every option it lists tried on the parser
: >"$W/all_options"
for c in "${cmds[@]}"; do
    $T "$c" --help >"$W/$c.help" 2>"$W/$c.err"
    rc=$?
    $T "$c" -h >"$W/$c.h" 2>&1
    if [ $rc != 0 ] || ! grep -q "^usage: trident $c" "$W/$c.help" || [ -s "$W/$c.err" ]; then
        fail "help_$c" "exit $rc: $(head -n 2 "$W/$c.help" "$W/$c.err" | tr '\n' ' ')"
        continue
    fi
    cmp -s "$W/$c.help" "$W/$c.h" || fail "help_short_$c" "-h differs from --help"
    # An option line: "  --name [VALUE]  meaning (default: X | required)"; a meaning that
    # wraps continues on indented lines, so the default may be on a later one.
    /usr/bin/python3 - "$W/$c.help" >"$W/$c.opts" 2>"$W/$c.py" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
opts = text.split('\noptions:\n', 1)[1]
entries = re.split(r'\n(?=  -)', opts.strip('\n'))
bad = []
for e in entries:
    m = re.match(r'\s*(--[a-z][a-z0-9-]*)( [^ ]+)?\s+(\S.*)', e, re.S)
    if not m:
        if not e.lstrip().startswith('-h, --help'):
            bad.append(e.split('\n')[0])
        continue
    name, value, meaning = m.group(1), m.group(2), ' '.join(m.group(3).split())
    flag = value is None
    if len(meaning) < 10 or not (flag or re.search(r'\((default: [^)]+|required)\)$', meaning)):
        bad.append(name + ': no meaning or default: ' + meaning)
    print(name, 'flag' if flag else 'value')
if bad:
    sys.exit('; '.join(bad))
EOF
    py=$?
    cut -d' ' -f1 "$W/$c.opts" >>"$W/all_options"
    if [ $py != 0 ]; then fail "help_options_$c" "$(tail -n 1 "$W/$c.py")"; continue; fi
    n=0 unknown=""
    while read -r opt kind; do
        n=$((n + 1))
        # Alone: a value option must say it needs a value, a flag must pass the parser (the
        # command then stops at a missing argument); never "unknown option".
        timeout 20 $T "$c" "$opt" >"$W/try" 2>&1
        if grep -q "unknown option" "$W/try" ||
            { [ "$kind" = value ] && ! grep -qF -- "$opt needs a value" "$W/try"; }; then
            unknown="$unknown $opt($(head -n 1 "$W/try" | cut -c1-80))"
        fi
    done <"$W/$c.opts"
    if [ -z "$unknown" ]; then pass "help_$c: $n options, each with a meaning and a default, each known to the parser"
    else fail "help_$c" "listed but not parsed as listed:$unknown"; fi
    # An unknown option: exit 2, named, the closest suggested, --help named.
    expect "unknown_option_$c" 2 "unknown option --frobnicate.*|trident $c --help" $T "$c" --frobnicate
done

# --- no option parsed outside the tables: every "--name" literal in src/ is documented
missing=""
for lit in $(grep -rhoE '"--[a-z][a-z0-9-]*"' src cuda | tr -d '"' | sort -u); do
    case $lit in --help | --version) continue ;; esac
    grep -qxF -- "$lit" "$W/all_options" || missing="$missing $lit"
done
if [ -z "$missing" ]; then pass "every option literal in src/ is in a subcommand's help"
else fail option_literals_documented "in src/ but in no --help:$missing"; fi

# --- did you mean: options, commands, values
expect did_you_mean_option 2 "unknown option --tokns; did you mean --tokens\?" $T sample x --tokns 3
expect did_you_mean_option_hint 2 "trident sample --help" $T sample x --tokns 3
expect did_you_mean_bare_word 2 "unexpected argument prompt .*did you mean --prompt\?" $T sample x prompt
expect did_you_mean_command 2 "unknown command trian; did you mean train\?" $T trian
expect did_you_mean_command_alias 2 "unknown command generate; did you mean sample\?" $T generate
expect unknown_command_lists 2 "the commands are train, check, plan" $T frobnicate
expect did_you_mean_choice 2 "--format needs llmc, safetensors or hf, got safetensor; did you mean safetensors\?" \
    $T export x --format safetensor --out "$W/x"
expect did_you_mean_bf16 2 "train.precision: expected one of fp32, bf16, tf32, got bfloat16; did you mean bf16\?" \
    $T check $CFG --set train.precision=bfloat16
expect did_you_mean_fp32 2 "train.grad_dtype: .*got float32; did you mean fp32\?" $T check $CFG --set train.grad_dtype=float32
expect did_you_mean_recompute 2 "parallel.recompute: .*got true; did you mean full\?" $T check $CFG --set parallel.recompute=true
expect did_you_mean_schedule 2 "parallel.schedule: .*got 1F1B; did you mean 1f1b\?" $T check $CFG --set parallel.schedule=1F1B
expect did_you_mean_decay 2 "optim.decay: .*got cosin; did you mean cosine\?" $T check $CFG --set optim.decay=cosin
expect did_you_mean_yaml_value 2 "tiny-bf16.yaml:[0-9]+: train.precision: .*did you mean bf16\?" \
    bash -c "sed 's/^train: {/train: {precision: bfloat16, /' $CFG >$W/tiny-bf16.yaml && $T check $W/tiny-bf16.yaml"
expect no_guess_when_none_close 2 "got int8$" $T check $CFG --set train.precision=int8

# --- usage errors name what is wrong
expect missing_value 2 "--tokens needs a value \(N\)" $T sample x --tokens
expect bad_integer 2 "--tokens needs an integer >= 0, got -1" $T sample x --tokens -1
expect bad_number 2 "--temperature needs a number >= 0, got hot" $T sample x --temperature hot
expect missing_required 2 "needs SOURCE, --format llmc\|safetensors\|hf and --out FILE" $T export
expect flag_with_value 2 "--json takes no value" $T plan $CFG --json=yes
expect inline_value 0 "model: " $T plan $CFG --world=1 --device=cpu
expect help_command 0 "^usage: trident export" $T help export
expect option_before_command 2 "unknown option --frob before the command" $T --frob train

[ $fails = 0 ]
