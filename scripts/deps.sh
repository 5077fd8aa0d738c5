#!/usr/bin/env bash
# What the GPU-free suite needs from the system, in one list (`make deps`,
# `make test` and CI all come here), installed with apt when missing.
#
#   scripts/deps.sh            install what is missing; fails if it cannot
#   scripts/deps.sh --soft     the same, but when it cannot install (not
#                              root, no network) it names what is missing
#                              and which tests will skip, and exits 0:
#                              `make test` goes on and the skips say why
#   scripts/deps.sh --check    only list what is missing; exit 1 if anything
#
# Nothing is printed when everything is there. CI=true makes --soft strict:
# a CI run that silently skipped tests would prove less than it says.
set -u

mode=strict
case "${1:-}" in
  '') ;;
  --soft) mode=soft ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "deps: unknown argument '$1' (use --soft, --check or nothing)" >&2; exit 2 ;;
esac
[ "$mode" = soft ] && [ "${CI:-}" = true ] && mode=strict

# One row per need: apt package, the check that it is there, what needs it.
missing=() why=()
need() { # PACKAGE CHECK WHAT
  if ! eval "$2" >/dev/null 2>&1; then
    missing+=("$1")
    why+=("$1: $3")
  fi
}
need cmake              'command -v cmake'   'the build'
need gcc                'command -v gcc'     'the build'
need make               'command -v make'    'the build'
need python3            'command -v python3' 'the test summary and several tests'
need clang              'command -v clang'   'the fuzz targets (fuzz/)'
# clang only recommends libFuzzer's runtime; without it the fuzz targets
# run as corpus replays instead of fuzzing.
need libclang-rt-14-dev 'dpkg -s libclang-rt-14-dev' 'fuzzing with libFuzzer (fuzz/)'
need golang-go          'command -v go'      'hami_region (a Go transcription of HAMi decodes our region)'
need yamllint           'command -v yamllint' 'deploy_manifests'
need python3-yaml       'python3 -c "import yaml"' 'deploy_manifests, enforce_replace'
need bsdutils           'command -v script'  'node_top (script(1) gives it a terminal)'
need prometheus         'command -v promtool' 'node_exporter (promtool and a Prometheus server)'
need curl               'command -v curl'    'node_exporter, node_mps'
need python3-jsonschema 'python3 -c "import jsonschema"' 'cdi_spec (the CDI schema check)'
need podman             'command -v podman'  'cdi_container (a runtime that reads CDI)'
need crun               'command -v crun'    'cdi_container (applying the spec with crun alone)'

[ ${#missing[@]} -eq 0 ] && exit 0

report() {
  echo "deps: missing ${missing[*]}"
  printf '  %s\n' "${why[@]}"
}

if [ "$mode" = check ]; then
  report
  exit 1
fi

if [ "$(id -u)" != 0 ]; then
  report >&2
  echo "deps: not root, so not installed: run 'sudo make deps' (apt-get install ${missing[*]})" >&2
  [ "$mode" = soft ] && { echo "deps: going on; the tests that need them will skip and say why" >&2; exit 0; }
  exit 1
fi

echo "deps: installing ${missing[*]}"
if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; then
  exit 0
fi
report >&2
echo "deps: apt-get could not install them (see above)" >&2
[ "$mode" = soft ] && { echo "deps: going on; the tests that need them will skip and say why" >&2; exit 0; }
exit 1
