#!/usr/bin/env bash
# tools/devtmp.sh: fills .devtmp/ (git-ignored; a GPU call carries it with carry [".devtmp"]) on the development
# machine with what the GPU machine cannot fetch (../shared/device/README.md):
#   .devtmp/utf8proc/  utf8proc.h and libutf8proc.a of libutf8proc-dev (the GPU machine has no utf8proc)
#   .devtmp/whl/       the peers' wheels for Python 3.12: DeepSpeed (a pure-Python wheel built here, DS_BUILD_OPS=0),
#                      liger-kernel, hjson, pydantic with the pydantic-core its metadata pins, annotated-types,
#                      typing-inspection, typing-extensions
# Idempotent: what is there already is kept. About a minute with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devtmp/utf8proc .devtmp/whl
grep -qx '.devtmp/' .git/info/exclude 2> /dev/null || echo '.devtmp/' >> .git/info/exclude

if [ ! -f .devtmp/utf8proc/libutf8proc.a ]; then
  [ -f /usr/include/utf8proc.h ] || { echo "devtmp: install libutf8proc-dev first (tools/setup.sh)" >&2; exit 1; }
  cp /usr/include/utf8proc.h "$(dpkg -L libutf8proc-dev | grep '/libutf8proc\.a$')" .devtmp/utf8proc/
fi

cd .devtmp/whl
get() { pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"; }
ls liger_kernel-*.whl > /dev/null 2>&1 || get liger-kernel==0.8.5
ls hjson-*.whl > /dev/null 2>&1 || get hjson
ls pydantic-[0-9]*.whl > /dev/null 2>&1 || get pydantic
# pydantic pins its core exactly; an unpinned download can pick an unrelated placeholder.
core=$(unzip -p pydantic-[0-9]*.whl '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p')
[ -n "$core" ] || { echo "devtmp: no pydantic-core pin in pydantic's metadata" >&2; exit 1; }
rm -f $(ls pydantic_core-*.whl 2> /dev/null | grep -v "pydantic_core-$core-") 2> /dev/null || true
ls pydantic_core-$core-*.whl > /dev/null 2>&1 || get pydantic-core==$core
for pkg in annotated-types typing-inspection typing-extensions; do
  ls ${pkg//-/_}-*.whl > /dev/null 2>&1 || get $pkg
done
if ! ls deepspeed-*.whl > /dev/null 2>&1; then
  pip install -q wheel
  DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w .
fi
echo "devtmp: $(ls | tr '\n' ' ')($(du -sh . | cut -f1))"
