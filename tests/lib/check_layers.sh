#!/usr/bin/env bash
# check_layers.sh: the layering, enforced on the sources. Every #include "X/..." in src/<layer>/
# must name the layer itself, or a layer it may use (DEPS_<layer> in CMakeLists.txt) and one of
# the headers that layer offers (VQ_HEADERS_<X>); "veloxquant.h" is open to all. Include
# directories are shared by every target, so without this a layer could reach any header and
# only the link (sometimes) would notice.
#   usage: check_layers.sh SOURCE_DIR CHECK_TOOLS RULE...
#   RULE: layer:dep,dep,...:header,header,...   (CMakeLists.txt writes one per layer)
#   CHECK_TOOLS: ON/1 = tools/ may include only "veloxquant.h" and "lab/vqlab.h" (and its own files)
#   and fails otherwise; OFF/0 = the same check only reports (VQ_CHECK_TOOLS_INCLUDES).
# lab/ (the measuring harness, not part of the library) may include "veloxquant.h", its own files
# and the one door the session layer offers it, "session/lab_tap.h"; nothing else of src/. The
# door itself is narrow: it includes only "veloxquant.h" and "core/core.h", so no product struct
# (model, cache, codec, calibration) reaches the lab through it.
set -u
src_dir=$1 check_tools=$2
shift 2
declare -A deps hdrs
layers=()
for r in "$@"; do
    IFS=: read -r l d h <<<"$r"
    layers+=("$l")
    deps[$l]=" ${d//,/ } "
    hdrs[$l]=" ${h//,/ } "
done
[ ${#layers[@]} -gt 0 ] || { echo "check_layers: no layer rules given" >&2; exit 2; }
fail=0 n_files=0 n_inc=0

# quoted includes of one file: "LINE INCLUDE" per include
includes() { awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
                  s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s);
                  print FNR, s }' "$1"; }

violation() { echo "check_layers: $1:$2: #include \"$3\": $4" >&2; fail=1; }

# folders under src/ that are not layers would be neither built nor checked
for d in "$src_dir"/src/*/; do
    d=$(basename "$d")
    [[ " ${layers[*]} " == *" $d "* ]] || { echo "check_layers: src/$d is not a layer (VQ_LAYERS)" >&2; fail=1; }
done

for l in "${layers[@]}"; do
    [ -d "$src_dir/src/$l" ] || continue
    while IFS= read -r f; do
        n_files=$((n_files + 1))
        rel=${f#"$src_dir"/}
        while read -r line inc; do
            n_inc=$((n_inc + 1))
            [ "$inc" = "veloxquant.h" ] && continue
            if [[ "$inc" == *..* ]]; then violation "$rel" "$line" "$inc" "no '..' paths: name the layer"; continue; fi
            if [[ "$inc" != */* ]]; then   # a file next to the includer (kq256.inc)
                [ -e "$(dirname "$f")/$inc" ] || violation "$rel" "$line" "$inc" "no such file next to it"
                continue
            fi
            x=${inc%%/*} h=${inc#*/}
            [ "$x" = "$l" ] && continue
            if [ -z "${deps[$x]+set}" ]; then
                violation "$rel" "$line" "$inc" "'$x' is not a layer (layers: ${layers[*]})"
            elif [[ "${deps[$l]}" != *" vq_$x "* && "${deps[$l]}" != *" $x "* ]]; then
                violation "$rel" "$line" "$inc" "layer $l may not use layer $x (it may use: $(echo ${deps[$l]//vq_/}))"
            elif [[ "${hdrs[$x]}" != *" $h "* ]]; then
                violation "$rel" "$line" "$inc" "$inc is internal to layer $x (it offers: $(echo ${hdrs[$x]}))"
            fi
        done < <(includes "$f")
    done < <(find "$src_dir/src/$l" -type f \( -name '*.c' -o -name '*.h' -o -name '*.inc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
done

# server/: `veloxquant serve` is a user of the library as the CLI is: the public header only (and
# its own files; libmicrohttpd and cJSON come in <...>)
n_server=0
if [ -d "$src_dir/server" ]; then
    while IFS= read -r f; do
        rel=${f#"$src_dir"/}
        n_server=$((n_server + 1))
        while read -r line inc; do
            [ "$inc" = "veloxquant.h" ] && continue
            [[ "$inc" != */* && -e "$(dirname "$f")/$inc" ]] && continue
            violation "$rel" "$line" "$inc" "server/ may include only \"veloxquant.h\" and its own files"
        done < <(includes "$f")
    done < <(find "$src_dir/server" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sort)
fi

# lab/: a client of the public header with one narrow door into the product (session/lab_tap.h,
# which the session layer must offer, and which includes only the public header and core's)
n_lab=0 n_door=0
if [ -d "$src_dir/lab" ]; then
    [[ "${hdrs[session]:-}" == *" lab_tap.h "* ]] ||
        { echo "check_layers: the session layer does not offer lab_tap.h (VQ_HEADERS_session)" >&2; fail=1; }
    door="$src_dir/src/session/lab_tap.h"
    if [ -r "$door" ]; then
        while read -r line inc; do
            n_door=$((n_door + 1))
            [ "$inc" = "veloxquant.h" ] || [ "$inc" = "core/core.h" ] && continue
            violation "src/session/lab_tap.h" "$line" "$inc" "the lab's door may include only \"veloxquant.h\" and \"core/core.h\""
        done < <(includes "$door")
    fi
    while IFS= read -r f; do
        rel=${f#"$src_dir"/}
        n_lab=$((n_lab + 1))
        if grep -q '^#define VQ_LAB_STORE' "$f"; then
            echo "check_layers: $rel: defines VQ_LAB_STORE: the door has no store part (lab/ reaches the" \
                 "product only through lab_tap.h's functions)" >&2
            fail=1
        fi
        while read -r line inc; do
            [ "$inc" = "veloxquant.h" ] && continue
            [ "$inc" = "session/lab_tap.h" ] && continue
            [[ "$inc" != */* && -e "$(dirname "$f")/$inc" ]] && continue
            [[ "$inc" == lab/* && "$inc" != *..* && -e "$src_dir/$inc" ]] && continue
            violation "$rel" "$line" "$inc" "lab/ may include only \"veloxquant.h\", its own files and \"session/lab_tap.h\""
        done < <(includes "$f")
    done < <(find "$src_dir/lab" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sort)
fi

# tools/: the CLI is a user of the library and the lab, so their public headers only (and its own
# files, and the server's header: cmd_serve.c starts the server)
n_tools=0
if [ -d "$src_dir/tools" ]; then
    case "$check_tools" in ON|on|1|TRUE|true|YES|yes) strict=1 ;; *) strict=0 ;; esac
    while IFS= read -r f; do
        rel=${f#"$src_dir"/}
        while read -r line inc; do
            [ "$inc" = "veloxquant.h" ] && continue
            [[ "$inc" != */* && -e "$(dirname "$f")/$inc" ]] && continue
            [ "$inc" = "server/server.h" ] && continue
            [ "$inc" = "lab/vqlab.h" ] && continue
            n_tools=$((n_tools + 1))
            if [ $strict = 1 ]; then
                violation "$rel" "$line" "$inc" "tools/ may include only \"veloxquant.h\" and \"lab/vqlab.h\""
            else
                echo "check_layers: note: $rel:$line: #include \"$inc\" (tools/ should include only" \
                     "\"veloxquant.h\"; fails with -DVQ_CHECK_TOOLS_INCLUDES=ON)" >&2
            fi
        done < <(includes "$f")
    done < <(find "$src_dir/tools" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sort)
fi

echo "check_layers: $n_files files, $n_inc quoted includes in src/ checked against ${#layers[@]} layers;" \
     "$n_server files in server/; $n_lab files in lab/ (the door includes $n_door headers);" \
     "$n_tools includes in tools/ beyond \"veloxquant.h\" and \"lab/vqlab.h\""
[ $fail -eq 0 ] && echo "check_layers: OK"
exit $fail
