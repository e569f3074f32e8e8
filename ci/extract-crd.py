#!/usr/bin/env python3
"""Copy one version of an upstream CRD into tests/chart/data/crds/ as test data.

The CRD YAML is read from a Go module's source zip (`go mod download -json MODULE@VERSION`
gives its directory), so the file is exactly what that upstream release ships:

    python ci/extract-crd.py sigs.k8s.io/gateway-api@v1.6.3 \\
        config/crd/standard/gateway.networking.k8s.io_httproutes.yaml v1 httproute-v1.yaml

The output keeps group/kind/version, the names, scope and annotations (so tests/e2e can
install the CRD on the real API server) and that version's openAPIV3Schema unchanged.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "tests" / "chart" / "data" / "crds"


def main(module: str, path: str, version: str, out_name: str) -> int:
    info = json.loads(subprocess.run(["go", "mod", "download", "-json", module],
                                     capture_output=True, text=True, check=True).stdout)
    crd = yaml.safe_load((Path(info["Dir"]) / path).read_text())
    spec = crd["spec"]
    ver = next(v for v in spec["versions"] if v["name"] == version)
    meta = json.loads(Path(info["Info"]).read_text())  # the proxy's .info: Time, Origin
    commit = meta.get("Origin", {}).get("Hash", "")
    doc = {"group": spec["group"], "kind": spec["names"]["kind"], "version": version,
           "plural": spec["names"]["plural"], "scope": spec["scope"],
           # e.g. api-approved.kubernetes.io, required by the API server for *.k8s.io groups
           "annotations": crd["metadata"].get("annotations", {}),
           "openAPIV3Schema": ver["schema"]["openAPIV3Schema"]}
    header = (f"# openAPIV3Schema of the {doc['kind']} CRD ({doc['group']}/{version}), copied unchanged as test data.\n"
              f"# Source: Go module {module} (file {path})"
              + (f", commit {commit}" if commit else "") + f", published {meta.get('Time', '')[:10]}.\n"
              f"# Extracted by ci/extract-crd.py. License: Apache-2.0 (upstream).\n"
              f"# Used by tests/chart (schema validation) and tests/e2e (installed on the real API server).\n")
    (OUT / out_name).write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    print(f"wrote {OUT / out_name}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
