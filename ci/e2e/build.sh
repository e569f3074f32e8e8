#!/usr/bin/env bash
# Build the e2e control plane from pinned Go modules into .cache/e2e/<component>-<version>/.
# Idempotent: a component whose binary exists is skipped. GOCACHE/GOMODCACHE stay at Go's
# defaults (outside the repo), so a fresh clone on the same machine only re-links.
#
#   bash ci/e2e/build.sh            # all components
#   bash ci/e2e/build.sh kube etcd  # some of them (kube, kwok, etcd, crds, adapter, keda, nfd, lws)
#
# Each component writes <dir>/build-seconds (wall time of its last build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/ci/e2e"
_etcd_source=${ETCD_SOURCE:-}  # an ETCD_SOURCE from the environment wins over versions.env
# shellcheck source=versions.env
. "$HERE/versions.env"
ETCD_SOURCE=${_etcd_source:-$ETCD_SOURCE}
CACHE=${E2E_CACHE:-$ROOT/.cache/e2e}
GO=${GO:-go}
PARALLEL=${E2E_BUILD_PARALLEL:-2}
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN=local
BUILD_FLAGS=(-p "$PARALLEL" -trimpath)

die() { echo "e2e build: $*" >&2; exit 1; }
command -v "$GO" >/dev/null || die "Go not found (need Go >= 1.25 on PATH or GO=/path/to/go)"
mkdir -p "$CACHE"
rm -rf "$CACHE"/.tmp-*  # logs of earlier failed builds

BUILD_LABEL="e2e build"
# shellcheck source=../run-build.sh
. "$ROOT/ci/run-build.sh"

# kube-apiserver, kube-controller-manager, kube-scheduler as one multi-call binary.
build_kube() {
  local v=$1 out=$2 src="$2/src"
  mkdir -p "$src" "$out/bin"
  cp "$HERE/kube/main.go" "$src/"
  # k8s.io/kubernetes replaces every staging module with ./staging/...; replaces only
  # work in the main module, so list them here, pointing at the published v0.X.Y tags.
  local gomod
  gomod=$("$GO" mod download -json "k8s.io/kubernetes@v$v" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@v$v from the Go module proxy"
  local staging godebug
  staging=$(sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod")
  [ -n "$staging" ] || die "no staging replaces found in $gomod"
  godebug=$(grep -m1 '^godebug ' "$gomod" || true)
  {
    echo "module gpu-inference.local/e2e/kube"
    echo
    grep -m1 '^go ' "$gomod"
    [ -n "$godebug" ] && echo "$godebug"
    echo
    echo "require k8s.io/kubernetes v$v"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.${v#1.}"; done
    echo ")"
  } >"$src/go.mod"
  echo "staging modules: $(echo $staging | wc -w)"
  cat "$src/go.mod"
  (cd "$src" && "$GO" mod tidy)
  local maj=${v%%.*} rest=${v#*.} min ldv=()
  min=${rest%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldv+=("-X '$pkg.gitVersion=v$v'" "-X '$pkg.gitMajor=$maj'" "-X '$pkg.gitMinor=$min'"
          "-X '$pkg.gitTreeState=clean'" "-X '$pkg.gitCommit=v$v-module'"
          "-X '$pkg.buildDate=1970-01-01T00:00:00Z'")
  done
  (cd "$src" && "$GO" build "${BUILD_FLAGS[@]}" -ldflags "-s -w ${ldv[*]}" -o "$out/bin/kube" .)
  for c in kube-apiserver kube-controller-manager kube-scheduler; do ln -sf kube "$out/bin/$c"; done
  "$out/bin/kube-apiserver" --version
}

# kwok v0.8.0 has no replace directives: a plain module build works.
build_kwok() {
  local v=$1 out=$2
  mkdir -p "$out/bin"
  GOBIN="$out/bin" "$GO" install "${BUILD_FLAGS[@]}" \
    -ldflags "-s -w -X 'sigs.k8s.io/kwok/pkg/consts.Version=$v'" "sigs.k8s.io/kwok/cmd/kwok@$v"
  "$out/bin/kwok" --version
}

# wrapper_build <out-binary> <module> <version> <package> <go version> [go mod tidy flags]:
# build <package> of <module>@<version> from a throw-away main module that only requires
# it (its go line sets the GODEBUG defaults: keep the module's own).
# For modules whose own go.mod has `replace` lines (so `go install pkg@v` fails) or whose
# version list the proxy here does not serve.
wrapper_build() {
  local bin=$1 mod=$2 v=$3 pkg=$4 go=$5 src
  shift 5
  src="$(dirname "$(dirname "$bin")")/src"
  mkdir -p "$src" "$(dirname "$bin")"
  cat >"$src/go.mod" <<EOM
module gpu-inference.local/e2e/$(basename "$bin")

go $go

require $mod $v
EOM
  cat >"$src/tools.go" <<EOM
//go:build tools

package tools

import _ "$pkg"
EOM
  (cd "$src" && "$GO" mod tidy "$@" && "$GO" build "${BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$bin" "$pkg")
}

# etcd server: its go.mod replaces ../api etc., so `go install @v` fails.
build_etcd() {
  wrapper_build "$2/bin/etcd" go.etcd.io/etcd/server/v3 "v$1" go.etcd.io/etcd/server/v3 1.25.0 -e
  "$2/bin/etcd" --version
}

# etcd from Debian: the signed apt index pins the package; extract it without installing.
build_etcd_debian() {
  local v=${1#debian-} out=$2
  command -v apt-get >/dev/null || die "apt-get not found: use ETCD_SOURCE=module to build etcd from Go modules"
  mkdir -p "$out/bin" "$out/deb"
  (cd "$out/deb" && apt-get download "etcd-server=$v") \
    || die "apt-get download etcd-server=$v failed (run apt-get update, or ETCD_SOURCE=module)"
  dpkg-deb -x "$out"/deb/etcd-server_*.deb "$out/deb/root"
  cp "$out/deb/root/usr/bin/etcd" "$out/bin/etcd"
  rm -rf "$out/deb"
  "$out/bin/etcd" --version
}

# prometheus-adapter: the proxy here serves the v0.12.0 module but not its version list,
# which `go install pkg@v` reads for deprecation notices.
build_adapter() {
  wrapper_build "$2/bin/adapter" sigs.k8s.io/prometheus-adapter "$1" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter 1.22.1
}

# Upstream CRDs (real schemas, so the API server validates the chart's objects): copied
# from the Go module zips of prometheus-operator and KEDA, which carry the CRD YAML files.
build_crds() {
  local out=$2 po ke
  mkdir -p "$out/bin"
  po=$("$GO" mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  ke=$("$GO" mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$po" ] && [ -d "$ke" ] || die "could not download the CRD source modules"
  for f in monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_podmonitors.yaml \
           monitoring.coreos.com_prometheusrules.yaml; do
    cp "$po/example/prometheus-operator-crd/$f" "$out/"
  done
  for f in keda.sh_scaledobjects.yaml keda.sh_triggerauthentications.yaml; do
    cp "$ke/config/crd/bases/$f" "$out/"
  done
  ls "$out"/*.yaml > "$out/bin/crds"  # the marker run_build looks for
  chmod +x "$out/bin/crds"
}

# KEDA operator (the ScaledObject controller that scales 0 <-> 1), built from the module's
# own source so its go.mod replace lines apply (`go install pkg@v` refuses them). The zip
# carries a partial vendor/modules.txt, hence -mod=mod.
build_keda() {
  local v=$1 out=$2 src
  src=$("$GO" mod download -json "github.com/kedacore/keda/v2@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || die "could not download github.com/kedacore/keda/v2@$v"
  mkdir -p "$out/bin" "$out/src"
  cp -r "$src/." "$out/src/" && chmod -R u+w "$out/src"
  (cd "$out/src" && "$GO" build -mod=mod "${BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$out/bin/keda" ./cmd/operator)
  rm -rf "$out/src"
  "$out/bin/keda" --help >/dev/null 2>&1 || true
}

# Node Feature Discovery's nfd-worker and nfd-master (v$NFD_VERSION), unchanged, for the
# node-agent emulator of tests/e2e/nodeagent.py. Built from a copy of the module's own
# source (its go.mod pins k8s.io staging modules with replace lines, which only a main
# module applies), as upstream's Makefile builds them: -X version.version and -X
# hostpath.pathPrefix. The prefix is relative (`host-`, upstream's container images use
# `/host-`): each worker runs with its working directory at the pod's emulated root, whose
# host-sys is that node's mock sysfs. The nested module api/nfd is left out of the
# module zip, so its `./api/nfd` replace becomes the published api/nfd at the same tag.
build_nfd() {
  local v=$1 out=$2 src ld
  src=$("$GO" mod download -json "sigs.k8s.io/node-feature-discovery@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || die "could not download sigs.k8s.io/node-feature-discovery@$v"
  mkdir -p "$out/bin" "$out/src"
  cp -r "$src/." "$out/src/" && chmod -R u+w "$out/src"
  ld="-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$v"
  ld="$ld -X sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath.pathPrefix=host-"
  (cd "$out/src" \
    && "$GO" mod edit -dropreplace=sigs.k8s.io/node-feature-discovery/api/nfd \
         -require=sigs.k8s.io/node-feature-discovery/api/nfd@$v \
    && "$GO" build -mod=mod "${BUILD_FLAGS[@]}" -ldflags "$ld" -o "$out/bin/" ./cmd/nfd-worker ./cmd/nfd-master)
  # NFD's own Helm chart and CRD kustomization at the same tag: the e2e's "cluster already
  # has NFD" install, and the directory the printed `kubectl apply -k <nfd-crds URL>` is
  # pointed at (no network here)
  cp -r "$out/src/deployment/helm/node-feature-discovery" "$out/chart"
  cp -r "$out/src/deployment/base/nfd-crds" "$out/nfd-crds"
  rm -rf "$out/src"
  # run_build's marker: one entry point, `nfd worker|master ARGS`.
  printf '#!/bin/sh\n# nfd-worker / nfd-master of NFD %s\nc=$1; shift; exec "$(dirname "$0")/nfd-$c" "$@"\n' "$v" >"$out/bin/nfd"
  chmod +x "$out/bin/nfd"
  "$out/bin/nfd-worker" -version
}

# LeaderWorkerSet controller (sigs.k8s.io/lws, $LWS_VERSION): its manager binary (cmd/, the
# controllers and the webhooks), built through a wrapper module (the proxy here serves the
# module but not its version list). The module zip also carries the CRD and the webhook
# configurations (config/crd/bases, config/webhook/manifests.yaml and its kustomize patches):
# copied beside the binary,
# the CRD for kubernetes-validate and the cluster, the webhooks for the e2e's loopback wiring.
build_lws() {
  local v=$1 out=$2 src
  wrapper_build "$out/bin/lws" sigs.k8s.io/lws "$v" sigs.k8s.io/lws/cmd 1.26.0
  src=$("$GO" mod download -json "sigs.k8s.io/lws@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || die "could not download sigs.k8s.io/lws@$v"
  # both CRDs the manager watches (its DisaggregatedSet controller stops the manager when its
  # CRD is missing past the cache sync timeout)
  cp "$src/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" \
     "$src/config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" "$out/"
  cp "$src/config/webhook/manifests.yaml" "$out/webhook-manifests.yaml"
  cp "$src/config/webhook/mutating-patch.yaml" "$src/config/webhook/validating-patch.yaml" "$out/"
  "$out/bin/lws" --version
}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube kwok etcd crds adapter keda nfd lws)
total_start=$(date +%s)
for c in "${components[@]}"; do
  case $c in
    kube) run_build kube "$K8S_VERSION" build_kube ;;
    kwok) run_build kwok "$KWOK_VERSION" build_kwok ;;
    etcd)
      case $ETCD_SOURCE in
        debian) run_build etcd "debian-$ETCD_DEBIAN_VERSION" build_etcd_debian ;;
        module) run_build etcd "$ETCD_MODULE_VERSION" build_etcd ;;
        *) die "ETCD_SOURCE must be debian or module" ;;
      esac ;;
    adapter) run_build adapter "$ADAPTER_VERSION" build_adapter ;;
    crds) run_build crds "po-$PROMETHEUS_OPERATOR_VERSION-keda-$KEDA_VERSION" build_crds ;;
    keda) run_build keda "$KEDA_VERSION" build_keda ;;
    nfd) run_build nfd "$NFD_VERSION" build_nfd ;;
    lws) run_build lws "$LWS_VERSION" build_lws ;;
    *) die "unknown component '$c' (kube, kwok, etcd, crds, adapter, keda, nfd)" ;;
  esac
done
echo "e2e build: done in $(( $(date +%s) - total_start )) s (cache: $CACHE)"
