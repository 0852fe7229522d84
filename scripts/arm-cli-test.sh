#!/usr/bin/env bash
# arm-cli-test.sh [X86_BUILD [ARM_BUILD]]: the whole `mzcache` CLI built for
# AArch64 (cmake/aarch64-linux-gnu.cmake, only the CLI target, into
# ARM_BUILD, default build-aarch64-cli) answers one short SmolLM2 prompt per
# weight type under qemu-aarch64 with the same greedy tokens as the x86-64
# CLI of X86_BUILD (default build) on the very same file, in the same run.
#
# The files are the real SmolLM2 weights (models/, Q4_1) rewritten by our own
# `mzcache quantize` into X86_BUILD/test-tmp/mixes/, where test_forward_mixes
# makes and keeps them: a mix file whose sha256 is the one its goldens
# (tests/golden/mixes/) were made on is reused, any other is made again.
#
# Each case prints both token lists. Where they split, it prints the position
# and each side's logit lead there (`mzcache run --show-ids`: its token's
# logit minus the runner-up's) and runs the case again on both sides with the
# scalar kernels (MZ_KERNELS=scalar), which compute in the same order on
# either machine. A split is a near-tie, not a fault, only when both leads are
# below NEAR_TIE and the scalar runs give the same tokens and the same leads
# to the last digit: then the SIMD kernels' summation order alone moved a
# close pair of logits. NEAR_TIE = 1.0 logit is below the smallest move
# llama.cpp itself shows on these files when it switches flash attention on
# (peer_max 1.25 to 1.67 in tests/golden/mixes); a wrong kernel moves logits
# by far more and breaks the scalar agreement neither way.
#
# Exit 0: every case the same or a near-tie; 1: another split or a failure; 77: skipped, saying
# what is missing (the cross compiler, qemu-aarch64, an arm64 library, the
# model), also appended to $MZ_SKIP_LOG when set (scripts/test-skips.sh).
# MZ_ARM_TYPES="Q4_K_M Q6_K" narrows the types; MZ_ARM_THREADS sets the
# threads (default 1: under qemu-user on a busy machine, compute threads that
# wait for each other by spinning turn seconds into minutes).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
X86=${1:-build}
ARM=${2:-build-aarch64-cli}
ARM_PC=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TYPES=${MZ_ARM_TYPES:-"Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K Q5_0 Q5_1 IQ4_NL IQ4_XS Q8_0 Q4_0 Q4_1"}
THREADS=${MZ_ARM_THREADS:-1}
PROMPT="The capital of France is"
N_PREDICT=8
NEAR_TIE=1.0

skip() {
    echo "arm-cli-test: skipped: $*"
    if [ -n "${MZ_SKIP_LOG:-}" ]; then echo "arm-cli-test: $*" >>"$MZ_SKIP_LOG"; fi
    exit 77
}

# ---- what the stage needs: say exactly what is missing -------------------------------
command -v aarch64-linux-gnu-gcc >/dev/null ||
    skip "aarch64-linux-gnu-gcc not installed (Debian: gcc-aarch64-linux-gnu; scripts/install-deps.sh)"
why=$(scripts/qemu-aarch64-run.sh --check) || skip "$why"
command -v pkg-config >/dev/null || skip "pkg-config not installed"
missing=()
for pc in libpcre2-8:libpcre2-dev liburing:liburing-dev libmicrohttpd:libmicrohttpd-dev libcjson:libcjson-dev; do
    PKG_CONFIG_LIBDIR=$ARM_PC pkg-config --exists "${pc%%:*}" || missing+=("${pc#*:}:arm64")
done
[ ${#missing[@]} -eq 0 ] ||
    skip "arm64 libraries missing: ${missing[*]} (dpkg --add-architecture arm64; scripts/install-deps.sh installs them)"
[ -r "$MODEL" ] || skip "$MODEL absent (make model)"

# ---- the two CLIs -------------------------------------------------------------------------
t0=$(date +%s)
if [ ! -f "$X86/CMakeCache.txt" ]; then
    cmake -S . -B "$X86" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
fi
cmake --build "$X86" -j "$(nproc)" --target mzcache-cli >/dev/null || { echo "arm-cli-test: x86-64 build failed"; exit 1; }
if [ ! -f "$ARM/CMakeCache.txt" ]; then
    cmake -S . -B "$ARM" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
        >/dev/null || { echo "arm-cli-test: configuring the AArch64 build failed"; exit 1; }
fi
cmake --build "$ARM" -j "$(nproc)" --target mzcache-cli >/dev/null || { echo "arm-cli-test: AArch64 build failed"; exit 1; }
t_build=$(($(date +%s) - t0))
X86_CLI=$X86/mzcache
ARM_RUN=("$ROOT/scripts/qemu-aarch64-run.sh" "$ARM/mzcache")
echo "arm-cli-test: both CLIs built in ${t_build}s; prompt \"$PROMPT\", $N_PREDICT greedy tokens, $THREADS threads"

# ---- per weight type ----------------------------------------------------------------------
MIXES="$X86/test-tmp/mixes"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$MIXES"

# The file of TYPE: the model itself for Q4_1, else our quantizer's output
# (kept; made again unless it is the file the mix goldens were made on, or
# for types without goldens, unless it is there).
model_of() {
    local type=$1 file golden want have
    if [ "$type" = Q4_1 ]; then echo "$MODEL"; return 0; fi
    file="$MIXES/SmolLM2-135M-Instruct.$type.gguf"
    golden="tests/golden/mixes/smollm2-$type.txt"
    want=$([ -r "$golden" ] && sed -n 's/^sha256 //p' "$golden")
    have=$([ -r "$file" ] && sha256sum "$file" | cut -d' ' -f1)
    if [ -z "$have" ] || { [ -n "$want" ] && [ "$have" != "$want" ]; }; then
        "$X86_CLI" quantize -m "$MODEL" -o "$WORK/q.gguf" --type "$type" -t "$(nproc)" >/dev/null &&
            mv "$WORK/q.gguf" "$file" || return 1
    fi
    echo "$file"
}

# run_one ARCH FILE OUT [KERNELS]: the greedy answer's "token ID lead L" (and "end ID lead L"
# when it stops before N_PREDICT: the end of generation is a token the two may split on)
# lines into OUT.ids; KERNELS sets MZ_KERNELS (scalar: the reference kernels).
run_one() {
    local file=$2 out=$3
    local -a cmd
    if [ "$1" = x86 ]; then cmd=("$X86_CLI"); else cmd=("${ARM_RUN[@]}"); fi
    MZ_KERNELS=${4:-} "${cmd[@]}" run -m "$file" -p "$PROMPT" -n "$N_PREDICT" --greedy -t "$THREADS" -c 64 -q --show-ids \
        >"$out.txt" 2>"$out.err" || { echo "  $1 run failed:"; sed 's/^/    /' "$out.err"; return 1; }
    grep -E '^(token|end) ' "$out.err" >"$out.ids"
}

rc=0
n_same=0
n_tie=0
n_cases=0
for type in $TYPES; do
    n_cases=$((n_cases + 1))
    file=$(model_of "$type") || { echo "arm-cli-test: $type: quantize failed"; rc=1; continue; }
    ts=$(date +%s)
    if ! { run_one x86 "$file" "$WORK/x86" && run_one arm "$file" "$WORK/arm"; }; then
        echo "arm-cli-test: $type: FAIL"
        rc=1
        continue
    fi
    ids_x86=$(cut -d' ' -f2 "$WORK/x86.ids" | tr '\n' ' ')
    ids_arm=$(cut -d' ' -f2 "$WORK/arm.ids" | tr '\n' ' ')
    if [ -n "$ids_x86" ] && [ "$ids_x86" = "$ids_arm" ]; then
        n_same=$((n_same + 1))
        least=$(cut -d' ' -f4 "$WORK/x86.ids" | sort -g | head -1)
        echo "arm-cli-test: $type: same $(wc -l <"$WORK/x86.ids") tokens [ $ids_x86] (smallest x86 lead $least; $(($(date +%s) - ts))s)"
    else
        echo "arm-cli-test: $type: split"
        echo "  x86-64:  [ $ids_x86]"
        echo "  aarch64: [ $ids_arm]"
        # The first position where they differ, each side's token and lead
        # there; "near" when both leads are below NEAR_TIE.
        split=$(paste -d' ' "$WORK/x86.ids" "$WORK/arm.ids" | awk -v tie="$NEAR_TIE" '$2 != $6 {
            near = ($4 != "" && $8 != "" && $4 < tie && $8 < tie) ? "near" : "far"
            printf "%s position %d: x86-64 token %s (lead %s), aarch64 token %s (lead %s)\n",
                   near, NR - 1, $2, $4 == "" ? "-" : $4, $6 == "" ? "(none)" : $6, $8 == "" ? "-" : $8; exit }')
        echo "  ${split#* }"
        [ "$(wc -l <"$WORK/x86.ids")" = "$(wc -l <"$WORK/arm.ids")" ] ||
            echo "  lengths differ: x86-64 $(wc -l <"$WORK/x86.ids"), aarch64 $(wc -l <"$WORK/arm.ids") tokens"
        if run_one x86 "$file" "$WORK/x86s" scalar && run_one arm "$file" "$WORK/arms" scalar &&
            [ -s "$WORK/x86s.ids" ] && cmp -s "$WORK/x86s.ids" "$WORK/arms.ids"; then
            echo "  scalar kernels: the same tokens and leads on both [ $(cut -d' ' -f2 "$WORK/x86s.ids" | tr '\n' ' ')]"
            if [ "${split%% *}" = near ]; then
                echo "arm-cli-test: $type: near-tie (both leads below $NEAR_TIE): the SIMD kernels' summation order"
                n_tie=$((n_tie + 1))
                continue
            fi
        else
            echo "  scalar kernels: x86-64 and aarch64 differ too"
            paste -d' ' "$WORK/x86s.ids" "$WORK/arms.ids" | sed 's/^/    /'
        fi
        echo "arm-cli-test: $type: FAIL"
        rc=1
    fi
done
echo "arm-cli-test: $n_same of $n_cases weight types the same on aarch64 (qemu) as on x86-64, $n_tie near-tie;" \
    "stage $(($(date +%s) - t0))s"
exit $rc
