"""Kubernetes syntax rules every module needs: quantities, label keys and values, DNS names,
versions.

One implementation each, following kubernetes/kubernetes (`apimachinery/pkg/api/resource`
`quantity.go`; `apimachinery/pkg/util/validation/validation.go`). The predicates return
True/False so each caller raises its own error with its own advice.
"""
from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING, Any

from gpuvalues.errors import CapacityError, GpuValuesError

if TYPE_CHECKING:
    from fractions import Fraction

# ---------------------------------------------------------------------------- quantities
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")
_SUFFIX = {  # (numerator, denominator): fractions (and decimal) load only when parsing
    None: (1, 1), "n": (1, 10**9), "u": (1, 10**6), "m": (1, 1000),
    "k": (10**3, 1), "M": (10**6, 1), "G": (10**9, 1), "T": (10**12, 1),
    "P": (10**15, 1), "E": (10**18, 1), "Ki": (2**10, 1), "Mi": (2**20, 1),
    "Gi": (2**30, 1), "Ti": (2**40, 1), "Pi": (2**50, 1), "Ei": (2**60, 1),
}


def parse_quantity(value: Any, field: str | None = None) -> Fraction:
    """The exact value of a Kubernetes Quantity ("700m", "1.5", "2k", "64Gi", "1e3", 70).

    Raises `CapacityError` (a `ValueError`) naming `field` for anything else.
    """
    from fractions import Fraction

    if isinstance(value, bool):
        raise CapacityError(f"{value!r} is not a quantity; write a number like 0.7 or 700m", field=field)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CapacityError(f"{value!r} is not a finite quantity", field=field)
        return Fraction(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise CapacityError(f"{value!r} is not a Kubernetes quantity; write e.g. 700m, 0.7, 5, 2k or 64Gi",
                            field=field)
    number, exponent, suffix = m.groups()
    if exponent:
        return Fraction(number) * Fraction(10) ** int(exponent[1:])
    return Fraction(number) * Fraction(*_SUFFIX[suffix])


# ---------------------------------------------------------------------------- names
# The patterns as text: the JSON Schemas (schemas/*.schema.json, which Helm and the spec
# loader apply) carry these exact strings, tests/unit/test_kube.py holds them to it.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$"
LABEL_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_KEY_PATTERN = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{LABEL_NAME_PATTERN[1:]}"   # IsQualifiedName
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
_LABEL_NAME = re.compile(LABEL_NAME_PATTERN)
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)


def is_dns_subdomain(text: Any) -> bool:
    """RFC 1123 subdomain: <= 253 chars of lowercase dot-separated DNS labels."""
    return isinstance(text, str) and len(text) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(text))


def is_label_value(text: Any) -> bool:
    """A label value: <= 63 chars, alphanumeric at both ends, `-_.` inside (empty is valid)."""
    return isinstance(text, str) and len(text) <= 63 and bool(_LABEL_VALUE.fullmatch(text))


def is_label_key(text: Any) -> bool:
    """A label key: `[prefix/]name`, the prefix a DNS subdomain, the name <= 63 chars."""
    if not isinstance(text, str):
        return False
    prefix, sep, name = text.rpartition("/")
    return (not sep or is_dns_subdomain(prefix)) and bool(_LABEL_NAME.fullmatch(name))


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def node_name_problem(name: Any) -> str | None:
    """Why the API server would refuse `name` as a Node's name, or None. Node names are
    DNS-1123 subdomains (kubernetes/kubernetes `pkg/apis/core/validation/validation.go`
    `ValidateNodeName` = `apimachinery/pkg/api/validation` `NameIsDNSSubdomain`, i.e.
    `IsDNS1123Subdomain` in `apimachinery/pkg/util/validation/validation.go`)."""
    if not isinstance(name, str):
        return f"a node name must be a string, got {type(name).__name__}"
    if len(name) > 253:
        return f"node name of {len(name)} characters: Kubernetes allows at most 253"
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return (f"node name {_shown(name)} is not a DNS-1123 subdomain (lowercase letters, "
                "digits, '-' and '.', alphanumeric at both ends), so no Kubernetes node has it")
    return None


def label_problem(key: Any, value: Any) -> str | None:
    """Why the API server would refuse the label `key: value`, or None: the key a
    qualified name with an optional DNS-subdomain prefix (`IsQualifiedName`), the value at
    most 63 characters of `[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]` or empty
    (`IsValidLabelValue`), as `apimachinery/pkg/apis/meta/v1/validation` `ValidateLabels`
    checks them (rules in `apimachinery/pkg/util/validation/validation.go`)."""
    if not isinstance(key, str) or not isinstance(value, str):
        what = key if not isinstance(key, str) else value
        return f"label keys and values must be strings, got {type(what).__name__}"
    if not is_label_key(key):
        return (f"label key {_shown(key)} is not [prefix/]name (name <= 63 characters "
                "[A-Za-z0-9-_.], prefix a DNS subdomain <= 253)")
    if len(value) > 63:
        return f"label {_shown(key)}: value of {len(value)} characters; Kubernetes allows at most 63"
    if not _LABEL_VALUE.fullmatch(value):
        return (f"label {_shown(key)}: value {_shown(value)} is not a label value "
                "([A-Za-z0-9] at both ends, '-_.' inside)")
    return None


# ---------------------------------------------------------------------------- versions
_VERSION = re.compile(r"^v?1\.([0-9]{1,3})(\.[0-9]{1,3})?$")  # as schemas/spec.schema.json


# The Kubernetes version rendered for when neither the spec nor --kube-version gives one.
DEFAULT_KUBE_VERSION = "1.34.0"


def kube_minor(version: str) -> int:
    """The minor of a Kubernetes version (`1.34.0`, `v1.34`, `1.34` -> 34).

    Raises `GpuValuesError` for anything else, so a mistyped --kube-version is bad input.
    """
    m = _VERSION.match(str(version))
    if not m:
        raise GpuValuesError(f"Kubernetes version {version!r} is not 1.MINOR[.PATCH] (e.g. 1.34.0); "
                             "fix --kube-version or kubernetesVersion")
    return int(m.group(1))


def supported_kube_minors() -> tuple[int, ...]:
    """The Kubernetes minors (1.N) whose OpenAPI schemas the installed kubernetes-validate
    bundles: its `kubernetes-json-schema/v1.N.0-local-strict` folders, the ones
    `render/helm.py` validates against (strict). The one list every command uses."""
    return _supported_minors()


@functools.lru_cache(maxsize=1)
def _supported_minors() -> tuple[int, ...]:
    import importlib.util
    from pathlib import Path

    # find_spec locates the package without importing it (its import costs ~40 ms of the
    # CLI's start-up, and `validate` needs only the folder names)
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        return ()
    folder = Path(list(spec.submodule_search_locations)[0]) / "kubernetes-json-schema"
    found = set()
    for entry in folder.iterdir():
        m = re.match(r"^v1\.([0-9]+)\.[0-9]+-local-strict$", entry.name)
        if m:
            found.add(int(m.group(1)))
    return tuple(sorted(found))


def unsupported_kube_version(version: str) -> str | None:
    """Why `version` cannot be targeted (not 1.MINOR[.PATCH], or no bundled schemas for
    that minor), or None when it can. For callers that report a finding with a position."""
    m = _VERSION.match(str(version))
    if not m:
        return (f"Kubernetes version {version!r} is not 1.MINOR[.PATCH] (e.g. 1.34.0); fix "
                "--kube-version or kubernetesVersion")
    minors = supported_kube_minors()
    minor = int(m.group(1))
    if minor not in minors:
        return (f"Kubernetes {version} has no bundled API schemas to validate against; "
                f"supported: 1.{minors[0]} to 1.{minors[-1]} (kubernetes-validate "
                f"{_kubernetes_validate_version()})")
    return None


def supported_kube_minor(version: str) -> int:
    """The minor of `version` if manifests for it can be validated (see
    supported_kube_minors), else a `GpuValuesError` saying which versions can: the check
    for `--kube-version` (render, validate, fit) before anything runs."""
    why = unsupported_kube_version(version)
    if why:
        raise GpuValuesError(why, field="--kube-version")
    return kube_minor(version)


def _kubernetes_validate_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("kubernetes-validate")
    except metadata.PackageNotFoundError:
        return "?"
