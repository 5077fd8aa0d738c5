#!/bin/sh
# Who may use whom among the folders of src/ (docs/architecture.md).
#
# A folder depends on another when one of its files includes
# "other/..." or when its object files use a symbol (a function or a
# variable; macros and inline functions show through what they expand to)
# that the other's object files define. Checked:
#   - every edge is one the table in docs/architecture.md allows; an edge
#     the table narrows ("-> other only: sym sym*") uses no other symbol;
#   - include what you use: a folder using another's symbols includes a
#     header of it itself, so no header re-exports another module;
#   - the table lists no edge the code does not have (it is the picture);
#   - no cycle.
# The wrappers named in src/hook/hooks.def are exempt: hook's routing
# table names every one of them on purpose (docs/architecture.md).
#
# Usage: scripts/check_deps.sh [SRC_DIR [OBJ_DIR [ARCH_DOC]]]
#   OBJ_DIR: the build's CMakeFiles folder (default build/CMakeFiles).
# Prints the edges seen ("from -> to  [include] [symbols]"), then "ok"
# (exit 0) or each violation (exit 1); 2 for unusable arguments.
set -eu
here=$(dirname "$0")
src=${1:-$here/../src}
obj=${2:-$here/../build/CMakeFiles}
doc=${3:-$here/../docs/architecture.md}
[ -d "$src" ] || { echo "check_deps: no source folder $src" >&2; exit 2; }
[ -d "$obj" ] || { echo "check_deps: no object folder $obj: build first (make)" >&2; exit 2; }
[ -f "$doc" ] || { echo "check_deps: no table $doc" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Include edges: "from to".
for dir in "$src"/*/; do
    from=$(basename "$dir")
    grep -ho '^#include "[a-z_0-9]*/' "$dir"*.[ch] "$dir"*.def "$dir"*.inc 2>/dev/null |
        sed 's/^#include "//; s/\/$//' | sort -u | while read -r to; do
            [ "$to" = "$from" ] || [ ! -d "$src/$to" ] || echo "$from $to"
        done
done | sort -u >"$tmp/inc"

# Symbols: "sym folder" defined, "folder sym" used, from the objects of
# the library, the command, the benchmark harness and the code they share. Only the
# project's own names (cs_*, cushare_*): hook also defines dlsym, which
# every other folder means as libc's.
: >"$tmp/def"
: >"$tmp/use"
# The objects the link lines name (never a stale object of a file that
# is gone).
for t in libcushare cushare_cli cushare_bench; do
    [ -f "$obj/$t.dir/link.txt" ] || { echo "check_deps: no $obj/$t.dir/link.txt: build first (make)" >&2; exit 2; }
    tr ' ' '\n' <"$obj/$t.dir/link.txt" | grep '^CMakeFiles/.*\.o$' || true
done | sort -u | sed "s|^CMakeFiles/|$obj/|" >"$tmp/objs"
for dir in "$src"/*/; do
    f=$(basename "$dir")
    ls "$dir"*.c >/dev/null 2>&1 || continue
    objs=$(grep "/src/$f/[^/]*\.o\$" "$tmp/objs" || true)
    [ -n "$objs" ] || { echo "check_deps: no objects of src/$f under $obj: build first (make)" >&2; exit 2; }
    nm -P -g --defined-only $objs 2>/dev/null | awk -v f="$f" '$1 ~ /^(cs_|cushare_)/ { print $1, f }' >>"$tmp/def"
    nm -P -u $objs 2>/dev/null | awk -v f="$f" '$1 ~ /^(cs_|cushare_)/ { print f, $1 }' >>"$tmp/use"
done
sed -n 's/^CS_CU([^,]*, *\([A-Za-z0-9_]*\),.*/\1/p; s/^CS_NVML(\([A-Za-z0-9_]*\),.*/\1/p' \
    "$src/hook/hooks.def" | sort -u >"$tmp/wrappers"
# "from to sym" for every use of another folder's symbol.
awk 'FILENAME == ARGV[1] { wrap[$1] = 1; next }
     FILENAME == ARGV[2] { def[$1] = $2; next }
     ($2 in def) && def[$2] != $1 && !($2 in wrap) { print $1, def[$2], $2 }' \
    "$tmp/wrappers" "$tmp/def" "$tmp/use" | sort -u >"$tmp/sym"

# The table: "allow from to" and "only from to glob" rows, from the
# indented lines "name -> dep dep" (and "name -> dep only: sym sym") that
# precede the document's first section.
awk '/^## / { exit }
     /^    [a-z]+ +-> / {
         line = $0
         sub(/^ +/, "", line)
         from = line; sub(/ .*/, "", from)
         deps = line; sub(/^[a-z]+ +-> */, "", deps); sub(/  .*/, "", deps)
         k = split(deps, w, / +/)
         if (k >= 2 && w[2] == "only:") {
             for (i = 3; i <= k; i++) print "only", from, w[1], w[i]
             print "allow", from, w[1]
             next
         }
         for (i = 1; i <= k; i++) print "allow", from, w[i]
     }' "$doc" | sort -u >"$tmp/table"

# Every edge seen, with what makes it.
{ awk '{ print $1, $2, "include" }' "$tmp/inc"; awk '{ print $1, $2, $3 }' "$tmp/sym"; } |
    awk '{ k = $1 " -> " $2; if (!(k in why)) { order[++n] = k; why[k] = "" }
           if ($3 == "include") inc[k] = 1; else if (split(why[k], x, " ") < 4) why[k] = why[k] " " $3
           else if (why[k] !~ /\.\.\.$/) why[k] = why[k] " ..." }
         END { for (i = 1; i <= n; i++) { k = order[i]
                 printf "%s  [%s%s]\n", k, (k in inc) ? "include" : "", why[k] } }' | sort

fail=0
# Edges the table does not allow, and narrowed edges used beyond their symbols.
awk 'FILENAME == ARGV[1] { if ($1 == "allow") ok[$2 " " $3] = 1; else { only[$2 " " $3] = 1; glob[$2 " " $3] = glob[$2 " " $3] " " $4 }; next }
     FILENAME == ARGV[2] { e = $1 " " $2; if (!(e in ok)) bad[e] = 1; next }
     { e = $1 " " $2
       if (!(e in ok)) { bad[e] = 1; next }
       if (!(e in only)) next
       n = split(glob[e], g, " "); hit = 0
       for (i = 1; i <= n; i++) { re = "^" g[i] "$"; gsub(/\*/, ".*", re); if ($3 ~ re) hit = 1 }
       if (!hit) print "check_deps: " $1 " may use only" glob[e] " of " $2 ", not " $3 }
     END { for (e in bad) { split(e, p, " "); print "check_deps: " p[1] " -> " p[2] " is not in the table of docs/architecture.md" } }' \
    "$tmp/table" "$tmp/inc" "$tmp/sym" | sort >"$tmp/bad"
# Include what you use.
awk 'FILENAME == ARGV[1] { inc[$1 " " $2] = 1; next }
     !(($1 " " $2) in inc) && !seen[$1 " " $2]++ {
         print "check_deps: " $1 " uses " $3 " of " $2 " but includes no header of " $2 " (a header re-exports it)" }' \
    "$tmp/inc" "$tmp/sym" >>"$tmp/bad"
# Table rows the code does not have.
{ awk '{ print $1, $2 }' "$tmp/inc"; awk '{ print $1, $2 }' "$tmp/sym"; } | sort -u >"$tmp/edges"
awk 'FILENAME == ARGV[1] { seen[$1 " " $2] = 1; next }
     $1 == "allow" && !(($2 " " $3) in seen) { print "check_deps: the table allows " $2 " -> " $3 ", which the code does not use: drop it" }' \
    "$tmp/edges" "$tmp/table" >>"$tmp/bad"
if [ -s "$tmp/bad" ]; then
    cat "$tmp/bad" >&2
    fail=1
fi

# Kahn's algorithm, repeatedly dropping folders that use nothing left.
left=$(awk '{ print $1; print $2 }' "$tmp/edges" | sort -u)
while :; do
    leaves=$(for f in $left; do
        awk -v f="$f" -v left=" $(echo $left) " '$1 == f && index(left, " " $2 " ") { n++ } END { if (!n) print f }' "$tmp/edges"
    done)
    [ -n "$leaves" ] || break
    left=$(for f in $left; do echo "$leaves" | grep -qx "$f" || echo "$f"; done)
done
if [ -n "$left" ]; then
    echo "check_deps: dependency cycle among src folders:" $left >&2
    fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "ok: every edge is in the table, narrowed edges keep to their symbols, no cycle"
