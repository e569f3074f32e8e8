#!/usr/bin/env bash
# Build the upstream oracle programs from pinned Go modules into
# .cache/oracle/<component>-<version>/bin/. Same conventions as ci/e2e/build.sh:
# idempotent (a component whose binary exists is skipped), built in a temp dir and moved
# into place only on success, <dir>/build-seconds, GOTOOLCHAIN=local, `-p 2 -trimpath`.
#
#   bash ci/oracle/build.sh               # all components
#   bash ci/oracle/build.sh deviceplugin  # some of them (deviceplugin, migparted, migmanager, adapter, keda, ct, bbr, envoygateway)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/ci/oracle"
# shellcheck source=versions.env
. "$HERE/versions.env"
# KEDA: one pin for the e2e CRDs and the oracle.
KEDA_VERSION=$(sed -n 's/^KEDA_VERSION=//p' "$ROOT/ci/e2e/versions.env")
CACHE=${ORACLE_CACHE:-$ROOT/.cache/oracle}
GO=${GO:-go}
PARALLEL=${ORACLE_BUILD_PARALLEL:-2}
export GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN=local
BUILD_FLAGS=(-p "$PARALLEL" -trimpath -ldflags "-s -w")

die() { echo "oracle build: $*" >&2; exit 1; }
command -v "$GO" >/dev/null || die "Go not found (need Go >= 1.25 on PATH or GO=/path/to/go)"
mkdir -p "$CACHE"
# One build at a time per cache (tests call this script, possibly from parallel workers,
# and worktrees may share the cache): the others wait, then find the result cached.
exec 9>"$CACHE/.lock"
flock 9
rm -rf "$CACHE"/.tmp-*  # logs of earlier failed builds

BUILD_LABEL="oracle build"
# shellcheck source=../run-build.sh
. "$ROOT/ci/run-build.sh"

moddir() {  # moddir <module>@<version>: the module's source dir in Go's module cache
  "$GO" mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# Device plugin + GFD (ci/oracle/deviceplugin): a nested module under the plugin's
# import path, so it may import internal/lm, internal/rm, internal/resource.
build_deviceplugin() {
  local out=$2 src="$2/src" nvml
  mkdir -p "$src" "$out/bin"
  cp "$HERE"/deviceplugin/*.go "$src/"
  sed -e "s/@DEVICE_PLUGIN_VERSION@/$DEVICE_PLUGIN_VERSION/" -e "s/@GO_NVML_VERSION@/$GO_NVML_VERSION/" \
    "$HERE/deviceplugin/go.mod.in" >"$src/go.mod"
  # NVIDIA's mock GPU tables and mock server (go-nvml pkg/nvml/mock/{gpus,server} of
  # GO_NVML_MOCK_VERSION), compiled against the plugin's own go-nvml (the plugin's
  # go-nvml has no pkg/nvml/mock/gpus).
  nvml=$(moddir "github.com/NVIDIA/go-nvml@$GO_NVML_MOCK_VERSION")
  [ -d "$nvml/pkg/nvml/mock/gpus" ] || die "go-nvml $GO_NVML_MOCK_VERSION has no pkg/nvml/mock/gpus"
  local pkg
  for pkg in gpus server; do
    mkdir -p "$src/nvmlmock/$pkg"
    find "$nvml/pkg/nvml/mock/$pkg" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$src/nvmlmock/$pkg/" \;
  done
  chmod -R u+w "$src"
  sed -i 's#"github.com/NVIDIA/go-nvml/pkg/nvml/mock/\(gpus\|server\)"#"github.com/NVIDIA/k8s-device-plugin/oracle/gpuinference/nvmlmock/\1"#' \
    "$src"/*.go "$src"/nvmlmock/*/*.go
  cat "$src/go.mod"
  # go-nvml is cgo (its bindings dlopen libnvidia-ml at run time, never called here).
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=1 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/deviceplugin" .)
  cp "$HERE/run-deviceplugin.sh" "$out/bin/"
}

# wrapper_build <out-binary> <module> <version> <package> <go version>: as in
# ci/e2e/build.sh, <package> of <module>@<version> from a throw-away main module.
wrapper_build() {
  local bin=$1 mod=$2 v=$3 pkg=$4 go=$5 src
  src="$(dirname "$(dirname "$bin")")/src"
  mkdir -p "$src" "$(dirname "$bin")"
  printf 'module gpu-inference.local/oracle/%s\n\ngo %s\n\nrequire %s %s\n' "$(basename "$bin")" "$go" "$mod" "$v" >"$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$src/tools.go"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=${CGO:-0} "$GO" build "${BUILD_FLAGS[@]}" -o "$bin" "$pkg")
}

# nvidia-mig-parted, the real CLI (`assert --valid-config` parses and selects without
# NVML; the binary is cgo because go-nvml is).
build_migparted() {
  CGO=1 wrapper_build "$2/bin/migparted" github.com/NVIDIA/mig-parted "$1" \
    github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted 1.24.0
  "$2/bin/migparted" --version
}

# prometheus-adapter's discovery (ci/oracle/adapter): a wrapper module at the e2e pin.
build_adapter() {
  local v=$1 out=$2 src="$2/src"
  mkdir -p "$src" "$out/bin"
  cp "$HERE/adapter/main.go" "$src/"
  printf 'module gpu-inference.local/oracle/adapter\n\ngo 1.22.1\n\nrequire sigs.k8s.io/prometheus-adapter %s\n' "$v" >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=0 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/adapter" .)
}

# KEDA's v1alpha1 types and webhook validations (ci/oracle/keda). KEDA's go.mod pins
# k8s.io and prometheus modules with replace lines, which only a main module's go.mod
# applies: they are copied from the downloaded go.mod, as build_kube does for staging.
build_keda() {
  local v=$1 out=$2 src="$2/src" gomod
  mkdir -p "$src" "$out/bin"
  cp "$HERE/keda/main.go" "$src/"
  gomod=$("$GO" mod download -json "github.com/kedacore/keda/v2@$v" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [ -f "$gomod" ] || die "could not download github.com/kedacore/keda/v2@$v"
  {
    printf 'module gpu-inference.local/oracle/keda\n\n'
    grep -m1 '^go ' "$gomod"
    printf '\nrequire github.com/kedacore/keda/v2 %s\n\n' "$v"
    sed -n '/^replace (/,/^)/p' "$gomod"
  } >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=0 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/keda" .)
}

# chart-testing's `ct` (from its Go module) plus yamllint and yamale (its Python linters,
# pinned from PyPI into a venv next to it), and ct's own default lint configs.
build_ct() {
  local v=$1 out=$2 src
  wrapper_build "$out/bin/ct.bin" github.com/helm/chart-testing/v3 "$v" github.com/helm/chart-testing/v3/ct 1.24.0
  src=$(moddir "github.com/helm/chart-testing/v3@$v")
  mkdir -p "$out/etc"
  cp "$src/etc/chart_schema.yaml" "$src/etc/lintconf.yaml" "$out/etc/"
  python3 -m venv "$out/venv"
  "$out/venv/bin/pip" install -q "yamllint==$YAMLLINT_VERSION" "yamale==$YAMALE_VERSION"
  # ct runs `helm`, `yamllint` and `yamale` from PATH. A venv's console scripts carry
  # the absolute path of the temp dir it was built in, so the shims call the venv's
  # python (which finds its site-packages relative to itself) with the entry points.
  mkdir -p "$out/shims"
  cat >"$out/shims/yamllint" <<'EOM'
#!/bin/sh
exec "$(dirname "$0")/../venv/bin/python" -c 'import sys; from yamllint.cli import run; sys.argv[0] = "yamllint"; run()' "$@"
EOM
  cat >"$out/shims/yamale" <<'EOM'
#!/bin/sh
exec "$(dirname "$0")/../venv/bin/python" -c 'import sys; from yamale.command_line import main; sys.argv[0] = "yamale"; main()' "$@"
EOM
  cat >"$out/bin/ct" <<'EOM'
#!/bin/sh
# chart-testing with its pinned linters first on PATH (helm comes from the caller's PATH).
here=$(cd "$(dirname "$0")/.." && pwd)
PATH="$here/shims:$PATH" exec "$here/bin/ct.bin" "$@"
EOM
  chmod +x "$out/bin/ct" "$out/shims/yamllint" "$out/shims/yamale"
  "$out/bin/ct.bin" version
}

# mig-parted's config selection applied to mock GPUs (ci/oracle/migmanager), for the
# day-1 e2e's mig-manager emulation. Its cache entry is named by the mig-parted pin and
# a hash of main.go, so an edit rebuilds it. cgo: mig-parted's util imports go-nvml.
build_migmanager() {
  local out=$2 src="$2/src"
  mkdir -p "$src" "$out/bin"
  cp "$HERE/migmanager/main.go" "$src/"
  printf 'module gpu-inference.local/oracle/migmanager\n\ngo 1.24.0\n\nrequire github.com/NVIDIA/mig-parted %s\n' "$MIG_PARTED_VERSION" >"$src/go.mod"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=1 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/migmanager" .)
}
MIGMANAGER_VERSION="$MIG_PARTED_VERSION-$(sha256sum "$HERE/migmanager/main.go" | cut -c1-12)"

# The device-plugin oracle's cache entry: the plugin pin and a hash of its sources (an
# edit rebuilds it), read by tests/oracle/oraclelib.py ensure_built too.
DEVICEPLUGIN_VERSION="$DEVICE_PLUGIN_VERSION-$(cat "$HERE"/deviceplugin/*.go "$HERE"/deviceplugin/go.mod.in "$HERE"/run-deviceplugin.sh | sha256sum | cut -c1-12)"
# The Gateway API Inference Extension's body-based router (cmd/bbr, the program of the
# chart's bbr image) and a tiny ext_proc client (ci/oracle/bbr) in one throw-away module at
# the chart's GAIE pin; upstream's go.sum seeds ours (its requirements are its own).
build_bbr() {
  local v=${1%%-*} out=$2 src="$2/src" gaie
  mkdir -p "$src/extproc" "$out/bin"
  cp "$HERE/bbr/main.go" "$src/extproc/"
  gaie=$(moddir "sigs.k8s.io/gateway-api-inference-extension@$v")
  [ -f "$gaie/go.sum" ] || die "could not download sigs.k8s.io/gateway-api-inference-extension@$v"
  printf 'module gpu-inference.local/oracle/bbr\n\n%s\n\nrequire sigs.k8s.io/gateway-api-inference-extension %s\n' \
    "$(grep -m1 '^go ' "$gaie/go.mod")" "$v" >"$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/gateway-api-inference-extension/cmd/bbr"\n' >"$src/tools.go"
  cp "$gaie/go.sum" "$src/go.sum" && chmod u+w "$src/go.sum"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=0 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/" \
    sigs.k8s.io/gateway-api-inference-extension/cmd/bbr ./extproc)
  mv "$out/bin/extproc" "$out/bin/extproc-client"
}
BBR_BUILD="$GAIE_VERSION-$(sha256sum "$HERE/bbr/main.go" | cut -c1-12)"

# Envoy Gateway's own Gateway API translator (internal/gatewayapi) behind a small main
# (ci/oracle/envoygateway), as a nested module under Envoy Gateway's import path so it may
# import internal/; Envoy Gateway's go.mod replace lines and go.sum are copied (its
# go-control-plane/contrib pseudo-version is unknown to the checksum database).
build_envoygateway() {
  local v=${1%%-*} out=$2 src="$2/src" eg
  mkdir -p "$src" "$out/bin"
  cp "$HERE/envoygateway/main.go" "$src/"
  eg=$(moddir "github.com/envoyproxy/gateway@$v")
  [ -f "$eg/go.sum" ] || die "could not download github.com/envoyproxy/gateway@$v"
  {
    sed -e "s/@EG_VERSION@/$v/" -e "s/^go .*/$(grep -m1 '^go ' "$eg/go.mod")/" "$HERE/envoygateway/go.mod.in"
    sed -n '/^replace (/,/^)/p;/^replace [^(]/p' "$eg/go.mod"
  } >"$src/go.mod"
  cp "$eg/go.sum" "$src/go.sum" && chmod u+w "$src/go.sum"
  (cd "$src" && "$GO" mod tidy && CGO_ENABLED=0 "$GO" build "${BUILD_FLAGS[@]}" -o "$out/bin/envoygateway" .)
}
ENVOYGATEWAY_BUILD="$ENVOY_GATEWAY_VERSION-$(sha256sum "$HERE/envoygateway/main.go" | cut -c1-12)"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(deviceplugin migparted migmanager adapter keda ct bbr envoygateway)
total_start=$(date +%s)
for c in "${components[@]}"; do
  case $c in
    deviceplugin) run_build deviceplugin "$DEVICEPLUGIN_VERSION" build_deviceplugin ;;
    migparted) run_build migparted "$MIG_PARTED_VERSION" build_migparted ;;
    migmanager) run_build migmanager "$MIGMANAGER_VERSION" build_migmanager ;;
    adapter) run_build adapter "$ADAPTER_VERSION" build_adapter ;;
    keda) run_build keda "$KEDA_VERSION" build_keda ;;
    ct) run_build ct "$CHART_TESTING_VERSION" build_ct ;;
    bbr) run_build bbr "$BBR_BUILD" build_bbr ;;
    envoygateway) run_build envoygateway "$ENVOYGATEWAY_BUILD" build_envoygateway ;;
    *) die "unknown component '$c' (deviceplugin, migparted, migmanager, adapter, keda, ct, bbr, envoygateway)" ;;
  esac
done
echo "oracle build: done in $(( $(date +%s) - total_start )) s (cache: $CACHE)"
