# Sourced by the test scripts: runs ctest and keeps a tally of what ran, so
# that a closing line counts the tests that passed, failed and were skipped
# (CUDA tests skip themselves without a GPU), not the tests registered.
#
#   tally_ctest ARGS...   ctest ARGS..., output to the terminal; appends its
#                         counts to $DMUON_TALLY_FILE; returns ctest's status
#   tally_line            "tests: P passed, F failed, S skipped", summed over
#                         every tally_ctest of this script and of the scripts
#                         it ran
#   tally_finish          in the script that made the tally (the outermost):
#                         prints tally_line and removes the tally; elsewhere
#                         nothing. For an EXIT trap, so that a failing stage
#                         still ends in an honest line.
#
# DMUON_TALLY_FILE is made by the first script that sources this and
# exported, so that the stages scripts/test.sh runs add to one tally.
_tally_owner=0
if [[ -z ${DMUON_TALLY_FILE:-} ]]; then
  DMUON_TALLY_FILE=$(mktemp "${TMPDIR:-/tmp}/dmuon-tally.XXXXXX")
  export DMUON_TALLY_FILE
  _tally_owner=1
fi

tally_ctest() {
  local log rc=0 summary total failed skipped
  log=$(mktemp "${TMPDIR:-/tmp}/dmuon-ctest.XXXXXX")
  ctest "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  # "100% tests passed, 0 tests failed out of 363"; then the tests that did
  # not run, one a line, each ending in its reason. ctest counts a skipped
  # test as passed; here it is neither.
  summary=$(sed -n 's/.*tests passed, \([0-9]*\) tests* failed out of \([0-9]*\).*/\1 \2/p' "$log" |
    tail -n 1)
  skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .*\((Skipped|Disabled)\)$' "$log" || true)
  rm -f "$log"
  if [[ -z $summary ]]; then
    # No summary: ctest itself failed (no tests found, a bad argument).
    echo "0 1 0" >>"$DMUON_TALLY_FILE"
    [[ $rc -ne 0 ]] || rc=1
    return "$rc"
  fi
  read -r failed total <<<"$summary"
  echo "$((total - failed - skipped)) $failed $skipped" >>"$DMUON_TALLY_FILE"
  return "$rc"
}

tally_line() {
  awk '{p += $1; f += $2; s += $3}
       END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$DMUON_TALLY_FILE"
}

tally_finish() {
  [[ $_tally_owner -eq 1 ]] || return 0
  # Nothing tallied: the run stopped before any test (a failed build).
  [[ -s $DMUON_TALLY_FILE ]] && tally_line
  rm -f "$DMUON_TALLY_FILE"
}
