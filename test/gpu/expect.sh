# Sourced by the shell tests of test/gpu: a scratch folder removed at exit,
# and checks that count their failures in $failures (each test reports it).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expect_in() { grep -qF -- "$2" <<<"$1" || fail "$3: no '$2' in:"$'\n'"$1"; }
expect_not_in() { ! grep -qF -- "$2" <<<"$1" || fail "$3: unexpected '$2' in:"$'\n'"$1"; }
