#!/usr/bin/env bash
# fuzz.sh: fuzz the model-file readers (GGUF, reservoir), the tokenizers, the kv state reader, the kv
# spec parser, the calibration file reader and the server's request parser. Builds the libFuzzer
# targets (fuzz_gguf, fuzz_l2c_vocab, fuzz_tokenizer, fuzz_kv_state, fuzz_kv_spec, fuzz_calib,
# fuzz_server, fuzz_reservoir) with
# clang + ASan/UBSan in build-fuzz, seeds their corpora with small valid files (written by
# tests/fuzz/gen_fuzz_seeds.c; plus the first 4 KiB of the SmolLM2 model when it was fetched;
# fuzz_kv_state, fuzz_calib and fuzz_reservoir write their own valid inputs when run with
# VQ_FUZZ_WRITE_SEEDS=DIR) and
# runs each target for FUZZ_SECONDS (default 60).
# Exit status is nonzero when the fuzzer finds a crash, a leak or a huge allocation; the input that
# did it is kept in fuzz-corpus/crashes/ (reproduce: build-fuzz/fuzz_gguf <that file>).
# Environment: FUZZ_SECONDS (60), FUZZ_JOBS (1 parallel fuzzer process), FUZZ_BUILD (build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
build=${FUZZ_BUILD:-build-fuzz}
crashes=fuzz-corpus/crashes

command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }
# VQ_CUDA=OFF: the fuzz targets need no GPU code, and with the CUDA row in the backend layer they
# would otherwise compile the .cu files (minutes on CI's cores) for nothing
CC=clang CXX=clang++ cmake -S . -B "$build" -DVQ_FUZZ=ON -DVQ_SANITIZE=ON -DVQ_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-g" >/dev/null
cmake --build "$build" -j2 --target fuzz_gguf fuzz_l2c_vocab fuzz_tokenizer fuzz_kv_state fuzz_kv_spec fuzz_calib fuzz_server fuzz_reservoir gen_fuzz_seeds

mkdir -p "$crashes" fuzz-corpus/gguf fuzz-corpus/vocab fuzz-corpus/tok fuzz-corpus/kvstate fuzz-corpus/kvspec fuzz-corpus/calib fuzz-corpus/server fuzz-corpus/reservoir
rm -rf fuzz-corpus/seeds-gguf fuzz-corpus/seeds-vocab fuzz-corpus/seeds-tok fuzz-corpus/seeds-kvstate fuzz-corpus/seeds-kvspec fuzz-corpus/seeds-calib fuzz-corpus/seeds-server fuzz-corpus/seeds-reservoir
mkdir -p fuzz-corpus/seeds-gguf fuzz-corpus/seeds-vocab fuzz-corpus/seeds-tok fuzz-corpus/seeds-kvstate fuzz-corpus/seeds-kvspec fuzz-corpus/seeds-calib fuzz-corpus/seeds-server fuzz-corpus/seeds-reservoir
printf 'Hello, world! 12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\n\n  x' > fuzz-corpus/seeds-tok/mixed
printf '<|im_start|>user\nWhat is 3.14?<|im_end|>\n' > fuzz-corpus/seeds-tok/chat
printf '\xff\xfe\xc0\x80 broken \xe2\x82' > fuzz-corpus/seeds-tok/invalid
"$build/gen_fuzz_seeds" fuzz-corpus/seeds-gguf fuzz-corpus/seeds-vocab
# request bodies as clients send them (chat, completion, every field, a few wrong ones)
printf '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":16,"temperature":0.7,"top_p":0.9,"seed":42,"stop":["\\n","END"],"stream":true,"stream_options":{"include_usage":true},"kv":"q4_0:rotate=1;sink=4,window=64"}' > fuzz-corpus/seeds-server/chat
printf '{"prompt":["Once upon a time"],"max_tokens":8,"stop":"x","kv":"k=turboquant_mse:bits=4;v=q8_0","n":1,"user":"u","top_k":40,"min_p":0.05,"max_completion_tokens":null}' > fuzz-corpus/seeds-server/completion
printf '{"prompt":"caf\xc3\xa9 \\u00e9\\ud83d\\ude00","max_tokens":1e3,"temperature":true,"kv":"q4_0@0,-1=f16","x":[1,{"a":null}]}' > fuzz-corpus/seeds-server/odd
i=0
for sp in 'f16' 'turboquant_mse:k=4,v=4;evict=h2o,budget=0.5,every=2' 'kivi:bits=2,group=32;evict=snapkv,budget=24,obs=8' \
          'q4_0;window=8,sink=2;evict=knorm,budget=16,recent=4' 'q8_0@0,-1=f16;evict=tova,budget=0.25' \
          'f32;evict=keyformer,budget=20,tau=0.5' 'f16;evict=pyramidkv,budget=30,slope=1.0' 'f16;evict=qfilters,budget=0.5' 'q8_0;evict=expected_attention,budget=9' \
          'k=kvquant:bits=3,group=16,outliers=0.02;v=turboquant_mse:bits=3;sink=2' 'kvquant:k=2,v=4,group=24,outliers=0.125,layout=rows' \
          'q4_0:rotate=1,layout=rows;window=16,sink=4,wprec=8' 'turboquant_mse:k=4,v=4;kmean=1,kscale=0.25,sink=4;calib=/nonexistent.vqc'; do
    printf '%s' "$sp" > fuzz-corpus/seeds-kvspec/s$i; i=$((i + 1))
done
VQ_FUZZ_WRITE_SEEDS=fuzz-corpus/seeds-kvstate "$build/fuzz_kv_state"
VQ_FUZZ_WRITE_SEEDS=fuzz-corpus/seeds-calib "$build/fuzz_calib"
VQ_FUZZ_WRITE_SEEDS=fuzz-corpus/seeds-reservoir "$build/fuzz_reservoir"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -r "$model" ]; then
    head -c 4096 "$model" > fuzz-corpus/seeds-gguf/smollm2_head4k.gguf
fi

par=()
if [ "$jobs" -gt 1 ]; then par=(-jobs="$jobs" -workers="$jobs"); fi   # libFuzzer then logs to fuzz-N.log
status=0
# target  corpus (grows between runs, git-ignored)  seeds (rewritten each run)  longest input  dictionary
# (a kv stream of the fuzzed cache filled to its 64 rows is 22858 bytes)
for spec in "fuzz_gguf gguf seeds-gguf -max_len=8192 -dict=tests/fuzz/gguf.dict" \
            "fuzz_l2c_vocab vocab seeds-vocab -max_len=8192" "fuzz_tokenizer tok seeds-tok -max_len=8192" \
            "fuzz_kv_state kvstate seeds-kvstate -max_len=32768" "fuzz_kv_spec kvspec seeds-kvspec -max_len=600" \
            "fuzz_calib calib seeds-calib -max_len=8192" "fuzz_server server seeds-server -max_len=4096" \
            "fuzz_reservoir reservoir seeds-reservoir -max_len=20000 -dict=tests/fuzz/gguf.dict"; do
    set -- $spec
    target=$1; corpus=fuzz-corpus/$2; seeds=fuzz-corpus/$3; shift 3
    echo "fuzz.sh: fuzzing $target for ${secs}s with ${jobs} job(s)"
    set +e
    "$build/$target" -max_total_time="$secs" "${par[@]}" "$@" \
        -malloc_limit_mb=128 -timeout=10 \
        -artifact_prefix="$crashes/$target-" -print_final_stats=1 "$corpus" "$seeds"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        echo "fuzz.sh: $target failed (exit $rc); the input is in $crashes/" >&2
        status=$rc
    else
        echo "fuzz.sh: $target: no crash in ${secs}s; corpus: $(ls "$corpus" | wc -l) inputs"
    fi
done
exit $status
