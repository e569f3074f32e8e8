"""Every mig-parted config the project emits, checked by the real `nvidia-mig-parted
assert --valid-config` per named config; and the project's own mig-parted validator
(gpuvalues.planners.mig.migparted, through belief.py) compared with it on generated mutations."""
from __future__ import annotations

import copy
import itertools

import pytest
import yaml

from tests.oracle import belief
from tests.oracle import oraclelib as ol


def _emitted():
    out = []
    for ex in sorted(p.name for p in ol.EXAMPLES.glob("*.yaml")):
        cfg = ol.artifacts(ex).get("mig-parted-config.yaml")
        if cfg:
            out.append((f"values --artifacts {ex}", cfg))
        spec = ol.spec(ex)
        if any(p.get("mig") for p in spec["cluster"]["nodePools"]):
            planned = (ol.plan(ex) or {}).get("mig_parted_config")
            if planned:
                out.append((f"plan {ex}", planned))
    return out


def test_every_emitted_mig_parted_config_is_valid_upstream():
    emitted = _emitted()
    assert emitted, "no example emits a mig-parted config"
    checked = 0
    for source, cfg in emitted:
        text = yaml.safe_dump(cfg)
        for name in cfg["mig-configs"]:
            ok, msg = ol.migparted_assert_valid(text, name)
            assert ok, f"{source}: mig-parted config {name!r}: nvidia-mig-parted says: {msg}"
            checked += 1
    assert checked >= 2


# --- negative controls ---------------------------------------------------------------------

_VALID = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "mixed": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
              {"devices": [2], "device-filter": ["0x20B210DE"], "mig-enabled": True,
               "mig-devices": {"3g.40gb": 2}}]}}


def test_valid_control_is_accepted():
    for name in _VALID["mig-configs"]:
        ok, msg = ol.migparted_assert_valid(yaml.safe_dump(_VALID), name)
        assert ok, msg


def _mutations():
    """(id, mutated config, selected config) that upstream rejects."""
    def m(f):
        c = copy.deepcopy(_VALID)
        f(c)
        return c
    return [
        ("unknown-entry-field", m(lambda c: c["mig-configs"]["mixed"][0].update({"mig-devicez": {}})), "mixed"),
        ("unknown-top-field", m(lambda c: c.update({"mig-configz": {}})), "mixed"),
        ("no-version", m(lambda c: c.pop("version")), "mixed"),
        ("bad-version", m(lambda c: c.update({"version": "v2"})), "mixed"),
        ("devices-when-disabled", m(lambda c: c["mig-configs"]["all-disabled"][0].update(
            {"mig-devices": {"1g.10gb": 1}})), "all-disabled"),
        ("enabled-without-devices", m(lambda c: c["mig-configs"]["mixed"][0].pop("mig-devices")), "mixed"),
        ("missing-devices", m(lambda c: c["mig-configs"]["mixed"][0].pop("devices")), "mixed"),
        ("bad-devices-string", m(lambda c: c["mig-configs"]["mixed"][0].update({"devices": "some"})), "mixed"),
        ("empty-config", m(lambda c: c["mig-configs"].update({"mixed": []})), "mixed"),
        ("not-selected", _VALID, "absent"),
    ]


@pytest.mark.parametrize(("cfg", "selected"), [pytest.param(c, s, id=i) for i, c, s in _mutations()])
def test_negative_control_mig_parted_rejects(cfg, selected):
    ok, msg = ol.migparted_assert_valid(yaml.safe_dump(cfg), selected)
    assert not ok and msg, f"nvidia-mig-parted accepted {cfg}"


@pytest.mark.parametrize(("cfg", "selected"), [pytest.param(c, s, id=i) for i, c, s in _mutations()
                                               if s != "absent"])
def test_project_validator_rejects_what_upstream_rejects(cfg, selected):
    """gpuvalues.planners.mig.migparted mirrors mig-parted api/spec/v1/spec.go: whatever upstream
    refuses, the project refuses too (with its one-line error)."""
    got = belief.validate_mig_parted_config(cfg)
    assert not got["ok"], f"the project accepts a config nvidia-mig-parted rejects: {cfg}"


def _generated_valid():
    profiles = {"A100-80GB": ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"],
                "H100-80GB-SXM": ["1g.10gb", "1g.20gb", "3g.40gb", "4g.40gb"]}
    out = []
    for _gpu, profs in profiles.items():
        for devices, (p, n) in itertools.product(("all", [0], [0, 1, 2]), [(p, 1) for p in profs]):
            out.append({"version": "v1", "mig-configs": {"c": [
                {"devices": devices, "mig-enabled": True, "mig-devices": {p: n}}]}})
    return out


@pytest.mark.parametrize("cfg", _generated_valid())
def test_project_validator_and_upstream_agree_on_valid_configs(cfg):
    ok, msg = ol.migparted_assert_valid(yaml.safe_dump(cfg), "c")
    got = belief.validate_mig_parted_config(cfg)
    assert ok, msg
    assert got["ok"], f"the project rejects a config nvidia-mig-parted accepts: {got['error']}"
