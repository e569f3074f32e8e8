"""mig-parted config: mig-parted's own spec cases (ported as data), builder, labels, placement checks."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuvalues.errors import MigPartedConfigError
from gpuvalues.planners.mig import migparted

CASES = yaml.safe_load((Path(__file__).parent / "data" / "mig_parted_spec_cases.yaml").read_text())


@pytest.mark.parametrize("case", CASES["spec"], ids=lambda c: c["description"])
def test_spec_cases(case):
    if case["valid"]:
        migparted.validate_mig_parted_config(case["input"])
    else:
        with pytest.raises(MigPartedConfigError):
            migparted.validate_mig_parted_config(case["input"])


@pytest.mark.parametrize("case", CASES["entry"], ids=lambda c: c["description"])
def test_entry_cases(case):
    cfg = {"version": "v1", "mig-configs": {"c": [case["input"]]}}
    if case["valid"]:
        migparted.validate_mig_parted_config(cfg)
    else:
        with pytest.raises(MigPartedConfigError) as exc:
            migparted.validate_mig_parted_config(cfg, source="mig.yaml")
        assert exc.value.field == f"mig-configs.c[0].{case['field']}"
        assert str(exc.value).startswith(f"mig.yaml: mig-configs.c[0].{case['field']}: ")


def test_empty_named_list_rejected():
    with pytest.raises(MigPartedConfigError, match="at least one entry in 'x'"):
        migparted.validate_mig_parted_config({"version": "v1", "mig-configs": {"x": []}})


def test_placement_checked_with_gpu():
    cfg = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True,
                                                   "mig-devices": {"4g.40gb": 1, "2g.20gb": 2}}]}}
    migparted.validate_mig_parted_config(cfg)  # format only: fine
    with pytest.raises(MigPartedConfigError, match="no allowed start left for 2g.20gb #2") as exc:
        migparted.validate_mig_parted_config(cfg, gpu="A100-80GB")
    assert exc.value.field == "mig-configs.c[0].mig-devices"


def test_builder_groups_devices():
    cfg = migparted.build_mig_parted_config({
        "pool-1": [{"1g.10gb": 7}] * 8,
        "pool-2": [{"3g.40gb": 2}, {"3g.40gb": 2}, {"7g.80gb": 1}, None],
    })
    assert cfg == {"version": "v1", "mig-configs": {
        "pool-1": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "pool-2": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                   {"devices": [2], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
                   {"devices": [3], "mig-enabled": False}],
    }}
    f = migparted.build_mig_parted_config({"p": [{"1g.10gb": 7}]}, device_filters={"p": ["0x20B210DE"]})
    assert f["mig-configs"]["p"][0]["device-filter"] == ["0x20B210DE"]


def test_labels_and_names():
    assert migparted.node_labels("a100-pool-1") == {"nvidia.com/mig.config": "a100-pool-1"}
    for bad in ("-x", "x" * 64, "a b", "x/y"):
        with pytest.raises(MigPartedConfigError, match="label value"):
            migparted.node_labels(bad)


@pytest.mark.parametrize("gpu, expected", [
    # the operator's default ConfigMap all-balanced entries (tests/unit/data/operator_mig_configs.yaml)
    ("A100-80GB", {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
    ("A100-40GB", {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}),
    ("H100-NVL", {"3g.47gb": 1, "2g.24gb": 1, "1g.12gb": 2}),
    ("A30", {"2g.12gb": 1, "1g.6gb": 2}),
    ("RTX-PRO-6000", {"2g.48gb": 1, "1g.24gb": 2}),
    ("GB200", {"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2}),
])
def test_all_balanced_matches_operator(gpu, expected):
    assert migparted.all_balanced(gpu) == expected
