# Sourced by the install tests (run.sh, run_torch.sh) after they set
# build_dir and test_name: `cmake --install` of the build into a temporary
# prefix ($prefix, under $work, removed on exit), and `fail` naming the test.
work=$(mktemp -d "${TMPDIR:-/tmp}/dmuon-$test_name.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
prefix=$work/prefix

fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }

echo "== cmake --install $build_dir --prefix $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log" >&2
  fail "cmake --install failed"
}
