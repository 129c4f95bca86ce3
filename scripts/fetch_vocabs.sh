#!/usr/bin/env bash
# Fetches the real tokenizer vocabularies of the model families we run (Llama 3 "llama-bpe", Qwen2,
# Phi-3, Llama/Mistral SentencePiece) as llama.cpp ships them: vocabulary-only GGUF files in the
# source package llama-cpp-python==0.3.36 from the Python package index (vendor/llama.cpp/models/),
# with the chat templates of real models (vendor/llama.cpp/models/templates/). The tarball's SHA-256
# is pinned; the files go to models/vocab/ (ignored by git), never into the repository.
# Does nothing when they are there. VQ_LLAMACPP_SDIST may name an already downloaded tarball.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/models/vocab"
sha="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
name="llama_cpp_python-0.3.36.tar.gz"
want=(ggml-vocab-llama-bpe.gguf ggml-vocab-qwen2.gguf ggml-vocab-phi-3.gguf ggml-vocab-llama-spm.gguf)
have=1
for f in "${want[@]}"; do [ -f "$dest/$f" ] || have=0; done
[ -d "$dest/templates" ] || have=0
if [ $have = 1 ]; then echo "fetch_vocabs: $dest present"; exit 0; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
src="${VQ_LLAMACPP_SDIST:-}"
if [ -z "$src" ] || [ ! -f "$src" ]; then
  echo "fetch_vocabs: downloading llama-cpp-python==0.3.36 (source package) from the Python package index"
  python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check -d "$tmp" "llama-cpp-python==0.3.36"
  src="$tmp/$name"
fi
if ! echo "$sha  $src" | sha256sum -c --status; then
  echo "fetch_vocabs: checksum mismatch for $src (expected $sha)" >&2
  exit 1
fi
mkdir -p "$dest"
inner="llama_cpp_python-0.3.36/vendor/llama.cpp/models"
members=()
for f in "${want[@]}"; do members+=("$inner/$f"); done
tar -xzf "$src" -C "$tmp" "${members[@]}" "$inner/templates"
for f in "${want[@]}"; do mv "$tmp/$inner/$f" "$dest/$f"; done
rm -rf "$dest/templates" && mv "$tmp/$inner/templates" "$dest/templates"
echo "fetch_vocabs: ${#want[@]} vocabularies and $(ls "$dest/templates" | wc -l) chat templates in $dest"
