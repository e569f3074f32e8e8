"""Use gpuvalues from Python: build a spec's fleet, look at every finding, write the
values files and the node side, render the platform release.

    .venv/bin/python examples/api_example.py examples/mixed-a100-h100-mig.yaml out/
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

import gpuvalues


def main(spec_path: str, out_dir: str) -> int:
    spec = gpuvalues.load_spec(spec_path)                       # GpuValuesError: one line
    fleet = gpuvalues.check_fleet(gpuvalues.build_fleet(spec))  # every finding, placed
    for finding in fleet.findings:
        print(finding, file=sys.stderr)
    if fleet.errors:
        return 1
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for release in fleet.releases:                              # platform first
        (out / f"{release.name}.values.yaml").write_text(yaml.safe_dump(dict(release.values)))
        print(f"helm upgrade --install {release.name} charts/gpu-inference "
              f"-n {release.namespace} --create-namespace -f {out / release.name}.values.yaml")
    for name, data in fleet.node_side().items():                # mig-parted, device plugin, labels
        (out / name).write_text(yaml.safe_dump(data))
    for node in gpuvalues.expected_nodes(fleet).nodes[:3]:      # what the scheduler will see
        print(node.name, dict(node.allocatable), file=sys.stderr)
    text, objects = gpuvalues.render_values(dict(fleet.platform.values),
                                            release=fleet.platform.name,
                                            namespace=fleet.platform.namespace)
    print(f"platform release: {len(objects)} objects", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
