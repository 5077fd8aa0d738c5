# Sourced by the HAMi test scripts: wait_files FILE... waits until every
# named file exists, or fails the test after 60 s (scaled by CS_TEST_SCALE).
deadline=$(awk -v s="${CS_TEST_SCALE:-1}" 'BEGIN { print int(60 * s) }')
wait_files() {
  local end=$((SECONDS + deadline))
  for f in "$@"; do
    until [ -e "$f" ]; do
      if [ $SECONDS -ge $end ]; then echo "FAIL: timed out waiting for $f"; exit 1; fi
      sleep 0.02
    done
  done
}
