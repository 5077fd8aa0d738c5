#!/usr/bin/env bash
# cli_help_errors: the command's words to people (docs/cli.md). Every
# subcommand's --help and `cushare help CMD` (the same text, with
# examples); each documented usage error: exit status 2 and one line
# "cushare: CMD: what is wrong; the fix", "did you mean" included; sizes
# and shares read as documented; and `cushare top`'s frame: a legend, the
# full name of a tenant, a readable HOSTPID, no keys line in --once, a
# reason where NVML gives no GPU, and the FREE flag on a tenant above its
# share because nobody contends.
. "$CS_SOURCE_DIR/tests/node/common.sh" cli_help

# --- help ------------------------------------------------------------------
"$CLI" help >"$T/help" || fail "cushare help: exit $?"
grep -q '^  help CMD' "$T/help" || fail "cushare help does not name help CMD: $(cat "$T/help")"
for cmd in run broker status top exporter bench cdi suspend resume park wake mps; do
  grep -q "^  $cmd " "$T/help" || fail "cushare help does not list $cmd"
  "$CLI" $cmd --help >"$T/$cmd.help" 2>"$T/$cmd.err" || fail "$cmd --help: exit $?"
  [ -s "$T/$cmd.err" ] && fail "$cmd --help wrote to stderr: $(cat "$T/$cmd.err")"
  grep -qE "^(usage: | {7})cushare $cmd" "$T/$cmd.help" || fail "$cmd --help: no usage line: $(head -3 "$T/$cmd.help")"
  grep -q '^examples' "$T/$cmd.help" || fail "$cmd --help has no examples"
  "$CLI" help $cmd >"$T/$cmd.help2" || fail "cushare help $cmd: exit $?"
  cmp -s "$T/$cmd.help" "$T/$cmd.help2" || fail "cushare help $cmd differs from $cmd --help"
done
for word in '--policy' 'default = only while' 'force = always' 'disable = never' '--priority' \
            'lower number is a higher priority' '1.5GiB'; do
  grep -qF -- "$word" "$T/run.help" || fail "run --help does not explain '$word'"
done

# --- usage errors: exit 2, one line on stderr, the text documented ---------
# expect_usage 'TEXT' ARGS...: `cushare ARGS` exits 2, writes one line to
# stderr that starts "cushare: " and contains TEXT, and nothing to stdout.
expect_usage() {
  local want=$1; shift
  "$CLI" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "cushare $*: exit $rc, not 2 (stderr: $(cat "$T/err"))"
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "cushare $*: not one line: $(cat "$T/err")"
  grep -q '^cushare: ' "$T/err" || fail "cushare $*: '$(cat "$T/err")' does not start 'cushare: '"
  grep -qF -- "$want" "$T/err" || fail "cushare $*: '$(cat "$T/err")' does not say '$want'"
  [ -s "$T/out" ] && fail "cushare $*: wrote to stdout: $(cat "$T/out")"
  return 0
}
expect_usage "unknown command 'stauts'; did you mean 'status'?" stauts
expect_usage "unknown command 'stauts'; did you mean 'status'?" help stauts
expect_usage "unknown command 'frobnicate'; see cushare help" frobnicate
expect_usage "unknown option '--verison'" --verison
expect_usage "run: unknown option '--memory'; did you mean '--mem'?" run --memory 4GiB -- true
expect_usage "run: --mem needs a value" run --mem
expect_usage "run: --sm '0' is not a compute share from 1 to 100" run --sm 0 -- true
expect_usage "run: --sm '150' is not a compute share from 1 to 100" run --sm 150 -- true
expect_usage "run: --sm '50x' is not a compute share from 1 to 100" run --sm 25,50x -- true
expect_usage "cdi: --sm '0' is not a compute share from 1 to 100" cdi --name a --library "$B/libcushare.so" --sm 0
expect_usage "run: --mem '-1GiB' is negative; give a size of 0 (no limit) or more" run --mem -1GiB -- true
expect_usage "run: --mem '4gb' is ambiguous: GB may mean 10^9 or 2^30 bytes" run --mem 4gb -- true
expect_usage "write --mem 4GiB" run --mem 4gb -- true
expect_usage "run: --mem '3' has no unit; write e.g. --mem 3GiB" run --mem 3 -- true
expect_usage "run: --mem '1.5B' is not a whole number of bytes" run --mem 1.5B -- true
expect_usage "run: --mem 'lots' is not a size" run --mem lots -- true
expect_usage "cdi: --mem '2GB' is ambiguous" cdi --name a --library "$B/libcushare.so" --mem 2GB
expect_usage "run: --policy 'fast' is not a policy; give default, force or disable" run --policy fast -- true
expect_usage "run: --priority 'high' is not an integer" run --priority high -- true
expect_usage "run: --ledger 'x.ledger' is relative" run --ledger x.ledger -- true
expect_usage "run: --ledger /nonexistent/dir/x: directory /nonexistent/dir does not exist" \
  run --ledger /nonexistent/dir/x -- true
expect_usage "run: no command to run" run --mem 1GiB
expect_usage "status: unknown option '--jsno'; did you mean '--json'?" status --jsno
expect_usage "top: unknown option '--onse'; did you mean '--once'?" top --onse
expect_usage "top: --interval needs milliseconds from 100 to 60000" top --once --interval 5
expect_usage "mps: unknown action 'stpo'; did you mean 'stop'?" mps stpo
expect_usage "mps: no action; give start, stop or status" mps
expect_usage "mps: --gpu needs a value" mps status --gpu
expect_usage "suspend: unknown option '--timeuot'; did you mean '--timeout'?" suspend --timeuot 3 /x
expect_usage "exporter: unknown option '--lisen'; did you mean '--listen'?" exporter --lisen 127.0.0.1:1
expect_usage "park: unknown option '--timout'; did you mean '--timeout'?" park --timout 100 /x
expect_usage "broker: unknown option '--sokcet'; did you mean '--socket'?" broker --sokcet /x
expect_usage "cdi: unknown option '--nmae'; did you mean '--name'?" cdi --nmae a
expect_usage "bench: unknown benchmark 'nope'" bench nope

# --- what is accepted --------------------------------------------------------
# show_limit ARGS: the memory variable `cushare run ARGS` gives its command.
show_limit() { "$CLI" run "$@" -- sh -c 'echo "$CUDA_DEVICE_MEMORY_LIMIT"'; }
[ "$(show_limit --mem 1.5GiB)" = 1610612736 ] || fail "--mem 1.5GiB: $(show_limit --mem 1.5GiB)"
[ "$(show_limit --mem 4g)" = 4g ] || fail "--mem 4g: $(show_limit --mem 4g)"
[ "$(show_limit --mem 0.5KiB)" = 512 ] || fail "--mem 0.5KiB: $(show_limit --mem 0.5KiB)"
"$CLI" run --sm 1 -- true || fail "--sm 1 refused"
"$CLI" run --sm 100 -- true || fail "--sm 100 refused"

# --- top: legend, full names, HOSTPID, no keys line in --once, reasons -----
# A --sm 25 tenant under the default policy, alone: it runs above its share
# and top says why (FREE). Its name is longer than the 16-letter column.
LONG=newcomer-with-a-long-name
CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/$LONG.ledger" CUDA_DEVICE_MEMORY_LIMIT=1g \
  CUDA_DEVICE_SM_LIMIT=25 LD_PRELOAD="$B/libcushare.so" \
  "$B/limiter_worker" --secs 120 --blocks 2000 --sync 1 >"$T/long.out" 2>&1 &
PIDS+=($!)
wait_for 30 "the tenant to register" tenants_live 1
top_once() { "$CLI" top --once --no-scan --interval 300 --samples 4 "$@" >"$T/top" 2>"$T/top.err"; }
free_flag() { top_once && grep -q "^ *[0-9.]* *1024 .* FREE " "$T/top"; }
wait_for 60 "top to flag the uncontended tenant FREE ($(cat "$T/top" 2>/dev/null))" free_flag
grep -qF "$LONG.ledger" "$T/top" || fail "top cut the tenant's name: $(cat "$T/top")"
grep -q '^keys:' "$T/top" && fail "top --once printed the keys line"
grep -q 'nvml-nam' "$T/top" && fail "top shows a cut identity: $(cat "$T/top")"
grep -q ' HOSTPID$' "$T/top" || fail "top has no HOSTPID column: $(cat "$T/top")"
grep -q ' own-ns$' "$T/top" || fail "top does not say how host pids were learnt: $(cat "$T/top")"
for word in 'THR % of time paced' 'NP processes' 'HISTORY that share' 'FREE above its share, not contended'; do
  grep -qF "$word" "$T/top" || fail "top's legend lacks '$word': $(cat "$T/top")"
done
"$CLI" top --once "$T/$LONG.ledger" >"$T/top-ledger" 2>&1 || fail "top --once LEDGER: $(cat "$T/top-ledger")"
grep -qF "$LONG.ledger" "$T/top-ledger" || fail "top --once LEDGER: $(cat "$T/top-ledger")"
grep -q 'q quits' "$T/top-ledger" && fail "top --once LEDGER says how to quit: $(cat "$T/top-ledger")"
# Without NVML the GPU comes from the tenant's ledger: say why no more.
env -u LD_LIBRARY_PATH "$CLI" top --once --no-scan --interval 100 >"$T/top-nonvml" 2>&1 ||
  fail "top without NVML: $(cat "$T/top-nonvml")"
grep -q '^GPU ?' "$T/top-nonvml" && fail "top shows 'GPU ?': $(cat "$T/top-nonvml")"
grep -A1 'no index, name, utilisation or total:' "$T/top-nonvml" | grep -q '^      [a-zA-Z]' ||
  fail "top without NVML gives no reason: $(cat "$T/top-nonvml")"
# status without LEDGER (nor the variable): the node view for people.
env -u CUDA_DEVICE_MEMORY_SHARED_CACHE "$CLI" status --no-scan >"$T/status" 2>&1 ||
  fail "status without LEDGER: $(cat "$T/status")"
grep -qF "$LONG.ledger" "$T/status" || fail "status without LEDGER is not the node view: $(cat "$T/status")"
echo "PASS"
