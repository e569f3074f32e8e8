"""The `platform` part of schemas/values.schema.json, checked in Python (Draft 2020-12,
as gpuvalues validates values) against the same rules the device plugin applies:
configs gpuvalues builds validate, configs the plugin refuses do not, and the error
points at the offending field."""
from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml

from gpuvalues.planners.deviceplugin import build_device_plugin_config
from tests.chart.test_platform import BAD_CONFIGS, GENERATED
from tests.conftest import CHART, ROOT

SCHEMA = json.loads((ROOT / "schemas" / "values.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def with_configs(configs: dict) -> dict:
    values = copy.deepcopy(DEFAULTS)
    values["platform"]["devicePlugin"]["config"]["map"] = configs
    return values


def test_schema_is_valid_and_defaults_pass():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert list(VALIDATOR.iter_errors(DEFAULTS)) == []


def test_generated_configs_pass():
    configs = {f"c{i}": build_device_plugin_config(**kw) for i, kw in enumerate(GENERATED)}
    assert list(VALIDATOR.iter_errors(with_configs(configs))) == []


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_refused_configs_fail_at_the_config(case):
    errors = list(VALIDATOR.iter_errors(with_configs({"bad": BAD_CONFIGS[case]})))
    assert errors, case
    paths = [list(e.absolute_path) for e in errors]
    assert all(p[:5] == ["platform", "devicePlugin", "config", "map", "bad"] for p in paths), paths


def test_mps_with_mixed_points_at_sharing_mps():
    errors = list(VALIDATOR.iter_errors(with_configs({"bad": BAD_CONFIGS["mps-mixed"]})))
    # jsonschema reports a false subschema at the parent object (Helm 4 at .../sharing/mps).
    assert [list(e.absolute_path)[5:] for e in errors] == [["sharing"]]
    assert "'replicas': 2" in errors[0].message


def test_mps_and_time_slicing_together_are_refused():
    cfg = {"version": "v1", "sharing": {
        "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]},
        "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    assert list(VALIDATOR.iter_errors(with_configs({"both": cfg})))


@pytest.mark.parametrize("devices, ok", [
    # NVIDIA/k8s-device-plugin api/config/v1/replicas_test.go TestUnmarshalReplicatedDevices
    ("all", True), (2, True), ([0], True), (["0:0"], True),
    (["MIG-GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5/0/0"], True),
    ("", False), ("not-all", False), (-2, False), ([-1], False), (["-1"], False),
    (["MIG-GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5"], False),
])
def test_devices_forms(devices, ok):
    cfg = {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 2, "devices": devices}]}}}
    assert (list(VALIDATOR.iter_errors(with_configs({"c": cfg}))) == []) is ok
