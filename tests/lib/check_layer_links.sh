#!/usr/bin/env bash
# check_layer_links.sh: the layering, enforced on the objects. Every vq_ function or variable a
# layer's archive uses but does not define must be defined by a layer it may use (DEPS_<layer>).
# The include check (check_layers.sh) sees headers; this sees calls, so a layer that declares
# another layer's function by hand, or gets it through a header it may include, still fails.
# Symbols from outside the library (libc, libgomp, PCRE2) are not the layering's business.
#   usage: check_layer_links.sh RULE...    RULE: layer:dep,dep,...:path/to/libvq_layer.a
set -u
command -v nm >/dev/null || { echo "check_layer_links: nm not found (binutils)" >&2; exit 2; }
[ $# -gt 0 ] || { echo "check_layer_links: no layer rules given" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
declare -A deps
layers=()
for r in "$@"; do
    IFS=: read -r l d a <<<"$r"
    [ -r "$a" ] || { echo "check_layer_links: cannot read $a (layer $l)" >&2; exit 2; }
    layers+=("$l")
    deps[$l]=${d//,/ }
    deps[$l]=${deps[$l]//vq_/}
    nm -g --defined-only "$a" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/def.$l"
    nm -u "$a" 2>/dev/null | awk '$1 == "U" && $2 ~ /^vq_/ { print $2 }' | sort -u >"$tmp/use.$l"
done
fail=0 n_used=0
for l in "${layers[@]}"; do
    : >"$tmp/ok.$l"
    for d in ${deps[$l]}; do cat "$tmp/def.$d" >>"$tmp/ok.$l" 2>/dev/null; done
    sort -u -o "$tmp/ok.$l" "$tmp/ok.$l"
    # used here, defined neither here nor in an allowed layer
    while read -r s; do
        n_used=$((n_used + 1))
        grep -qx "$s" "$tmp/ok.$l" && continue
        owner=""
        for o in "${layers[@]}"; do grep -qx "$s" "$tmp/def.$o" && owner=$o; done
        if [ -n "$owner" ]; then
            echo "check_layer_links: layer $l uses $s from layer $owner, which it may not use" \
                 "(it may use: ${deps[$l]:-nothing})" >&2
        else
            echo "check_layer_links: layer $l uses $s, which no layer defines" >&2
        fi
        fail=1
    done < <(comm -23 "$tmp/use.$l" "$tmp/def.$l")
done
echo "check_layer_links: ${#layers[@]} layers, $n_used uses of other layers' vq_ symbols checked"
[ $fail -eq 0 ] && echo "check_layer_links: OK"
exit $fail
