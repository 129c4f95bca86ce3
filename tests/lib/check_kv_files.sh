#!/usr/bin/env bash
# check_kv_files.sh: the direction of calls inside the kv layer, enforced on its objects. The
# files of src/kv/ are ranked (LEVEL arguments, lowest first; one argument may name several files,
# space-separated, that do not use each other); every vq_ symbol a file's object uses from another
# file of the layer must be defined by a file of a lower level. So the cache's parts cannot call
# round in a circle again: the tables (kv_policy.c) at the bottom, then the spec parser, the store
# (attention, pages), the demoted tier, the eviction step, the router. Every object of the archive
# must be ranked (a new file is given its place in CMakeLists.txt). docs/architecture.md.
#   usage: check_kv_files.sh path/to/libvq_kv.a LEVEL...    LEVEL: "file file ..." (no .c)
set -u
command -v nm >/dev/null || { echo "check_kv_files: nm not found (binutils)" >&2; exit 2; }
[ $# -gt 1 ] || { echo "usage: check_kv_files.sh ARCHIVE LEVEL..." >&2; exit 2; }
ar=$1
shift
[ -r "$ar" ] || { echo "check_kv_files: cannot read $ar" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
declare -A level
n=0
for lv in "$@"; do
    for f in $lv; do level[$f]=$n; done
    n=$((n + 1))
done
# per object: defined and used vq_ symbols (nm prints "ar.a:member.c.o:" blocks with -A)
nm -A -g --defined-only "$ar" 2>/dev/null | awk 'NF == 3 { split($1, p, ":"); print p[2], $3 }' >"$tmp/def"
nm -A -u "$ar" 2>/dev/null | awk '$2 == "U" && $3 ~ /^vq_/ { split($1, p, ":"); print p[2], $3 }' >"$tmp/use"
fail=0 n_uses=0
objs=$(cut -d' ' -f1 "$tmp/def" "$tmp/use" | sort -u)
for o in $objs; do
    f=${o%.c.o}
    f=${f%.o}
    [ -n "${level[$f]+set}" ] || { echo "check_kv_files: $f.c is not ranked (add it to the levels in CMakeLists.txt)" >&2; fail=1; }
done
while read -r o s; do
    f=${o%.c.o}
    f=${f%.o}
    owner=$(awk -v s="$s" '$2 == s { print $1; exit }' "$tmp/def")
    [ -n "$owner" ] || continue   # another layer's (check_layer_links.sh checks those)
    g=${owner%.c.o}
    g=${g%.o}
    [ "$g" = "$f" ] && continue
    n_uses=$((n_uses + 1))
    [ -n "${level[$f]+set}" ] && [ -n "${level[$g]+set}" ] || continue
    if [ "${level[$g]}" -ge "${level[$f]}" ]; then
        echo "check_kv_files: src/kv/$f.c uses $s from src/kv/$g.c, which is not below it" \
             "(levels, lowest first: $*)" >&2
        fail=1
    fi
done <"$tmp/use"
echo "check_kv_files: $(echo "$objs" | wc -w) files, $n_uses uses between them checked"
[ $fail -eq 0 ] && echo "check_kv_files: OK"
exit $fail
