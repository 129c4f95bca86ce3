#!/usr/bin/env bash
# check_api_docs.sh: every function the public header declares (VQ_API, experimental section too)
# has an entry in docs/api.md, written as `... name(...`, so the reference cannot fall behind the
# header unnoticed; with lab/vqlab.h, the same for every function the lab's header declares (a line
# at column 0 naming vq_NAME( that is no typedef).
#   usage: check_api_docs.sh include/veloxquant.h docs/api.md [lab/vqlab.h]
set -u
header=$1 doc=$2 lab_header=${3:-}
for f in "$header" "$doc"; do [ -r "$f" ] || { echo "check_api_docs: cannot read $f" >&2; exit 2; }; done
decl=$(awk '/^[ \t]*VQ_API[ \t]/ { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \t*]+/); print w[n] }' "$header")
[ -n "$decl" ] || { echo "check_api_docs: no VQ_API declarations in $header" >&2; exit 2; }
if [ -n "$lab_header" ]; then
    [ -r "$lab_header" ] || { echo "check_api_docs: cannot read $lab_header" >&2; exit 2; }
    ldecl=$(grep -E '^[a-z]' "$lab_header" | grep -vE '^(typedef|struct|enum|extern)' |
            grep -oE '\bvq_[a-z0-9_]+\(' | sed 's/($//' | sort -u)
    [ -n "$ldecl" ] || { echo "check_api_docs: no declarations in $lab_header" >&2; exit 2; }
    decl="$decl $ldecl"
fi
missing=""
for f in $decl; do
    grep -q "\`[^\`]*[^A-Za-z0-9_]$f(" "$doc" || missing="$missing $f"
done
if [ -n "$missing" ]; then
    echo "check_api_docs: FAIL: declared in $(basename "$header")${lab_header:+ or $(basename "$lab_header")} but not described in $doc:$missing" >&2
    exit 1
fi
echo "check_api_docs: OK: $(echo $decl | wc -w) functions, each described in $(basename "$doc")"
