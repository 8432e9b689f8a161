#!/bin/bash
# The README's first line as a new user meets it: a clean clone of this repository, a fresh venv, an empty
# HOME (so an empty attnlab cache: SmolLM2 is fetched by the demo), no $ATTNLAB_DATA, no ../shared beside the
# clone; pip's download cache is kept warm (the wheels, not attnlab's data). Times go to $OUT/times.txt.
#   bash benchmarks/demo_fresh_machine.sh
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/attnlab-fresh}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
rm -rf "$OUT" && mkdir -p "$OUT/home"
git clone -q "$repo" "$OUT/attnlab" && cd "$OUT/attnlab"
python3 -m venv "$OUT/venv" && . "$OUT/venv/bin/activate"
unset ATTNLAB_DATA ATTNLAB_CACHE OMP_NUM_THREADS
export HOME="$OUT/home"
s=$(date +%s)
pip install -q . > "$OUT/install.log" 2>&1
i=$(date +%s)
attnlab demo > "$OUT/demo.out" 2> "$OUT/demo.err"
rc=$?
e=$(date +%s)
echo "rc=$rc install=$((i-s))s demo=$((e-i))s total=$((e-s))s" | tee "$OUT/times.txt"
