#!/usr/bin/env bash
# check_lab_links.sh: the lab's door, enforced on the objects. Every vq_ symbol an object of the
# lab's archive uses must be the lab's own, a function of the public header (veloxquant.h), a
# function of the door (src/session/lab_tap.h) or of the bottom floor the door brings (core's
# archive), with no exception: what the lab needs below a session (a cache or a forward apart, a
# codec's hooks, the calibration file) is a function of the door (docs/architecture.md).
#   usage: check_lab_links.sh LIBVQ_LAB.a include/veloxquant.h src/session/lab_tap.h LIBVQ_CORE.a LAB_DIR
set -u
lab_ar=$1 header=$2 door=$3 core_ar=$4 lab_dir=$5
for f in "$lab_ar" "$header" "$door" "$core_ar"; do
    [ -r "$f" ] || { echo "check_lab_links: cannot read $f" >&2; exit 2; }
done
command -v nm >/dev/null || { echo "check_lab_links: nm not found (binutils)" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
{
    awk '/^[ \t]*VQ_API[ \t]/ { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \t*]+/); print w[n] }' "$header"
    grep -E '^[a-z]' "$door" | grep -vE '^(typedef|struct|enum|extern)' | grep -oE '\bvq_[a-z0-9_]+\(' | sed 's/($//'
    nm -g --defined-only "$core_ar" 2>/dev/null | awk 'NF == 3 { print $3 }'
    nm -g --defined-only "$lab_ar" 2>/dev/null | awk 'NF == 3 { print $3 }'
} | sort -u >"$tmp/ok"
[ "$(grep -c . "$tmp/ok")" -gt 0 ] || { echo "check_lab_links: no allowed symbols found" >&2; exit 2; }
fail=0 n_obj=0 n_used=0
nm -A -u "$lab_ar" 2>/dev/null | awk '$2 == "U" && $3 ~ /^vq_/ { n = split($1, p, ":"); print p[n - 1], $3 }' |
    sort -u >"$tmp/use"
for o in $(nm -A -g --defined-only "$lab_ar" 2>/dev/null | awk -F: '{ print $2 }' | sort -u) $(cut -d' ' -f1 "$tmp/use" | sort -u); do
    echo "$o"
done | sort -u >"$tmp/objs"
while read -r o; do
    n_obj=$((n_obj + 1))
    while read -r obj s; do
        [ "$obj" = "$o" ] || continue
        n_used=$((n_used + 1))
        grep -qx "$s" "$tmp/ok" && continue
        echo "check_lab_links: lab/${o%.o} uses $s, which is neither public (veloxquant.h), the door's" \
             "(lab_tap.h), core's nor the lab's own" >&2
        fail=1
    done <"$tmp/use"
done <"$tmp/objs"
echo "check_lab_links: $n_obj lab objects, $n_used uses of vq_ symbols checked"
[ $fail -eq 0 ] && echo "check_lab_links: OK"
exit $fail
