#!/usr/bin/env bash
# Shared by ci/e2e/build.sh and ci/oracle/build.sh (sourced, not run): the cache rule for
# components built from pinned Go modules. The caller sets CACHE (the cache folder) and
# BUILD_LABEL (the prefix of its messages) and defines die().

# run_build <name> <version> <function>: skip when cached, else build into a temp dir and
# move it into place only on success (no half-built cache entry).
run_build() {
  local name=$1 version=$2 fn=$3 dir="$CACHE/$1-$2"
  if [ -x "$dir/bin/$name" ]; then
    echo "$BUILD_LABEL: $name $version cached at $dir"
    return 0
  fi
  echo "$BUILD_LABEL: building $name $version ..."
  local tmp start end
  tmp=$(mktemp -d "$CACHE/.tmp-$name-XXXXXX")
  start=$(date +%s)
  # In the background, not under `if`: bash ignores `set -e` inside an if condition, even
  # in subshells, and a failed step must stop the build function.
  ( "$fn" "$version" "$tmp" ) >"$tmp/build.log" 2>&1 &
  if ! wait $! || [ ! -x "$tmp/bin/$name" ]; then
    tail -n 40 "$tmp/build.log" >&2
    die "$name $version failed to build (full log: $tmp/build.log)"
  fi
  end=$(date +%s)
  echo $((end - start)) >"$tmp/build-seconds"
  chmod 755 "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "$BUILD_LABEL: $name $version built in $((end - start)) s -> $dir/bin/$name"
}
