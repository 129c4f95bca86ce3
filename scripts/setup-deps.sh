#!/usr/bin/env bash
# Installs the Debian 12 packages VeloxQuant builds and tests with (run as root; skips what is there).
#   build-essential cmake pkg-config : the toolchain
#   libpcre2-dev   : the byte-level BPE pre-tokenizer regex (Unicode classes, lookahead)
#   zlib1g-dev     : crc32 for the session state file's checksums
#   libomp-dev clang libclang-rt-14-dev : clang's OpenMP and libFuzzer/ASan runtimes for the fuzz run
#   python3 python3-venv : the scripts that fetch the model and build the reference fixtures
#   gnuplot-nox    : the report's plots (make report)
#   libmicrohttpd-dev : `veloxquant serve`'s HTTP server (HTTP/1.1 parsing, chunked streams, timeouts)
#   libcjson-dev   : `veloxquant serve`'s request and response JSON
set -euo pipefail
pkgs=(build-essential cmake pkg-config libpcre2-dev zlib1g-dev libomp-dev clang libclang-rt-14-dev python3 python3-venv python3-pip unzip gnuplot-nox libmicrohttpd-dev libcjson-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
