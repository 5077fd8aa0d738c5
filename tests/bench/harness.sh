#!/bin/sh
# `cushare bench` runs the harness cushare-bench (src/cli/cmd_bench.c):
#   missing    `cushare` on its own, with no harness beside it or in the
#              install bin dir: one line naming cushare-bench and the fix,
#              exit 2, for a benchmark and for `help bench` alike;
#   installed  `cmake --install` into a prefix, then the prefix moved: the
#              installed `cushare bench` finds the harness beside it, the
#              harness finds the library in ../lib and the `cushare` beside
#              it (bench init and bench limiter on the fake driver, with no
#              CUSHARE_LIBRARY).
#   harness.sh CASE   (CS_BUILD_DIR, CS_INSTALL_BINDIR: the build's prefix/bin)
set -u
B=${CS_BUILD_DIR:?} case=$1
T=$B/tmp/bench_harness_$case
rm -rf "$T" && mkdir -p "$T" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# expect_missing ARGS...: `cushare ARGS` says the harness is missing.
expect_missing() {
    "$T/alone/cushare" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc -eq 2 ] || fail "cushare $*: exit $rc, not 2: $(cat "$T/err")"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "cushare $*: not one line: $(cat "$T/err")"
    grep -q "^cushare: bench: the benchmark harness cushare-bench is neither next to cushare ($T/alone) nor in $CS_INSTALL_BINDIR; build it with \`make\` or install it with \`make install\`\$" "$T/err" ||
        fail "cushare $*: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "cushare $*: wrote to stdout: $(cat "$T/out")"
    return 0
}

case $case in
missing)
    if [ -e "$CS_INSTALL_BINDIR/cushare-bench" ]; then
        echo "SKIP: $CS_INSTALL_BINDIR/cushare-bench is installed, so the command is never without it"
        exit 77
    fi
    mkdir "$T/alone" && cp "$B/cushare" "$T/alone/" || exit 1
    expect_missing bench init -n 1
    expect_missing bench --help
    expect_missing help bench
    ;;
installed)
    cmake --install "$B" --prefix "$T/prefix" >"$T/install.log" 2>&1 || fail "install: $(cat "$T/install.log")"
    [ -x "$T/prefix/bin/cushare-bench" ] || fail "cushare-bench is not installed in bin/ beside cushare"
    mv "$T/prefix" "$T/moved" || exit 1
    P=$T/moved
    unset CUSHARE_LIBRARY
    "$P/bin/cushare" bench --help >"$T/help" 2>&1 || fail "installed cushare bench --help: $(cat "$T/help")"
    "$B/cushare-bench" --help | cmp -s - "$T/help" || fail "installed bench help differs: $(cat "$T/help")"
    "$P/bin/cushare" bench init -n 2 >"$T/init" 2>&1 || fail "installed cushare bench init: $(cat "$T/init")"
    grep -q "run 1 cushare: ok 2/2, failed 0" "$T/init" || fail "installed bench init: $(cat "$T/init")"
    # A workload that runs at exactly its limit: every target is met.
    cat >"$T/stub.sh" <<'STUB'
#!/bin/sh
echo "RESULT workload=stub rate=$(( ${CUDA_DEVICE_SM_LIMIT:-100} * 10 ))"
STUB
    chmod +x "$T/stub.sh"
    (unset CUDA_DEVICE_SM_LIMIT; "$P/bin/cushare" bench limiter --secs 0.1 --warmup 0 --limits 50 \
        --start-delay 0 --launchbound none --launchcost none --out "$T" \
        --workload "stub=$T/stub.sh") >"$T/limiter" 2>&1 || fail "installed cushare bench limiter: $(cat "$T/limiter")"
    grep -q -- '--sm 50 (force) .* 50.0%' "$T/limiter" || fail "installed bench limiter: $(cat "$T/limiter")"
    ;;
*)
    echo "harness.sh: unknown case '$case'" >&2
    exit 2
    ;;
esac
echo "ok: $case"
