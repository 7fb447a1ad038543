#!/usr/bin/env bash
# Installs the Debian packages seqpar builds with, if any are missing. Idempotent.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev
      libyaml-cpp-dev libgtest-dev libgmock-dev libsentencepiece-dev libutf8proc-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "seqpar setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
