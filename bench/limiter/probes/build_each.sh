# shellcheck shell=bash
# Sourced by the probes that compare builds (builds.sh, first_sample.sh):
#   build_each OUT TARGETS NAME=SOURCE_DIR...
# builds each SOURCE_DIR (a copy of this repository) into build-NAME at the
# repository's root (Release; TARGETS: a space-separated list of CMake
# targets), logging to OUT/NAME-build.log. A build that fails is named in OUT/summary.txt and
# makes build_each return 1 after trying the others.
build_each() {
    local out=$1 targets=$2 b name src build rc=0 root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
    shift 2
    for b in "$@"; do
        name=${b%%=*} src=$(cd "${b#*=}" && pwd) build=$root/build-${b%%=*}
        mkdir -p "$build"
        # shellcheck disable=SC2086 # the targets are words
        { cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release &&
            cmake --build "$build" -j"$(nproc)" --target $targets; } \
            > "$out/$name-build.log" 2>&1 || { echo "$name: build failed" | tee -a "$out/summary.txt"; rc=1; }
    done
    return $rc
}
