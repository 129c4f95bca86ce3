#!/usr/bin/env bash
# check_symbols.sh: symbol hygiene of the built library, with nm.
#   usage: check_symbols.sh LIBVELOXQUANT.so LIBVELOXQUANT.a include/veloxquant.h [LIBVQ_LAB.a lab/vqlab.h]
# (a) every dynamic symbol the .so defines starts with vq_ (the library shares a process with
#     anything: an unprefixed export can bind in place of the user's own function);
# (b) every global symbol defined in the .a starts with vq_ (a static link puts all of them in the
#     user's namespace, visibility or not);
# (c) every function the header declares (VQ_API, the experimental section too) is exported by
#     the .so: a declared-but-unimplemented function fails here, not in a user's link;
# (d) the .so exports nothing the header does not declare (the ABI is the header);
# and the .so's SONAME is libveloxquant.so.VQ_VERSION_MAJOR.
# With the lab (the measuring harness, a static library apart from the product):
# (e) no symbol the lab's archive defines is exported by the .so or defined in the product's .a
#     (the product holds no harness; the lab is linked by the CLI and tests only);
# (f) every function lab/vqlab.h declares is defined by the lab's archive, and the header has no
#     VQ_API (nothing of it is the library's ABI); (g) the lab's globals start with vq_.
# Symbols the toolchain makes on its own are allowed by name below and nowhere else.
set -u
so=$1 ar=$2 header=$3 lab_ar=${4:-} lab_header=${5:-}
fail=0
err() { echo "check_symbols: FAIL: $*" >&2; fail=1; }
for f in "$so" "$ar" "$header"; do
    [ -r "$f" ] || { echo "check_symbols: cannot read $f" >&2; exit 2; }
done
command -v nm >/dev/null || { echo "check_symbols: nm not found (binutils)" >&2; exit 2; }

# The toolchain's own symbols: _init/_fini (crti's, when a toolchain exports them);
# .gomp_critical_user_NAME, the lock GCC makes for "#pragma omp critical(NAME)" (global by the
# OpenMP rule that same-named criticals share one lock; NAME is ours and should be vq_-prefixed);
# __odr_asan.SYM, AddressSanitizer's one-definition-rule marker of our global SYM (ASan builds).
toolchain_re='^(_init|_fini|\.gomp_critical_user_[A-Za-z0-9_]+|__odr_asan\.vq_[A-Za-z0-9_]+)$'

# (a) dynamic symbols the .so defines (U = undefined is excluded by --defined-only)
dyn=$(nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sort -u)
[ -n "$dyn" ] || err "(a) $so defines no dynamic symbols"
bad=$(printf '%s\n' "$dyn" | grep -v '^vq_' | grep -Ev "$toolchain_re")
[ -z "$bad" ] || err "(a) $so exports symbols without the vq_ prefix:" $bad

# (b) global symbols defined in the archive (member headers and locals are filtered by -g)
glob=$(nm -g --defined-only "$ar" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
[ -n "$glob" ] || err "(b) $ar defines no global symbols"
bad=$(printf '%s\n' "$glob" | grep -v '^vq_' | grep -Ev "$toolchain_re")
[ -z "$bad" ] || err "(b) $ar defines global symbols without the vq_ prefix:" $bad
locks=$(printf '%s\n' "$glob" | sed -n 's/^\.gomp_critical_user_//p' | grep -v '^vq_')
if [ -n "$locks" ]; then
    echo "check_symbols: warning: omp critical names without the vq_ prefix (their locks are" \
         "global symbols of the archive):" $locks >&2
fi

# (c) and (d): the header's VQ_API declarations. A declaration starts its line with VQ_API and
# names the function before the first '(' (return types are words and '*').
decl=$(awk '/^[ \t]*VQ_API[ \t]/ { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \t*]+/); print w[n] }' \
       "$header" | sort -u)
n_api=$(grep -cE '^[[:space:]]*VQ_API[[:space:]]' "$header")
n_decl=$(printf '%s\n' "$decl" | grep -c '^vq_')
[ "$n_api" -gt 0 ] || err "(c) no VQ_API declarations found in $header"
[ "$n_decl" -eq "$n_api" ] || err "(c) $n_api VQ_API lines in $header but $n_decl distinct vq_ names parsed"
missing=$(comm -23 <(printf '%s\n' "$decl") <(printf '%s\n' "$dyn"))
[ -z "$missing" ] || err "(c) declared in $(basename "$header") but not exported by $(basename "$so")" \
    "(not implemented, or not compiled into the library):" $missing
extra=$(comm -13 <(printf '%s\n' "$decl") <(printf '%s\n' "$dyn" | grep '^vq_'))
[ -z "$extra" ] || err "(d) exported by $(basename "$so") but not declared in $(basename "$header")" \
    "(a visibility attribute outside the header?):" $extra

# (e)-(g): the lab apart from the product
n_lab=0
if [ -n "$lab_ar" ]; then
    for f in "$lab_ar" "$lab_header"; do
        [ -r "$f" ] || { echo "check_symbols: cannot read $f" >&2; exit 2; }
    done
    lab=$(nm -g --defined-only "$lab_ar" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
    n_lab=$(printf '%s\n' "$lab" | grep -c .)
    bad=$(comm -12 <(printf '%s\n' "$lab") <(printf '%s\n' "$dyn"))
    [ -z "$bad" ] || err "(e) the lab's functions are exported by $(basename "$so"):" $bad
    bad=$(comm -12 <(printf '%s\n' "$lab") <(printf '%s\n' "$glob"))
    [ -z "$bad" ] || err "(e) the lab's functions are also defined in $(basename "$ar"):" $bad
    grep -qE '^[[:space:]]*VQ_API[[:space:]]' "$lab_header" && err "(f) $(basename "$lab_header") declares VQ_API functions"
    # a declaration: a line at column 0 that is not a comment, typedef or preprocessor line and
    # has "vq_NAME(" (the first such name on it is the function)
    ldecl=$(grep -E '^[a-z]' "$lab_header" | grep -vE '^(typedef|struct|enum|extern)' |
            grep -oE '\bvq_[a-z0-9_]+\(' | sed 's/($//' | sort -u)
    [ -n "$ldecl" ] || err "(f) no function declarations found in $lab_header"
    missing=$(comm -23 <(printf '%s\n' "$ldecl") <(printf '%s\n' "$lab"))
    [ -z "$missing" ] || err "(f) declared in $(basename "$lab_header") but not defined by $(basename "$lab_ar"):" $missing
    bad=$(printf '%s\n' "$lab" | grep -v '^vq_' | grep -Ev "$toolchain_re")
    [ -z "$bad" ] || err "(g) $(basename "$lab_ar") defines global symbols without the vq_ prefix:" $bad
fi

# SONAME: libveloxquant.so.<major>, the major from the header
major=$(sed -n 's/^#define VQ_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' "$header")
soname=$(objdump -p "$so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libveloxquant.so.$major" ] || err "SONAME is '$soname', want libveloxquant.so.$major"

n_dyn=$(printf '%s\n' "$dyn" | grep -c .)
n_glob=$(printf '%s\n' "$glob" | grep -c .)
echo "check_symbols: $n_dyn dynamic symbols in $(basename "$so"), $n_glob global symbols in" \
     "$(basename "$ar"), $n_decl functions declared in $(basename "$header");" \
     "$n_lab global symbols in the lab's archive, none of them in the product"
[ $fail -eq 0 ] && echo "check_symbols: OK"
exit $fail
