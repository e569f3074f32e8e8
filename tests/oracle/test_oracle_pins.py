"""The oracle judges what the chart deploys: same device-plugin version, and the flag
table it restates from upstream's package main is upstream's, flag by flag."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.oracle import oraclelib as ol


def _image_tags(node, found):
    if isinstance(node, dict):
        repo = node.get("repository")
        if isinstance(repo, str) and repo.endswith("/k8s-device-plugin") and "tag" in node:
            found.append(str(node["tag"]))
        for v in node.values():
            _image_tags(v, found)
    elif isinstance(node, list):
        for v in node:
            _image_tags(v, found)
    return found


def test_chart_device_plugin_tag_is_the_oracle_version():
    tags = _image_tags(yaml.safe_load((ol.CHART / "values.yaml").read_text()), [])
    assert tags, "no k8s-device-plugin image in the chart's values.yaml"
    want = ol.versions()["DEVICE_PLUGIN_VERSION"]
    assert set(tags) == {want}, (
        f"chart deploys k8s-device-plugin {tags}, the oracle is built at {want}: "
        "bump ci/oracle/versions.env with the chart's tag")


def _module_dir(mod: str) -> Path:
    """A module's source in Go's module cache, offline (the oracle build fetched it)."""
    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    proc = subprocess.run(["go", "mod", "download", "-json", mod], capture_output=True, text=True,
                          env=env, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path(json.loads(proc.stdout)["Dir"])


_FLAG = re.compile(r"&cli\.(\w+Flag)\{(.*?)\n?\t*\}", re.S)


def _flags(go_source: str) -> set[tuple]:
    """(type, name, aliases, default, env vars) of each cli flag literal in Go source."""
    out = set()
    for kind, body in _FLAG.findall(go_source):
        def field(name):
            m = re.search(rf"\b{name}:\s*(.+?),?\s*(?:\n|$)", body)
            return m.group(1).strip().rstrip(",") if m else ""
        name = field("Name")
        if not name:
            continue
        value = field("Value")
        value = {"60 * time.Second": "60_000_000_000"}.get(value, value)
        out.add((kind, name, field("Aliases"), value, field("EnvVars")))
    return out


def _split_literals(go_source: str) -> str:
    """One field per line, so single-line literals parse like upstream's multi-line ones."""
    return re.sub(r"(\{|, )(Name|Aliases|Value|EnvVars|Usage|Destination|Category):", r"\1\n\2:", go_source)


@pytest.mark.parametrize(("cmd", "func"), [("nvidia-device-plugin", "pluginFlags"),
                                           ("gpu-feature-discovery", "gfdFlags")])
def test_oracle_flags_match_upstream(cmd, func):
    upstream = (_module_dir(f"github.com/NVIDIA/k8s-device-plugin@{ol.versions()['DEVICE_PLUGIN_VERSION']}")
                / "cmd" / cmd / "main.go").read_text()
    ours = (ol.ORACLE_DIR / "deviceplugin" / "flags.go").read_text()
    body = ours[ours.index(f"func {func}()"):]
    body = body[: body.index("\n}\n")]
    want = {f for f in _flags(upstream)}
    got = _flags(_split_literals(body))
    assert want, f"no flags parsed from upstream {cmd}/main.go"
    assert got == want, f"missing from the oracle: {sorted(want - got)}; not upstream: {sorted(got - want)}"


def test_negative_control_flag_table_check_fails_on_a_changed_default():
    src = '&cli.BoolFlag{\n\tName: "fail-on-init-error",\n\tValue: true,\n\tEnvVars: []string{"X"},\n}'
    changed = src.replace("true", "false")
    assert _flags(src) != _flags(changed)
