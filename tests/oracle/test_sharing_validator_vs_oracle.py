"""The project's device-plugin config validator (gpuvalues.planners.deviceplugin, through belief.py)
compared with the device plugin itself on generated configs and mutations: the project
must never accept what upstream refuses; where the project is deliberately stricter
(upstream ignores unknown fields), the case says so."""
from __future__ import annotations

import copy
import itertools

import pytest
import yaml

from tests.oracle import belief
from tests.oracle import oraclelib as ol

_HW = {"gpu": "A100-SXM4-80GB", "count": 2}
_ENV = {"MPS_ROOT": "/run/nvidia/mps"}   # as the chart's DaemonSet sets it


def _base(kind="timeSlicing", replicas=2, strategy="none"):
    return {"version": "v1", "flags": {"migStrategy": strategy},
            "sharing": {kind: {"renameByDefault": True,
                               "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}}


def _mut(cfg, f):
    c = copy.deepcopy(cfg)
    f(c)
    return c


_REJECTED_UPSTREAM = [
    ("replicas-1", _base(replicas=1)),
    ("replicas-0", _base(replicas=0)),
    ("bad-strategy", _base(strategy="bogus")),
    ("bad-version", _mut(_base(), lambda c: c.update({"version": "v2"}))),
    ("no-resources", _mut(_base(), lambda c: c["sharing"]["timeSlicing"].update({"resources": []}))),
    ("no-replicas", _mut(_base(), lambda c: c["sharing"]["timeSlicing"]["resources"][0].pop("replicas"))),
    ("no-name", _mut(_base(), lambda c: c["sharing"]["timeSlicing"]["resources"][0].pop("name"))),
    ("devices-some", _mut(_base(), lambda c: c["sharing"]["timeSlicing"]["resources"][0].update({"devices": "some"}))),
    ("devices-0", _mut(_base(), lambda c: c["sharing"]["timeSlicing"]["resources"][0].update({"devices": 0}))),
    ("devices-bad-ref", _mut(_base(), lambda c: c["sharing"]["timeSlicing"]["resources"][0].update({"devices": ["x"]}))),
    ("mps-mixed", _base(kind="mps", strategy="mixed")),
    ("replicas-string", _base(replicas="two")),
]


@pytest.mark.parametrize("cfg", [pytest.param(c, id=i) for i, c in _REJECTED_UPSTREAM])
def test_project_rejects_what_the_device_plugin_rejects(cfg):
    v = ol.device_plugin(yaml.safe_dump(cfg), _HW, plugin_env=_ENV, gfd=False)
    assert not v.ok, f"negative control: the device plugin accepted {cfg}"
    got = belief.validate_device_plugin_config(cfg)
    assert not got["ok"], f"the project accepts a config the device plugin rejects ({v.error}): {cfg}"


def _generated_valid():
    out = []
    for kind, replicas, renamed, fail, strategy in itertools.product(
            ("timeSlicing", "mps"), (2, 4, 10), (True, False), (True, False), ("none", "single")):
        cfg = _base(kind, replicas, strategy)
        cfg["sharing"][kind].update({"renameByDefault": renamed, "failRequestsGreaterThanOne": fail})
        out.append(pytest.param(cfg, id=f"{kind}-x{replicas}-renamed{renamed}-fail{fail}-{strategy}"))
    for strategy in ("none", "single", "mixed"):
        out.append(pytest.param({"version": "v1", "flags": {"migStrategy": strategy}}, id=f"plain-{strategy}"))
    return out


@pytest.mark.parametrize("cfg", _generated_valid())
def test_project_and_device_plugin_agree_on_generated_configs(cfg):
    strategy = cfg["flags"]["migStrategy"]
    hw = _HW if strategy == "none" else ol.hardware_for_gpu("A100-80GB", 2, {"0": ["1g.10gb"] * 7, "1": ["1g.10gb"] * 7})
    v = ol.device_plugin(yaml.safe_dump(cfg), hw, plugin_env=_ENV, gfd=False)
    got = belief.validate_device_plugin_config(cfg)
    assert v.ok == got["ok"], (f"device plugin {'accepts' if v.ok else 'rejects: ' + v.error}; "
                               f"project {'accepts' if got['ok'] else 'rejects: ' + got['error']}; {cfg}")


def test_project_is_stricter_on_unknown_fields():
    """Upstream drops unknown fields (sigs.k8s.io/yaml, non-strict); the project refuses
    them so a typo cannot silently turn sharing off."""
    cfg = _mut(_base(), lambda c: c["sharing"]["timeSlicing"].update({"renameByDefualt": True}))
    assert ol.device_plugin(yaml.safe_dump(cfg), _HW, gfd=False).ok
    assert not belief.validate_device_plugin_config(cfg)["ok"]


# Flags whose upstream meaning moved with the pin (v0.17.4 -> v0.19.1): GFD's sleepInterval
# takes "infinite" (api/config/v1/duration.go), gdrcopyEnabled is a config flag
# (api/config/v1/flags.go CommandLineFlags).
_FLAG_CASES = [
    ("sleep-infinite", {"gfd": {"sleepInterval": "infinite"}}),
    ("sleep-90s", {"gfd": {"sleepInterval": "90s"}}),
    ("sleep-nanoseconds", {"gfd": {"sleepInterval": 60_000_000_000}}),
    ("sleep-forever", {"gfd": {"sleepInterval": "forever"}}),
    ("gdrcopy-off", {"gdrcopyEnabled": False}),
    ("gdrcopy-string", {"gdrcopyEnabled": "yes"}),
    ("node-feature-api-off", {"useNodeFeatureAPI": False}),
]


@pytest.mark.parametrize("flags", [pytest.param(f, id=i) for i, f in _FLAG_CASES])
def test_project_and_device_plugin_agree_on_flags(flags):
    cfg = {"version": "v1", "flags": {"migStrategy": "none", **flags}}
    v = ol.device_plugin(yaml.safe_dump(cfg), _HW, plugin_env=_ENV, gfd=False)
    got = belief.validate_device_plugin_config(cfg)
    assert v.ok == got["ok"], (f"device plugin {'accepts' if v.ok else 'rejects: ' + v.error}; "
                               f"project {'accepts' if got['ok'] else 'rejects: ' + got['error']}; {cfg}")


def test_negative_control_device_plugin_rejects_a_bad_sleep_interval():
    cfg = {"version": "v1", "flags": {"gfd": {"sleepInterval": "forever"}}}
    assert not ol.device_plugin(yaml.safe_dump(cfg), _HW, gfd=False).ok
