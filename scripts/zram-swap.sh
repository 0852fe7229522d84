#!/bin/sh
# zram-swap.sh — a zram swap device for the os-paging baseline (issue 7), as
# Android has: compressed swap in RAM. Needs root and a kernel with zram.
#
#   scripts/zram-swap.sh up [SIZE]   adds a zram device (zstd, else the best of
#                                    lz4 / lzo-rle the kernel offers, and says
#                                    so on stderr), makes it swap at the highest
#                                    priority; prints the device (/dev/zramN)
#   scripts/zram-swap.sh down DEV    swapoff, reset and remove that device
#   scripts/zram-swap.sh check       exit 0 if "up" can work here, else 77 and why
#
# SIZE is what zram accepts (default 1G). Exit codes: 0 ok, 1 failure,
# 77 not possible here (not root, no zram, no swapon).
set -eu
cmd=${1:-}
ctl=/sys/class/zram-control

check() {
    if [ "$(id -u)" != 0 ]; then echo "zram-swap: not root" >&2; return 77; fi
    if [ ! -w "$ctl/hot_add" ]; then
        if [ ! -d /sys/module/zram ] && command -v modprobe >/dev/null 2>&1; then
            modprobe zram num_devices=0 2>/dev/null || true
        fi
        if [ ! -w "$ctl/hot_add" ]; then echo "zram-swap: the kernel offers no zram ($ctl)" >&2; return 77; fi
    fi
    for t in mkswap swapon swapoff; do
        if ! command -v $t >/dev/null 2>&1 && [ ! -x /usr/sbin/$t ] && [ ! -x /sbin/$t ]; then
            echo "zram-swap: $t missing" >&2; return 77
        fi
    done
    return 0
}

PATH=$PATH:/usr/sbin:/sbin
case "$cmd" in
check)
    check && exit 0 || exit $?
    ;;
up)
    rc=0; check || rc=$?
    [ $rc = 0 ] || exit $rc
    size=${2:-1G}
    n=$(cat $ctl/hot_add)
    dev=/dev/zram$n
    sys=/sys/block/zram$n
    algs=$(cat $sys/comp_algorithm)
    alg=
    for a in zstd lz4 lzo-rle lzo; do
        case " $(echo "$algs" | tr -d '[]') " in *" $a "*) alg=$a; break ;; esac
    done
    if [ -z "$alg" ]; then echo "zram-swap: no known algorithm in: $algs" >&2; echo "$n" > $ctl/hot_remove; exit 1; fi
    [ "$alg" = zstd ] || echo "zram-swap: the kernel's zram has no zstd (offers: $algs); using $alg" >&2
    echo "$alg" > $sys/comp_algorithm
    echo "$size" > $sys/disksize
    i=0; while [ ! -b "$dev" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if ! mkswap "$dev" >/dev/null || ! swapon -p 32767 "$dev"; then
        echo 1 > $sys/reset 2>/dev/null || true
        echo "$n" > $ctl/hot_remove 2>/dev/null || true
        echo "zram-swap: cannot make $dev swap" >&2
        exit 1
    fi
    echo "$dev"
    ;;
down)
    dev=${2:?usage: zram-swap.sh down /dev/zramN}
    n=${dev#/dev/zram}
    case "$n" in ''|*[!0-9]*) echo "zram-swap: $dev is not a zram device" >&2; exit 1 ;; esac
    if grep -q "^$dev " /proc/swaps; then swapoff "$dev"; fi
    echo 1 > /sys/block/zram$n/reset
    echo "$n" > $ctl/hot_remove
    ;;
*)
    echo "usage: $0 up [SIZE] | down /dev/zramN | check" >&2
    exit 1
    ;;
esac
