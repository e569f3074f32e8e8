"""Catalog: every data file loads, cites its sources, and agrees with NVIDIA's own configs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuvalues import catalog
from gpuvalues.errors import CatalogError, GpuValuesError

DATA = Path(__file__).parent / "data"
OPERATOR = yaml.safe_load((DATA / "operator_mig_configs.yaml").read_text())

# The required models (by catalog name).
REQUIRED = ["A100-40GB", "A100-80GB", "A30", "H100-80GB-SXM", "H100-80GB-PCIe", "H100-NVL", "H100-96GB",
            "H200-141GB", "H200-NVL", "GH200-144GB", "B200", "GB200", "B300", "RTX-PRO-6000"]


def test_required_models_present():
    assert set(REQUIRED) <= set(catalog.known_gpus())


@pytest.mark.parametrize("alias, expected", [
    ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),          # GFD label
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"),          # nvidia-smi name
    ("A100-80GB", "A100-80GB"),
    ("a100-80gb", "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA-H100-80GB-HBM3", "H100-80GB-SXM"),
    ("NVIDIA H100 PCIe", "H100-80GB-PCIe"),
    ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA GH200 480GB", "H100-96GB"),
    ("NVIDIA-GH200-144G-HBM3e", "GH200-144GB"),
    ("NVIDIA-B200", "B200"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000"),
    ("NVIDIA-A100-SXM4-40GB-SHARED", "A100-40GB"),     # GFD under time-slicing
    ("A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"),        # GFD single strategy product
    ("Tesla-T4", "T4"),
])
def test_aliases(alias, expected):
    assert catalog.get_gpu(alias).name == expected


def test_unknown_gpu_lists_known_models():
    with pytest.raises(CatalogError) as exc:
        catalog.get_gpu("NVIDIA-K80")
    msg = str(exc.value)
    assert "unknown GPU model 'NVIDIA-K80'" in msg
    for name in REQUIRED:
        assert name in msg
    assert isinstance(exc.value, GpuValuesError) and isinstance(exc.value, ValueError)


def test_unknown_profile_lists_profiles():
    with pytest.raises(CatalogError, match=r"profile '3g.20gb' does not exist on A100-80GB; its profiles are: 1g.10gb"):
        catalog.get_gpu("A100-80GB").profile("3g.20gb")


@pytest.mark.parametrize("gpu", catalog.all_gpus(), ids=lambda g: g.name)
def test_data_file_consistent(gpu):
    text = Path(gpu.source).read_text()
    assert "# Sources" in text and "profiles" in text and "placements" in text
    if gpu.mig is None:
        return
    mig = gpu.mig
    assert mig.placement_status in {"published", "derived"}
    if mig.placement_status == "derived":
        assert len(mig.placement_note) > 40  # the derived rule is stated
    full = gpu.full_profile
    assert full is not None and full.compute_slices == mig.compute_slices
    for p in gpu.profiles:
        c, g, gb, _, _ = catalog.parse_profile_name(p.name)
        assert g == p.compute_slices and gb == p.memory_gb  # name agrees with the fields
        # memory in the name is the memory-slice fraction of the full profile (rounded)
        assert abs(p.memory_gb - full.memory_gb * p.memory_slices / mig.memory_slices) <= 1.0, p.name
        # a start is a multiple of the size on every published MIG table
        assert all(s % p.memory_slices == 0 or p.memory_slices == 1 for s in p.starts)
    for pid in gpu.pci_device_ids:
        assert pid.startswith("0x") and len(pid) == 6


def _by_device_id():
    out = {}
    for gpu in catalog.all_gpus():
        for f in gpu.device_filter:
            out[f] = gpu.name
    return out


def test_operator_balanced_entries_map_to_catalog():
    ids = _by_device_id()
    for entry in OPERATOR["balanced"]:
        names = {ids[f] for f in entry["device_filter"] if f in ids}
        assert names, entry
        for name in names:
            gpu = catalog.get_gpu(name)
            for prof in entry["mig-devices"]:
                gpu.profile(prof)


def test_operator_all_profile_counts_are_catalog_max():
    for entry in OPERATOR["all_profile"]:
        for name in entry["gpus"]:
            assert catalog.get_gpu(name).profile(entry["profile"]).max_instances == entry["count"], entry


@pytest.mark.parametrize("name, expected", [
    ("1g.10gb", (1, 1, 10, (), ())),
    ("1c.3g.40gb", (1, 3, 40, (), ())),
    ("1g.24gb+me.all", (1, 1, 24, ("me.all",), ())),
    ("1g.24gb-me", (1, 1, 24, (), ("me",))),
    ("1g.5gb+me,gfx", (1, 1, 5, ("me", "gfx"), ())),
])
def test_parse_profile_name(name, expected):
    assert catalog.parse_profile_name(name) == expected


# Invalid forms from go-nvlib pkg/nvlib/device/mig_profile.go parse rules.
@pytest.mark.parametrize("name", ["", "1g", "1g.5", "g.5gb", "1g.5gb+me-gfx", "1g.5gb+me,me", "1g.5gb+",
                                  "1g.5gb+1me", "1g.5gb+.me", "1g.5gb+me.", "1g.5gb+m e", " 1g.5gb"])
def test_parse_profile_name_rejects(name):
    with pytest.raises(CatalogError):
        catalog.parse_profile_name(name)


def test_broken_data_file_names_file_and_field(tmp_path, monkeypatch):
    (tmp_path / "x.yaml").write_text("name: X\ncompute_capability: '8.0'\nmemory_gb: 8\nmig:\n  compute_slices: 7\n"
                                     "  memory_slices: 8\n  profiles:\n    - {name: 1g.1gb, compute_slices: 1}\n")
    monkeypatch.setattr(catalog, "DATA_DIR", tmp_path)
    catalog._catalog.cache_clear()
    try:
        with pytest.raises(CatalogError) as exc:
            catalog.known_gpus()
        assert str(exc.value).startswith(str(tmp_path / "x.yaml") + ": mig.profiles[0]: missing required key")
    finally:
        monkeypatch.undo()
        catalog._catalog.cache_clear()


LGIPP = yaml.safe_load((DATA / "lgipp_outputs.yaml").read_text())


@pytest.mark.parametrize("case", LGIPP, ids=lambda c: c["gpu"])
def test_catalog_matches_real_lgipp_output(case):
    import re
    gpu = catalog.get_gpu(case["gpu"])
    by_id = {p.id: p for p in gpu.profiles if p.id is not None}
    lines = [ln for ln in case["text"].splitlines() if ln.strip()]
    assert lines
    for line in lines:
        m = re.match(r"GPU\s+\d+ Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)$", line.strip())
        assert m, line
        pid, starts, size = int(m.group(1)), tuple(int(s) for s in m.group(2).split(",")), int(m.group(3))
        prof = by_id[pid]
        assert (prof.starts, prof.memory_slices) == (starts, size), (prof.name, line)
    assert gpu.mig.placement_status == "published"


LGIP = yaml.safe_load((DATA / "lgip_memory.yaml").read_text())


@pytest.mark.parametrize("case", LGIP["profiles"], ids=lambda c: c["gpu"])
def test_usable_memory_matches_real_lgip_output(case):
    gpu = catalog.get_gpu(case["gpu"])
    for name, (gib, pid) in case["rows"].items():
        prof = gpu.profile(name)
        assert (prof.memory_gib, prof.id, prof.memory_gib_status) == (gib, pid, "published"), name


@pytest.mark.parametrize("name, mib", sorted(LGIP["gpus"].items()))
def test_whole_gpu_memory_is_nvidia_smi_total(name, mib):
    gpu = catalog.get_gpu(name)
    assert gpu.memory_gib_status == "published"
    assert abs(gpu.memory_gib - mib / 1024) < 0.005


def test_h200_1g_holds_16_gib_and_a_17_5_gb_model_does_not_fit():
    prof = catalog.get_gpu("H200").profile("1g.18gb")
    assert prof.memory_gib == 16.00
    assert 17.5e9 / 2**30 > prof.memory_gib          # 16.30 GiB does not fit
    assert 17.0e9 / 2**30 < prof.memory_gib          # 15.83 GiB does (the check can pass)


@pytest.mark.parametrize("gpu", catalog.all_gpus(), ids=lambda g: g.name)
def test_derived_memory_is_conservative(gpu):
    # derived values never exceed the nominal size, and grow with the memory slices
    assert 0 < gpu.memory_gib
    if gpu.memory_gib_status == "derived":
        assert gpu.memory_gib <= gpu.memory_gb
    by_slices = sorted(gpu.profiles, key=lambda p: (p.memory_slices, p.memory_gib))
    for a, b in zip(by_slices, by_slices[1:]):
        assert a.memory_gib <= b.memory_gib, (a.name, b.name)
    for p in gpu.profiles:
        assert 0 < p.memory_gib <= p.memory_gb + 0.5 and p.memory_gib <= gpu.memory_gib
        if p.memory_gib_status == "derived":
            assert p.memory_gib <= p.memory_gb


def test_h100_nvl_7g_is_the_published_value_not_twice_3g():
    # derived as 2 x 3g.47gb (46.38) it was 92.76 GiB; a driver prints 92.62 for it
    prof = catalog.get_gpu("H100-NVL").profile("7g.94gb")
    assert (prof.memory_gib_status, prof.memory_gib) == ("published", 92.62)


def test_gb200_driver_branch_names_are_aliases():
    gpu = catalog.get_gpu("GB200")
    for alias, canonical in [("1g.24gb", "1g.23gb"), ("1g.24gb+me", "1g.23gb+me"), ("3g.95gb", "3g.93gb"),
                             ("7g.189gb", "7g.186gb")]:
        assert gpu.profile(alias).name == canonical
    with pytest.raises(CatalogError):
        gpu.profile("3g.96gb")


def test_placement_warning_only_for_derived_placements():
    derived, published = catalog.get_gpu("H200"), catalog.get_gpu("A100-80GB")
    assert derived.placement_source == "derived" and "derived" in derived.placement_warning
    assert published.placement_source == "published" and published.placement_warning is None
    assert catalog.get_gpu("L4").placement_source is None and catalog.get_gpu("L4").placement_warning is None


@pytest.mark.parametrize("alias, expected", [
    ("NVIDIA H20", "H20"), ("NVIDIA H100 SXM5 94GB", "H100-SXM5-94GB"), ("NVIDIA-GB300", "GB300"),
    ("NVIDIA RTX PRO 5000 Blackwell", "RTX-PRO-5000"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", "RTX-PRO-6000"),
])
def test_mig_user_guide_gpus_present(alias, expected):
    # the MIG User Guide's Supported GPUs list (H20, H100 94GB, RTX PRO 5000, RTX PRO 6000 Max-Q, GB300)
    gpu = catalog.get_gpu(alias)
    assert gpu.name == expected and gpu.mig_capable and gpu.placement_source in {"published", "derived"}


def test_the_index_is_the_data_files():
    """gpus/index.json (read at start-up instead of parsing every file) holds each data
    file's document exactly, JSON types and all."""
    assert (catalog.DATA_DIR / catalog.INDEX).read_text() == catalog.index_text(), \
        "a data file changed: python -c 'from gpuvalues import catalog; catalog.write_index()'"
    for path in sorted(catalog.DATA_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert json.loads(json.dumps(doc)) == doc, path


def test_a_data_file_edited_after_the_index_is_read_itself(tmp_path, monkeypatch):
    for path in catalog.DATA_DIR.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    t4 = tmp_path / "t4.yaml"
    t4.write_text(t4.read_text().replace("memory_gb: 16", "memory_gb: 17"))
    monkeypatch.setattr(catalog, "DATA_DIR", tmp_path)
    catalog._catalog.cache_clear()
    try:
        assert catalog.get_gpu("T4").memory_gb == 17
        assert catalog.get_gpu("L4").memory_gb == 24     # the others, from the index
    finally:
        monkeypatch.undo()
        catalog._catalog.cache_clear()


LGIP_OUTPUTS = yaml.safe_load((DATA / "lgip_outputs.yaml").read_text())
_LGIP_ROW = r"\|\s+\d+\s+MIG\s+(\S+)\s+(\d+)\s+\d+/\d+\s+(\d+\.\d+)\s+(?:No|Yes)\s"


def _lgip_rows(text: str) -> list[tuple[str, int, float]]:
    import re
    rows = [re.match(_LGIP_ROW, line.strip()) for line in text.splitlines() if line.strip()]
    assert rows and all(rows), text
    return [(m.group(1), int(m.group(2)), float(m.group(3))) for m in rows]


def _lowest_published() -> dict[str, dict[str, tuple[int, float]]]:
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for case in LGIP_OUTPUTS:
        for name, pid, gib in _lgip_rows(case["text"]):
            prev = out.setdefault(case["gpu"], {}).get(name)
            out[case["gpu"]][name] = (pid, min(gib, prev[1]) if prev else gib)
    return out


def test_every_lgip_output_cites_its_source_and_driver():
    for case in LGIP_OUTPUTS:
        assert case["source"].strip() and case["driver"].strip(), case["gpu"]


@pytest.mark.parametrize("gpu_name", sorted(_lowest_published()))
def test_catalog_memory_is_the_lowest_published_lgip_value(gpu_name):
    """Every profile a cited `-lgip` table prints is published in the catalog at the lowest
    value any table prints (drivers differ), with the table's profile ID."""
    gpu = catalog.get_gpu(gpu_name)
    for name, (pid, gib) in _lowest_published()[gpu_name].items():
        prof = gpu.profile(name)
        assert (prof.memory_gib, prof.id, prof.memory_gib_status) == (gib, pid, "published"), name


@pytest.mark.parametrize("gpu", [g for g in catalog.all_gpus() if g.mig_capable], ids=lambda g: g.name)
def test_derived_memory_is_never_above_a_published_value(gpu):
    # a derived instance is never credited with more than a published one of at least its size
    published = [p for p in gpu.profiles if p.memory_gib_status == "published"]
    for p in gpu.profiles:
        if p.memory_gib_status == "derived":
            for q in published:
                if q.memory_slices >= p.memory_slices:
                    assert p.memory_gib <= q.memory_gib, (p.name, q.name)


def test_the_lowest_value_rule_can_fail():
    # negative control: the comparison above catches a catalog value one step above a table's
    rows = _lowest_published()["A100-80GB"]
    assert rows["7g.80gb"] == (0, 79.00)
    assert catalog.get_gpu("A100-80GB").profile("7g.80gb").memory_gib != 79.25
    with pytest.raises(AssertionError):
        _lgip_rows("|   0  MIG 7g.80gb  zero  1/1  79.00  No |")


def test_derivation_is_capped_by_a_larger_published_row():
    # a derived 4-slice row scaled from a 2-slice one never exceeds a published 8-slice row
    profiles = (
        catalog.MigProfile("1g.20gb", 1, 2, 20, 4, (0, 2, 4, 6), memory_gib=19.9, memory_gib_status="published"),
        catalog.MigProfile("3g.40gb", 3, 4, 40, 2, (0, 4)),
        catalog.MigProfile("7g.80gb", 7, 8, 80, 1, (0,), memory_gib=39.0, memory_gib_status="published"),
    )
    derived = {p.name: p.memory_gib for p in catalog._derive_profile_gib(profiles, 8, {})}
    assert derived["3g.40gb"] == 39.0          # 2 x 19.9 = 39.8 scaled, capped at the 8-slice 39.0
