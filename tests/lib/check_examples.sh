#!/usr/bin/env bash
# check_examples.sh: the library as a user gets it. Installs the build into a prefix, builds
# examples/simple.c and examples/chat.c with nothing but the installed header, library and
# pkg-config file, and runs them.
#   usage: check_examples.sh MODE BUILD_DIR SOURCE_DIR WORK_DIR [KEY=VALUE...]
#   MODE install: cmake --install into WORK_DIR/prefix, check what is there, compile both examples
#                 against the shared library and, once more, statically (CTest fixture setup)
#   MODE simple:  run simple (shared and static) on stories260K; the text must be non-empty, the
#                 same from both, and equal to the CLI's greedy output (exit 77 without SHARED_DIR)
#   MODE chat:    run chat on SmolLM2 for 3 turns; every turn after the first must prefill only
#                 its own new text, fewer tokens than the session already holds, and the session
#                 must keep everything: held after = held before + prefilled + generated, and
#                 each turn starts where the last one ended (exit 77 without the model)
#   KEY=VALUE: CC, CMAKE, PKG_CONFIG, LIBDIR, CFLAGS_EXTRA (sanitizer flags of this build),
#              SHARED_DIR, MODELS_DIR, CLI (the veloxquant binary)
set -u
mode=$1 build=$2 src=$3 work=$4
shift 4
CC=cc CMAKE=cmake PKG_CONFIG=pkg-config LIBDIR=lib CFLAGS_EXTRA="" SHARED_DIR="" MODELS_DIR="" CLI=""
for kv in "$@"; do
    case "$kv" in
    CC=*|CMAKE=*|PKG_CONFIG=*|LIBDIR=*|CFLAGS_EXTRA=*|SHARED_DIR=*|MODELS_DIR=*|CLI=*) eval "${kv%%=*}=\${kv#*=}" ;;
    *) echo "check_examples: unknown argument '$kv'" >&2; exit 2 ;;
    esac
done
prefix=$work/prefix bin=$work/bin
fail() { echo "check_examples ($mode): FAIL: $*" >&2; exit 1; }
note() { echo "check_examples ($mode): $*"; }

case "$mode" in
install)
    rm -rf "$work"
    mkdir -p "$bin" || fail "cannot make $bin"
    "$CMAKE" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
        { cat "$work/install.log" >&2; fail "cmake --install $build --prefix $prefix"; }
    lib=$prefix/$LIBDIR
    major=$(sed -n 's/^#define VQ_VERSION_MAJOR \([0-9]*\).*/\1/p' "$src/include/veloxquant.h")
    version=$(sed -n 's/^#define VQ_VERSION_STRING "\(.*\)".*/\1/p' "$src/include/veloxquant.h")
    # exactly the public header; the two libraries with the soname links; the pkg-config file
    [ "$(ls "$prefix/include")" = "veloxquant.h" ] || fail "include/ holds $(ls "$prefix/include" | tr '\n' ' ')(want veloxquant.h only)"
    cmp -s "$prefix/include/veloxquant.h" "$src/include/veloxquant.h" || fail "installed veloxquant.h differs from the source's"
    [ -f "$lib/libveloxquant.a" ] || fail "no $lib/libveloxquant.a"
    [ -f "$lib/libveloxquant.so.$version" ] && [ ! -L "$lib/libveloxquant.so.$version" ] || fail "no $lib/libveloxquant.so.$version"
    [ "$(readlink "$lib/libveloxquant.so.$major")" = "libveloxquant.so.$version" ] || fail "libveloxquant.so.$major is not a link to libveloxquant.so.$version"
    [ "$(readlink "$lib/libveloxquant.so")" = "libveloxquant.so.$major" ] || fail "libveloxquant.so is not a link to libveloxquant.so.$major"
    pc=$lib/pkgconfig/veloxquant.pc
    [ -f "$pc" ] || fail "no $pc"
    export PKG_CONFIG_PATH=$lib/pkgconfig   # ahead of the system's (libpcre2-8.pc is there)
    [ "$("$PKG_CONFIG" --modversion veloxquant)" = "$version" ] || fail "pkg-config --modversion says '$("$PKG_CONFIG" --modversion veloxquant)', the header $version"
    [ "$("$PKG_CONFIG" --variable=prefix veloxquant)" = "$prefix" ] || fail "veloxquant.pc's prefix is '$("$PKG_CONFIG" --variable=prefix veloxquant)', installed at $prefix"
    cflags=$("$PKG_CONFIG" --cflags veloxquant) || fail "pkg-config --cflags veloxquant"
    libs=$("$PKG_CONFIG" --libs veloxquant) || fail "pkg-config --libs veloxquant"
    slibs=$("$PKG_CONFIG" --static --libs veloxquant) || fail "pkg-config --static --libs veloxquant"
    note "cflags: $cflags | libs: $libs | static libs: $slibs"
    # strict C11 with every warning: the header must not need the project's gnu11 or its src/
    warn="-std=c11 -pedantic -Wall -Wextra -Werror"
    for ex in simple chat; do
        # shared: the pkg-config line as a user writes it (+ an rpath, since P/lib is not searched)
        $CC $warn $CFLAGS_EXTRA -o "$bin/$ex" "$src/examples/$ex.c" $cflags $libs -Wl,-rpath,"$lib" ||
            fail "$ex.c does not build against the installed shared library"
        readelf -d "$bin/$ex" | grep -q "NEEDED.*\[libveloxquant.so.$major\]" || fail "$ex does not load libveloxquant.so.$major"
        # static: --static adds Requires.private and Libs.private; -l:libveloxquant.a picks the
        # archive although the .so sits next to it
        $CC $warn $CFLAGS_EXTRA -o "$bin/$ex-static" "$src/examples/$ex.c" $cflags \
            ${slibs//-lveloxquant/-l:libveloxquant.a} || fail "$ex.c does not build against the installed static library"
        ! readelf -d "$bin/$ex-static" | grep -q "libveloxquant" || fail "$ex-static still loads libveloxquant.so"
        "$bin/$ex" --help >/dev/null || fail "$ex --help exits nonzero"
        "$bin/$ex" 2>/dev/null && fail "$ex without -m exits 0"
        "$bin/$ex" -m "$work/no-such-model.gguf" 2>"$work/$ex.err" && fail "$ex with a missing model exits 0"
        grep -q "no-such-model" "$work/$ex.err" || fail "$ex's error does not name the missing file: $(cat "$work/$ex.err")"
    done
    note "installed into $prefix; simple and chat built shared and static: OK"
    ;;

simple)
    stories=$SHARED_DIR/data/stories260K.bin tok=$SHARED_DIR/data/tok512.bin
    if [ ! -r "$stories" ] || [ ! -r "$tok" ]; then
        echo "SKIP: $stories / $tok not found (../shared absent)"; exit 77
    fi
    [ -x "$bin/simple" ] && [ -x "$bin/simple-static" ] || fail "no $bin/simple: run the lib/examples_install test first"
    prompt="Once upon a time"
    args=(-m "$stories" --tokenizer "$tok" -p "$prompt" -n 40 -c 256)
    "$bin/simple" "${args[@]}" >"$work/simple.out" 2>"$work/simple.err" || { cat "$work/simple.err" >&2; fail "simple exits nonzero"; }
    "$bin/simple-static" "${args[@]}" >"$work/simple-static.out" 2>>"$work/simple.err" || { cat "$work/simple.err" >&2; fail "simple-static exits nonzero"; }
    text=$(cat "$work/simple.out")
    [ ${#text} -gt $((${#prompt} + 20)) ] || fail "simple printed almost nothing past the prompt: '$text'"
    [ "${text#"$prompt"}" != "$text" ] || fail "simple's output does not start with the prompt: '$text'"
    cmp -s "$work/simple.out" "$work/simple-static.out" || fail "shared and static simple print different text"
    if [ -n "$CLI" ] && [ -x "$CLI" ]; then
        if "$CLI" generate "${args[@]}" --temp 0 >"$work/cli.out" 2>"$work/cli.err"; then
            cmp -s "$work/simple.out" "$work/cli.out" ||
                fail "simple and 'veloxquant generate --temp 0' differ:"$'\n'"simple: $text"$'\n'"cli:    $(cat "$work/cli.out")"
            note "equal to veloxquant generate --temp 0"
        else
            note "the CLI did not run ($(head -c 200 "$work/cli.err")): compared shared and static only"
        fi
    fi
    note "OK: $text"
    ;;

chat)
    model=$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ ! -r "$model" ]; then echo "SKIP: $model not found (scripts/fetch_model.sh)"; exit 77; fi
    [ -x "$bin/chat" ] || fail "no $bin/chat: run the lib/examples_install test first"
    "$bin/chat" -m "$model" -n 16 -c 512 --temp 0 -p "Name a fruit." -p "What colour is it?" -p "Thank you!" \
        >"$work/chat.out" 2>"$work/chat.err" || { cat "$work/chat.err" >&2; fail "chat exits nonzero"; }
    cat "$work/chat.out"
    grep '^turn ' "$work/chat.err"
    # turn N: prefilled P tokens (new text T tokens), session held H before, A after, generated G (stop: S)
    stats=$(sed -n 's/^turn \([0-9]*\): prefilled \([0-9]*\) tokens (new text \([0-9]*\) tokens), session held \([0-9]*\) before, \([0-9]*\) after, generated \([0-9]*\) .*/\1 \2 \3 \4 \5 \6/p' "$work/chat.err")
    [ "$(printf '%s\n' "$stats" | grep -c .)" -eq 3 ] || fail "want 3 'turn N: ...' lines on stderr, got: $(cat "$work/chat.err")"
    prev_after=0
    while read -r n p t h a g; do
        [ "$p" -eq "$t" ] || fail "turn $n prefilled $p tokens but its new text is $t tokens"
        [ "$h" -eq "$prev_after" ] || fail "turn $n: the session held $h before, but turn $((n - 1)) left $prev_after"
        [ "$a" -eq $((h + p + g)) ] || fail "turn $n: held $a after, want $h before + $p prefilled + $g generated"
        [ "$g" -gt 0 ] || fail "turn $n generated nothing"
        if [ "$n" -gt 1 ]; then
            [ "$p" -gt 0 ] && [ "$p" -lt "$h" ] || fail "turn $n prefilled $p tokens, the session held $h: it must feed only the new turn"
        fi
        prev_after=$a
    done <<<"$stats"
    [ "$(grep -c '^> ' "$work/chat.out")" -eq 3 ] || fail "want 3 turns on stdout"
    note "OK: 3 turns on one session, each prefilling only its new text"
    ;;
*)
    echo "check_examples: unknown mode '$mode' (install, simple, chat)" >&2; exit 2 ;;
esac
exit 0
