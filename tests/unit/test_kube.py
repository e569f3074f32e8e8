"""Shared low-level helpers: Kubernetes syntax (gpuvalues.kube) and plain YAML data
(gpuvalues.io.files). Expected values come from the Kubernetes docs: "Labels and Selectors"
(syntax and character set) and "Resource Management for Pods and Containers" /
apimachinery quantity.go (suffixes n, u, m, k..E, Ki..Ei, exponents)."""
from __future__ import annotations

import os
import stat
from fractions import Fraction

import pytest

from gpuvalues import kube
from gpuvalues.yamlio.loader import parse_yaml
from gpuvalues.errors import CapacityError, GpuValuesError, InventoryError
from gpuvalues.io import files
from gpuvalues.planners.autoscaling import hpa
from gpuvalues.planners.scheduling import inventory


@pytest.mark.parametrize("text, value", [
    ("700m", Fraction(7, 10)), ("1", 1), ("1.5", Fraction(3, 2)), ("2k", 2000), ("64Gi", 64 * 2**30),
    ("1e3", 1000), ("5e-1", Fraction(1, 2)), ("1u", Fraction(1, 10**6)), ("3n", Fraction(3, 10**9)),
    (".5", Fraction(1, 2)), (8, 8), (0.25, Fraction(1, 4)),
])
def test_quantities(text, value):
    assert kube.parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "Gi", "5 Gi", "1Q", "1mi", True, float("inf"), float("nan")])
def test_bad_quantities_are_user_errors_naming_the_field(bad):
    with pytest.raises(CapacityError) as info:
        kube.parse_quantity(bad, field="metrics")
    assert info.value.field == "metrics"


def test_one_quantity_parser_serves_hpa_and_inventory():
    assert hpa.parse_quantity is kube.parse_quantity and inventory.parse_quantity is kube.parse_quantity
    assert hpa.milli_value("1u") == 1  # MilliValue rounds up, as Kubernetes does
    with pytest.raises(InventoryError):
        inventory.resource_amount("nvidia.com/gpu", "1.5")
    with pytest.raises(InventoryError):
        inventory.resource_amount("memory", "-1Gi")


@pytest.mark.parametrize("value, ok", [
    ("", True), ("a", True), ("A-1_b.c", True), ("x" * 63, True), ("x" * 64, False), ("-a", False),
    ("a-", False), ("a b", False), ("a/b", False), (None, False), (3, False),
])
def test_label_values(value, ok):
    assert kube.is_label_value(value) is ok


@pytest.mark.parametrize("key, ok", [
    ("app", True), ("nvidia.com/gpu.product", True), ("topology.gpu-inference.io/nvswitch", True),
    ("Example.com/x", False), ("/x", False), ("a/b/c", False), ("example.com/", False),
    ("example.com/" + "n" * 63, True), ("example.com/" + "n" * 64, False), ("a" * 254 + "/x", False),
    ("-x", False), ("", False),
])
def test_label_keys(key, ok):
    assert kube.is_label_key(key) is ok


@pytest.mark.parametrize("name, ok", [
    ("gpu", True), ("mig-1g.10gb", True), ("a.b-c", True), ("A", False), ("a_b", False),
    ("a.", False), ("." , False), ("a" * 253, True), ("a" * 254, False),
])
def test_dns_subdomains(name, ok):
    assert kube.is_dns_subdomain(name) is ok


def test_parse_yaml_places_errors_with_the_callers_class():
    assert parse_yaml("a: 1\n") == {"a": 1}
    assert parse_yaml("---\na: 1\n---\n---\nb: 2\n", all_documents=True) == [{"a": 1}, {"b": 2}]
    with pytest.raises(InventoryError) as info:
        parse_yaml("a: [1\n", source="inv.yaml", error=InventoryError)
    err = info.value
    assert (err.source, err.line, err.column) == ("inv.yaml", 2, 1)
    # PyYAML's own wording (the fast reader's error is re-parsed by the pure-Python one)
    assert str(err) == "inv.yaml:2:1: invalid YAML: expected ',' or ']', but got '<stream end>'"
    with pytest.raises(GpuValuesError):
        parse_yaml("\tkey: 1\n")


def test_write_atomic_text_and_bytes(tmp_path):
    files.write_atomic(tmp_path / "a.txt", "héllo\n")
    files.write_atomic(tmp_path / "b.png", b"\x89PNG\x00\xff")
    assert (tmp_path / "a.txt").read_text() == "héllo\n"
    assert (tmp_path / "b.png").read_bytes() == b"\x89PNG\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.png"]  # no temp files left


def test_write_atomic_file_modes(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_atomic(tmp_path / "new.yaml", "a: 1\n")
        assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o644  # not mkstemp's 0600
        kept = tmp_path / "kept.yaml"
        kept.write_text("a: 1\n")
        kept.chmod(0o640)
        files.write_atomic(kept, "a: 2\n")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "a: 2\n"
    finally:
        os.umask(old)


@pytest.mark.parametrize("version, minor", [("1.34.0", 34), ("v1.29", 29), ("1.37", 37), ("1.100.2", 100)])
def test_kube_minor(version, minor):
    assert kube.kube_minor(version) == minor


@pytest.mark.parametrize("bad", ["abc", "1", "2.0", "1.x", "1.34.0.1", "", "1.34-rc1"])
def test_bad_kube_versions_are_user_errors(bad):
    with pytest.raises(GpuValuesError, match="fix --kube-version"):
        kube.kube_minor(bad)
