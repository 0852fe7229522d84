#!/bin/sh
# test-skips.sh BUILD_DIR: after ctest, what did not run and why: the tests
# ctest reported Skipped (exit 77; names from BUILD_DIR/ctest-output.txt,
# which `make test` writes) with the reason each printed, then the parts
# that tests which ran skipped ("SKIP part NAME: WHY" lines of
# tests/unit/testutil.c's t_skip_part). Reasons come from
# BUILD_DIR/Testing/Temporary/LastTest.log. Then the stages outside ctest
# that skipped (make test-arm: BUILD_DIR/skips-arm.txt, one "STAGE: WHY" a
# line). Prints nothing when all ran.
dir="${1:-build}"
log="$dir/Testing/Temporary/LastTest.log"
out="$dir/ctest-output.txt"
if [ -s "$dir/skips-arm.txt" ]; then
    trap 'echo "skipped stages (make test-arm):"; sed "s/^/    /" "$dir/skips-arm.txt"' EXIT
fi
[ -r "$log" ] || { echo "test-skips: no $log (run ctest first)"; exit 0; }
skipped=$(grep -s '\*\*\*Skipped' "$out" | sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*/\1/p' | tr '\n' ' ')
awk -v skipped=" $skipped " '
/^[0-9]+\/[0-9]+ Testing: / { name = $3; why = ""; next }
/SKIP part / { l = $0; sub(/^[ \t]*/, "", l); parts = parts "    " name ": " l "\n"; if (why == "") why = l; next }
/(SKIP|[Ss]kipped)/ && why == "" { why = $0; sub(/^[ \t]*/, "", why) }
/^Test time/ && index(skipped, " " name " ") { tests = tests "    " name ": " (why == "" ? "(no reason printed)" : why) "\n" }
END {
    if (tests == "" && parts == "") exit 0
    print "---- what did not run ----"
    if (tests != "") printf "skipped tests (exit 77):\n%s", tests
    if (parts != "") printf "skipped parts:\n%s", parts
}' "$log"
