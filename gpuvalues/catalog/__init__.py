"""GPU catalog: models, MIG profiles and placement rules, read from data files.

Each model is one YAML file in `gpuvalues/catalog/gpus/` that cites its sources
(`gpus/index.json` is a copy of their data for a fast start: `write_index()` after an
edit; tests/unit/test_catalog.py checks it, and an edited file is read itself). Public API:

- `get_gpu(name)` -> `GpuModel`: accepts the catalog name (`A100-80GB`), any alias, and
  product names as nvidia-smi and GPU feature discovery print them (`NVIDIA A100-SXM4-80GB`,
  `NVIDIA-A100-SXM4-80GB`), case-insensitively, also with a `-SHARED` or `-MIG-<profile>`
  suffix (GFD labels under sharing / the single MIG strategy). Unknown -> `CatalogError`
  listing the known models.
- `known_gpus()` -> sorted catalog names; `all_gpus()` -> every `GpuModel`.
- `GpuModel.profile(name)` -> `MigProfile` (or `CatalogError` listing this GPU's profiles).
- `parse_profile_name(name)` -> `(c, g, gb, attributes, negative_attributes)` with go-nvlib's syntax.
- `mig_resource_name(profile)` -> the device plugin's resource (`nvidia.com/mig-1g.10gb.me`).
- `gfd_product_label(name)` -> GFD's `nvidia.com/gpu.product` value for an nvidia-smi name.

Memory comes in two kinds. `memory_gb` is the nominal size in the name (`1g.18gb` -> 18).
`memory_gib` is the usable memory as NVIDIA's tools report it: per profile the "Memory GiB"
column of `nvidia-smi mig -lgip`, per GPU `nvidia-smi`'s memory.total (MiB / 1024). Fit models
against `memory_gib` (H200 `1g.18gb` holds 16.00 GiB: a 17.5 GB model does not fit). Values a
data file does not publish are derived conservatively (`memory_gib_status == "derived"`):
see `_derive_profile_gib` and `_derive_gpu_gib`.
"""
from __future__ import annotations

import binascii
import functools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from gpuvalues.errors import CatalogError
from gpuvalues.yamlio.loader import parse_yaml

DATA_DIR = Path(__file__).resolve().parent / "gpus"
# A JSON copy of every data file's parsed document (write_index), so a start-up need not
# parse them all; the YAML files stay the one source (see _documents).
INDEX = "index.json"


# Model sizes come in decimal GB (10^9 bytes, model cards); GPUs report GiB (2^30 bytes).
GIB_PER_GB = 1e9 / 2**30

@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile: `starts` are the allowed first memory slices (`-lgipp`)."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: float
    max_instances: int
    starts: tuple[int, ...]
    id: int | None = None
    memory_gib: float = 0.0
    memory_gib_status: str = "derived"   # published = read from `nvidia-smi mig -lgip` output
    aliases: tuple[str, ...] = ()        # names other driver branches print for this profile

    @property
    def attributes(self) -> tuple[str, ...]:
        """`+` attributes (`me`, `gfx`, `me.all`), empty for a base profile."""
        return parse_profile_name(self.name)[3]

    @property
    def negative_attributes(self) -> tuple[str, ...]:
        """`-` attributes (`me` in `1g.24gb-me`)."""
        return parse_profile_name(self.name)[4]

    @property
    def is_base(self) -> bool:
        """True for the plain profile (no `+me`, `+gfx`, `-me` ...)."""
        return not self.attributes and not self.negative_attributes

    @property
    def resource_name(self) -> str:
        """The device plugin's mixed-strategy resource (`nvidia.com/mig-1g.10gb.me`)."""
        return mig_resource_name(self.name)

    def slots(self, start: int) -> range:
        """Memory slices an instance placed at `start` occupies."""
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class ProfileLimit:
    """At most `max` instances in total among `profiles` on one GPU (e.g. media engines)."""

    name: str
    max: int
    profiles: tuple[str, ...]


@dataclass(frozen=True)
class MigGeometry:
    """A GPU's MIG geometry: slice counts, profiles, shared-resource limits and how sure the placement data is."""

    compute_slices: int
    memory_slices: int
    profiles: tuple[MigProfile, ...]
    limits: tuple[ProfileLimit, ...]
    placement_status: str
    placement_note: str


@dataclass(frozen=True)
class GpuModel:
    """One GPU model; `mig` is None when the GPU has no MIG (share it by time-slicing/MPS)."""

    name: str
    description: str
    architecture: str
    compute_capability: str
    memory_gb: float
    aliases: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    mig: MigGeometry | None
    source: str
    memory_gib: float = 0.0
    memory_gib_status: str = "derived"   # published = nvidia-smi memory.total in a cited output

    @property
    def placement_source(self) -> str | None:
        """"published" when the placement data is `nvidia-smi mig -lgipp` output, "derived" when it
        follows a stated rule, None without MIG."""
        return self.mig.placement_status if self.mig else None

    @property
    def placement_warning(self) -> str | None:
        """The warning a plan carries for a GPU whose MIG placements are derived, else None."""
        if self.placement_source != "derived":
            return None
        return (f"{self.name}: MIG placements are derived, not read from published `nvidia-smi mig -lgipp` "
                "output; check the plan's layouts on a real GPU before relying on them "
                f"({Path(self.source).name}: placement_note)")

    @property
    def mig_capable(self) -> bool:
        """True when the GPU supports MIG."""
        return self.mig is not None

    @property
    def geometry(self) -> MigGeometry:
        """`mig` for code that only runs on a MIG GPU (a CatalogError on one without)."""
        if self.mig is None:
            raise CatalogError(f"{self.name} has no MIG (use time-slicing or MPS, or a MIG-capable GPU)")
        return self.mig

    @property
    def profiles(self) -> tuple[MigProfile, ...]:
        """Every MIG profile of this GPU (empty without MIG)."""
        return self.mig.profiles if self.mig else ()

    @property
    def profile_names(self) -> tuple[str, ...]:
        """The names of `profiles`, in catalog order."""
        return tuple(p.name for p in self.profiles)

    @property
    def compute_capability_tuple(self) -> tuple[int, int]:
        """`compute_capability` as (major, minor), e.g. (8, 0)."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def full_profile(self) -> MigProfile | None:
        """The whole-GPU MIG profile (7g.80gb), or None without MIG."""
        if not self.mig:
            return None
        full = [p for p in self.profiles if p.is_base and p.memory_slices == self.mig.memory_slices]
        return full[0] if full else None

    @property
    def device_filter(self) -> tuple[str, ...]:
        """PCI IDs as mig-parted's `device-filter` wants them (`0x20B210DE`)."""
        return tuple(f"0x{i[2:].upper()}10DE" for i in self.pci_device_ids)

    def profile(self, name: str) -> MigProfile:
        """The profile called `name` (or a driver-branch alias of it, e.g. GB200 `1g.24gb` for
        `1g.23gb`) on this GPU, or a `CatalogError` listing the valid ones."""
        for p in self.profiles:
            if p.name == name:
                return p
        for p in self.profiles:
            if name in p.aliases:
                return p
        if not self.mig:
            raise CatalogError(f"{self.name} has no MIG; profile {name!r} does not exist on it "
                               "(use time-slicing or MPS, or a MIG-capable GPU)")
        raise CatalogError(f"profile {name!r} does not exist on {self.name}; "
                           f"its profiles are: {', '.join(self.profile_names)}")


_PROFILE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:([+-])(.+))?$")
_ATTR_RE = re.compile(r"^[A-Za-z][A-Za-z0-9.]*$")


def parse_profile_name(name: str) -> tuple[int, int, int, tuple[str, ...], tuple[str, ...]]:
    """Parse `[<c>c.]<g>g.<gb>gb[+attr,...|-attr,...]` as go-nvlib's `parseMigProfile` does.

    Raises `CatalogError` for a malformed name (empty, both `+` and `-`, non-unique or
    malformed attributes).
    """
    if not isinstance(name, str) or not name:
        raise CatalogError(f"MIG profile name must be a non-empty string, got {name!r}")
    if "+" in name and "-" in name:
        raise CatalogError(f"MIG profile {name!r} contains both '+' and '-' attributes")
    m = _PROFILE_RE.match(name)
    if not m:
        raise CatalogError(f"MIG profile {name!r} is not of the form [<c>c.]<g>g.<gb>gb[+attr|-attr], e.g. 1g.10gb")
    c = int(m.group(1)) if m.group(1) else int(m.group(2))
    attrs: tuple[str, ...] = ()
    if m.group(5) is not None:
        attrs = tuple(m.group(5).split(","))
        for a in attrs:
            if not _ATTR_RE.match(a) or a.endswith("."):
                raise CatalogError(f"MIG profile {name!r} has a malformed attribute {a!r}")
        if len(set(attrs)) != len(attrs):
            raise CatalogError(f"MIG profile {name!r} repeats an attribute")
    pos = attrs if m.group(4) == "+" else ()
    neg = attrs if m.group(4) == "-" else ()
    return c, int(m.group(2)), int(m.group(3)), pos, neg


def mig_resource_name(profile: str) -> str:
    """The device plugin's mixed-strategy resource for a MIG profile name: `+` becomes `.`
    (`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`; k8s-device-plugin internal/rm/rm.go)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def _normalize(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", str(name).strip()).upper()
    return key


def gfd_product_label(name: str) -> str:
    """GPU feature discovery's `nvidia.com/gpu.product` value for a product name as
    nvidia-smi prints it: keep [A-Za-z0-9-_. ], then join words with '-'
    (`NVIDIA A100-SXM4-80GB` -> `NVIDIA-A100-SXM4-80GB`)."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return "-".join(kept.split())


def _strip_gfd(key: str) -> str:
    """Drop GFD decorations: NVIDIA- prefix, -SHARED suffix, -MIG-<profile> suffix."""
    if key.endswith("-SHARED"):
        key = key[: -len("-SHARED")]
    key = re.sub(r"-MIG-[0-9A-Z.+\-]+$", "", key)
    if key.startswith("NVIDIA-"):
        key = key[len("NVIDIA-"):]
    return key


def _req(doc: Mapping[str, Any], key: str, source: str, field: str | None = None) -> Any:
    if not isinstance(doc, Mapping) or key not in doc:
        raise CatalogError(f"missing required key {key!r}", source=source, field=field or key)
    return doc[key]


# Where no nvidia-smi output is cited, whole-GPU memory.total is the nominal GB times the lowest
# ratio among the GPUs whose output we cite (L4: 23034 MiB of 24 GB, L40S: 46068 MiB of 48 GB).
GPU_GIB_PER_NOMINAL_GB = 0.93


def _floor2(x: float) -> float:
    return math.floor(x * 100 + 1e-6) / 100


def _gib_ratios(models: list["GpuModel"]) -> dict[tuple[str, float], float]:
    """Lowest published `-lgip` GiB / nominal GB over the whole catalog, per memory fraction
    (`("frac", slices / GPU slices)`) and per slice count (`("slices", n)`), e.g. fraction 1/8 ->
    0.869 (GB200 1g.23gb: 20.00 GiB, gpu-operator#1303)."""
    ratios: dict[tuple[str, float], float] = {}
    for g in models:
        if g.mig is None:
            continue
        for p in g.profiles:
            if p.memory_gib_status == "published":
                for key in (("frac", p.memory_slices / g.mig.memory_slices), ("slices", p.memory_slices)):
                    ratios[key] = min(ratios.get(key, 1.0), p.memory_gib / p.memory_gb)
    return ratios


def _derive_profile_gib(profiles: tuple[MigProfile, ...], total_slices: int,
                        ratios: Mapping[tuple[str, float], float]) -> tuple[MigProfile, ...]:
    """Fill `memory_gib` of profiles without a published value, conservatively.

    With published rows on the same GPU: linear in memory slices from the largest published
    row of at most as many slices (usable memory per slice grows with instance size in every
    published table, e.g. H200 16.00 / 32.25 / 69.50 / 139.75 GiB for 1/2/4/8 slices, so the
    scaled value is a lower estimate). Without: the nominal GB times the catalog's lowest
    published ratio for the same memory fraction or slice count (`_gib_ratios`; 0.85 if none).
    Either way never above a published row of at least as many slices.
    """
    published = [p for p in profiles if p.memory_gib_status == "published"]
    out = []
    for p in profiles:
        if p.memory_gib_status == "published":
            out.append(p)
            continue
        base = [q for q in published if q.memory_slices <= p.memory_slices]
        if base:
            size = max(q.memory_slices for q in base)
            q = min((r for r in base if r.memory_slices == size), key=lambda r: r.memory_gib)
            gib = q.memory_gib * p.memory_slices / q.memory_slices
        else:
            gib = p.memory_gb * min(ratios.get(("frac", p.memory_slices / total_slices), 0.85),
                                    ratios.get(("slices", p.memory_slices), 0.85))
        # never above a published instance of at least this size (drivers reserve more on
        # larger instances in some tables: H100 NVL 3g 46.12 x 2 > 7g 92.62)
        gib = min([gib, *(q.memory_gib for q in published if q.memory_slices >= p.memory_slices)])
        out.append(replace(p, memory_gib=_floor2(gib)))
    return tuple(out)


def _derive_gpu_gib(memory_gb: float, mig: MigGeometry | None) -> float:
    """Usable whole-GPU memory when no nvidia-smi output is cited: the nominal GB times
    GPU_GIB_PER_NOMINAL_GB, but never below the full MIG profile (MIG reserves memory)."""
    gib = memory_gb * GPU_GIB_PER_NOMINAL_GB
    if mig:
        full = [p.memory_gib for p in mig.profiles if p.memory_slices == mig.memory_slices]
        gib = max([gib, *full])
    return _floor2(gib)


def _derive(gpu: "GpuModel", ratios: Mapping[tuple[str, float], float]) -> "GpuModel":
    """`gpu` with every unpublished `memory_gib` derived."""
    mig = gpu.mig
    if mig:
        mig = replace(mig, profiles=_derive_profile_gib(mig.profiles, mig.memory_slices, ratios))
    gib = gpu.memory_gib if gpu.memory_gib_status == "published" else _derive_gpu_gib(gpu.memory_gb, mig)
    return replace(gpu, mig=mig, memory_gib=gib)


def _fingerprint(raw: bytes) -> str:
    return f"{len(raw)}:{binascii.crc32(raw):08x}"


def _documents() -> list[tuple[Path, Any]]:
    """(path, parsed document) of every data file. Parsing the 23 files takes about 9 ms
    of every CLI start; a file whose bytes still match its entry in the index is taken
    from there instead, any other (edited, new, no index) is parsed."""
    try:
        index = json.loads((DATA_DIR / INDEX).read_text())
    except (OSError, ValueError):
        index = {}
    out = []
    for path in sorted(DATA_DIR.glob("*.yaml")):
        raw = path.read_bytes()
        hit = index.get(path.name)
        if isinstance(hit, dict) and hit.get("source") == _fingerprint(raw):
            out.append((path, hit["data"]))
        else:
            out.append((path, parse_yaml(raw.decode(), source=str(path), error=CatalogError)))
    return out


def index_text() -> str:
    """The index of the data files as they are now (tests/unit/test_catalog.py checks
    that the committed one is; write_index() rewrites it)."""
    entries = {path.name: {"source": _fingerprint(path.read_bytes()),
                           "data": parse_yaml(path.read_text(), source=str(path),
                                              error=CatalogError)}
               for path in sorted(DATA_DIR.glob("*.yaml"))}
    return json.dumps(entries, indent=1) + "\n"


def write_index() -> None:
    """Rewrite gpus/index.json after editing a data file."""
    (DATA_DIR / INDEX).write_text(index_text())


def _load_file(path: Path, doc: Any) -> GpuModel:
    src = str(path)
    mig_doc = _req(doc, "mig", src)
    mig = None
    if mig_doc is not None:
        profiles = []
        for i, p in enumerate(_req(mig_doc, "profiles", src, "mig.profiles")):
            field = f"mig.profiles[{i}]"
            prof = MigProfile(
                name=str(_req(p, "name", src, field + ".name")),
                compute_slices=int(_req(p, "compute_slices", src, field)),
                memory_slices=int(_req(p, "memory_slices", src, field)),
                memory_gb=float(_req(p, "memory_gb", src, field)),
                max_instances=int(_req(p, "max_instances", src, field)),
                starts=tuple(int(s) for s in _req(p, "starts", src, field)),
                id=p.get("id"),
                memory_gib=float(p.get("memory_gib") or 0.0),
                memory_gib_status="published" if p.get("memory_gib") else "derived",
                aliases=tuple(str(a) for a in p.get("aliases") or ()),
            )
            for a in prof.aliases:
                parse_profile_name(a)
            parse_profile_name(prof.name)
            total = int(mig_doc["memory_slices"])
            bad = [s for s in prof.starts if s < 0 or s + prof.memory_slices > total]
            if bad or not prof.starts or prof.max_instances < 1:
                raise CatalogError(f"profile {prof.name}: starts {list(prof.starts)} x size "
                                   f"{prof.memory_slices} must lie within 0..{total - 1}, max_instances >= 1",
                                   source=src, field=field)
            profiles.append(prof)
        names = {p.name for p in profiles}
        limits = []
        for j, lim in enumerate(mig_doc.get("limits") or []):
            pl = ProfileLimit(str(lim["name"]), int(lim["max"]), tuple(str(x) for x in lim["profiles"]))
            unknown = set(pl.profiles) - names
            if unknown:
                raise CatalogError(f"limit {pl.name} names unknown profiles {sorted(unknown)}",
                                   source=src, field=f"mig.limits[{j}]")
            limits.append(pl)
        mig = MigGeometry(
            compute_slices=int(_req(mig_doc, "compute_slices", src, "mig.compute_slices")),
            memory_slices=int(_req(mig_doc, "memory_slices", src, "mig.memory_slices")),
            profiles=tuple(profiles), limits=tuple(limits),
            placement_status=str(mig_doc.get("placement_status", "derived")),
            placement_note=str(mig_doc.get("placement_note", "")),
        )
    gpu_gib = doc.get("memory_gib")
    return GpuModel(
        memory_gib=float(gpu_gib or 0.0),
        memory_gib_status="published" if gpu_gib else "derived",
        name=str(_req(doc, "name", src)),
        description=str(doc.get("description", "")),
        architecture=str(doc.get("architecture", "")),
        compute_capability=str(_req(doc, "compute_capability", src)),
        memory_gb=float(_req(doc, "memory_gb", src)),
        aliases=tuple(str(a) for a in doc.get("aliases") or ()),
        pci_device_ids=tuple(str(i) for i in doc.get("pci_device_ids") or ()),
        mig=mig,
        source=src,
    )


@functools.lru_cache(maxsize=None)
def _catalog() -> tuple[dict[str, GpuModel], dict[str, str]]:
    models: dict[str, GpuModel] = {}
    index: dict[str, str] = {}
    loaded = [(path, _load_file(path, doc)) for path, doc in _documents()]
    ratios = _gib_ratios([g for _, g in loaded])
    for path, gpu in loaded:
        gpu = _derive(gpu, ratios)
        if gpu.name in models:
            raise CatalogError(f"duplicate GPU name {gpu.name!r}", source=str(path), field="name")
        models[gpu.name] = gpu
        for alias in (gpu.name, *gpu.aliases):
            for key in {_normalize(alias), _strip_gfd(_normalize(alias))}:
                owner = index.setdefault(key, gpu.name)
                if owner != gpu.name:
                    raise CatalogError(f"alias {alias!r} also belongs to {owner}", source=str(path),
                                       field="aliases")
    return models, index


def known_gpus() -> list[str]:
    """Catalog names of every known GPU model, sorted."""
    return sorted(_catalog()[0])


def all_gpus() -> list[GpuModel]:
    """Every `GpuModel` in the catalog, sorted by name."""
    models = _catalog()[0]
    return [models[n] for n in sorted(models)]


def get_gpu(name: str | GpuModel) -> GpuModel:
    """Look a GPU model up by catalog name, alias, nvidia-smi name or GFD product label."""
    if isinstance(name, GpuModel):
        return name
    models, index = _catalog()
    key = _normalize(name)
    hit = index.get(key) or index.get(_strip_gfd(key))
    if hit is None:
        raise CatalogError(f"unknown GPU model {name!r}; known models: {', '.join(known_gpus())} "
                           "(aliases such as 'NVIDIA A100-SXM4-80GB' or 'NVIDIA-H100-80GB-HBM3' work too)")
    return models[hit]
