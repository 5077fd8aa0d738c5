#!/usr/bin/env bash
# The spec: `cushare cdi` writes a CDI spec that the CDI
# JSON schema accepts (tests/cdi/validate.py, python3-jsonschema), makes
# the host files it names, and refuses bad input with one line and exit 2.
# The checker is shown to reject broken specs, so a pass means something.
# Run by CTest: spec.sh BUILD_DIR SOURCE_DIR; 77 (SKIP) without jsonschema.
set -euo pipefail
B=$1 S=$2
T=$B/tmp/cdi-spec
LIB=${CUSHARE_LIBRARY:-$B/libcushare.so}
rm -rf "$T"
mkdir -p "$T/etc-cdi"
validate() { python3 "$S/tests/cdi/validate.py" "$S/tests/cdi/cdi-schema.json" "$@"; }

echo "== the spec of a two-device slice"
spec=$T/etc-cdi/cushare-team-a.json
"$B/cushare" cdi --name team-a --mem 256MiB,1GiB --sm 25 --library "$LIB" --state "$T/state" \
  --output "$spec"
cat "$spec"
rc=0; validate "$spec" || rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "FAIL: cushare cdi wrote a spec the schema refuses"; exit 1; }
python3 - "$spec" "$LIB" "$T/state" <<'EOF'
import json, sys
spec, lib, state = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
assert spec["kind"] == "cushare.io/slice", spec["kind"]
(dev,) = spec["devices"]
assert dev["name"] == "team-a"
env = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
want = {"CUDA_DEVICE_MEMORY_LIMIT_0": "256MiB", "CUDA_DEVICE_MEMORY_LIMIT_1": "1GiB",
        "CUDA_DEVICE_SM_LIMIT": "25", "CUSHARE_LEDGER_TRUST": "directory",
        "LIBVGPU_HOSTPID_BROKER": "1",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{state}/slices/team-a/ledger"}
assert env == want, env
mounts = {m["containerPath"]: m for m in dev["containerEdits"]["mounts"]}
lib_in = "/usr/local/cushare/libcushare.so"
assert mounts[lib_in]["hostPath"] == lib and "ro" in mounts[lib_in]["options"]
pre = mounts["/etc/ld.so.preload"]
assert pre["hostPath"] == f"{state}/ld.so.preload" and "ro" in pre["options"]
assert open(pre["hostPath"]).read() == lib_in + "\n"
assert mounts[f"{state}/slices/team-a"]["hostPath"] == f"{state}/slices/team-a"
assert mounts["/tmp/vgpulock"]["hostPath"] == "/tmp/vgpulock"
print("env, library, ld.so.preload, ledger directory and node directory as expected")
EOF
[ "$(stat -c %a "$T/state/slices/team-a")" = 1777 ] || { echo "FAIL: slice directory mode"; exit 1; }
"$B/cushare" cdi --name team-a --mem 256MiB,1GiB --sm 25 --library "$LIB" --state "$T/state" \
  > "$T/stdout.json"
cmp "$spec" "$T/stdout.json"

echo "== the checker refuses broken specs"
python3 - "$spec" "$T" <<'EOF'
import json, sys
spec, t = json.load(open(sys.argv[1])), sys.argv[2]
breaks = {
    "no-edits": lambda s: s["devices"][0].pop("containerEdits"),
    "kind": lambda s: s.__setitem__("kind", "cushare"),
    "name": lambda s: s["devices"][0].__setitem__("name", "team a"),
    "mount": lambda s: s["devices"][0]["containerEdits"]["mounts"][0].pop("hostPath"),
    "extra": lambda s: s.__setitem__("devicez", []),
}
for name, brk in breaks.items():
    s = json.loads(json.dumps(spec))
    brk(s)
    json.dump(s, open(f"{t}/broken-{name}.json", "w"))
EOF
for f in "$T"/broken-*.json; do
  if validate "$f"; then echo "FAIL: the checker accepted $f"; exit 1; fi
done

echo "== bad input: one line naming the thing, exit 2"
bad() {
  local rc=0
  "$B/cushare" cdi --state "$T/bad-state" "$@" > "$T/out" 2> "$T/err" || rc=$?
  if [ $rc != 2 ] || [ "$(wc -l < "$T/err")" != 1 ] || [ -s "$T/out" ] || [ -e "$T/bad-state" ]; then
    echo "FAIL: cushare cdi $*: rc $rc (want 2), stderr:"; cat "$T/err"; exit 1
  fi
  echo "$* -> $(cat "$T/err")"
}
bad --mem 1GiB
bad --name 'team a' --mem 1GiB
bad --name a --mem 12
bad --name a --sm 120
bad --name a --mem 1GiB,
bad --name a
bad --name a --mem 1GiB --kind foo
bad --name a --mem 1GiB --library lib.so
bad --name a --mem 1GiB --library '/a b/lib.so'
bad --name a --mem 1GiB --library /nonexistent/libcushare.so
bad --name a --mem 1GiB --bogus
bad --name a --mem
echo "PASS"
