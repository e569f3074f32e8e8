"""`gpuvalues rollout`: apply a re-plan's MIG changes node by node, in waves (issue 17).

mig-manager reconfigures a node when its `nvidia.com/mig.config` label changes, but it only
waits for the GPU Operator's own DaemonSets; it never drains workloads (NVIDIA's advice is to
cordon, drain, relabel and uncordon by hand, gpu-operator#262). Per changed node, in order:

0. check everything offline first (`load_replan`: the whole re-plan file; `check_option`),
   then the cluster (`check_cluster`: every node there, on the config the re-plan started
   from, no malformed state annotation): a refusal touches nothing;
1. cordon (`drain.cordon`, owned: a node someone else cordoned stays theirs);
2. evict its GPU pods through the Eviction API (`drain.Drainer`: PDBs honoured, 429 retried
   with backoff, one pod per workload per step) — the project's one drain implementation;
3. set `nvidia.com/mig.config` to the new config, removing the old
   `nvidia.com/mig.config.state` in the same write (not while mig-manager is `pending`);
4. wait for mig-manager to write `nvidia.com/mig.config.state=success` (`failed` stops the
   rollout): only a state written after our relabel exists to be read (see `Rollout`);
5. check the node advertises the new MIG resources (`nvidia.com/mig-<profile>` allocatable
   equal to the config's instance counts, mixed strategy);
6. uncordon.

Each step is a core/v1 Event on the Node. Nodes the re-plan does not change are never
touched. Waves (`plan_waves`, pure) hold at most
`max_unavailable_per_pool` disruption units of a pool (a node, or all the changed nodes of
one LeaderWorkerSet group: they go down together, so they move in one wave), and for every
PodDisruptionBudget at most its `disruptionsAllowed` pods across the wave's nodes (a unit
whose pods alone exceed it, or whose nodes exceed `max_nodes_per_wave`, moves whole in a
wave of its own, and the wave says so; the Eviction API then paces it). Progress lives on the node (annotation
`ROLLOUT_ANNOTATION`: target config and step), so a rollout that stops resumes where it was.
A node whose annotation stops parsing while the rollout runs (`BadNodeState`) is skipped
with a Warning Event and left as it is; the others go on, and `run()` then raises GV071.
Every answer from the API server is read with a size cap and a deadline (kubeapi.py).

Public API: `NodeChange`, `Wave`, `load_replan(path)`, `replan_changes(data)`, `ReplanFile`,
`changes_from_replan(d)`, `check_option`, `check_cluster`, `parse_state`, `expected_resources(devices)`,
`plan_waves(changes, pods, allowance, *, max_unavailable_per_pool=1, max_nodes_per_wave=None, groups=())`,
`disruption_units`, `pods_and_budgets`,
`describe(waves)` (the `--dry-run` text), `Rollout(core, waves, ...).run()`.
"""
from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from gpuvalues.catalog import mig_resource_name
from gpuvalues.errors import GpuValuesError
from gpuvalues.operations import drain
from gpuvalues.operations import events as eventlib
from gpuvalues.operations.kubeapi import MAX_LIST_BYTES, answered, read_json

PREFIX = "rollout.gpu-inference.io"
ROLLOUT_ANNOTATION = f"{PREFIX}/state"
OWNER = "mig-rollout"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"   # set by mig-manager: pending|rebooting|success|failed
STEPS = ("start", "cordoned", "drained", "labelled", "done")


class RolloutError(GpuValuesError):
    """A rollout cannot go on: mig-manager reported `failed`, or a wave timed out (GV049).
    Printed as one line with its code (`lines`)."""

    code = "GV049"


class RolloutInputError(RolloutError):
    """The re-plan file or a rollout option is not what a rollout can run (GV046; GV037 for a
    name or label value Kubernetes would refuse; GV048 for a cluster that does not match)."""

    code = "GV046"


class BadNodeState(RolloutInputError):
    """A node's rollout state annotation that does not parse (GV048): refused before the
    first action (`check_cluster`); found while the rollout runs, that node is skipped."""


@dataclass(frozen=True)
class NodeChange:
    """One node to reconfigure: from its current config to `to`, and what it must advertise after."""

    node: str
    pool: str
    from_config: str | None
    to: str
    resources: Mapping[str, int]      # expected allocatable nvidia.com/mig-* after the change


@dataclass(frozen=True)
class Wave:
    """Nodes reconfigured together."""

    index: int
    changes: tuple[NodeChange, ...]
    pods: int = 0                     # GPU pods on these nodes when planned
    notes: tuple[str, ...] = ()       # a unit over a limit, moved whole in this wave (plan_waves)


def expected_resources(devices: Iterable[Mapping[str, int] | None]) -> dict[str, int]:
    """The mixed-strategy MIG resources a node with these per-GPU mig-devices advertises:
    one `nvidia.com/mig-<profile>` device per instance (k8s-device-plugin internal/rm/rm.go)."""
    out: Counter = Counter()
    for d in devices:
        for prof, n in (d or {}).items():
            if n:
                out[mig_resource_name(prof)] += n
    return dict(sorted(out.items()))


# --- the input: a re-plan result, checked whole before the first action ---------------------

MAX_CHANGES = 100_000          # node changes in one re-plan (Kubernetes supports 5,000 nodes)
MAX_GPUS_PER_NODE = 64         # per-GPU entries of a node group's devices
MAX_INSTANCES_PER_GPU = 7      # no MIG GPU has more than 7 instances (catalog/gpus/*.yaml)
MAX_NUMBER = 10 ** 15          # any number in the file: counts, seconds, bounds are far smaller
MAX_STATE_BYTES = 4096         # a rollout state annotation we wrote is about 100 bytes
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_POLL_S = 3600.0


@dataclass(frozen=True)
class ReplanFile:
    """A validated re-plan: its node changes, the mig-parted config it brings, and where each
    change's node name sits in the file (for errors found later, e.g. a node not in the cluster)."""

    source: str
    changes: tuple[NodeChange, ...]
    mig_parted_config: Mapping | None
    text: str = field(repr=False, default="")

    def error(self, path: tuple, message: str, code: str) -> RolloutInputError:
        """A RolloutInputError placed at `path` in this file."""
        return _placed(self.source, self.text, path, message, code)

    def node_path(self, node: str) -> tuple:
        """The path of `node`'s change (`changes[i].node`)."""
        for i, c in enumerate(self.changes):
            if c.node == node:
                return ("changes", i, "node")
        return ("changes",)


def _placed(source: str | None, text: str, path: tuple, message: str, code: str) -> RolloutInputError:
    line, col = _position(text, path) if source else (None, None)
    return RolloutInputError(message, source=source, line=line, column=col,
                             field=_format_path(path), code=code)


def _format_path(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out or "(root)"


def _line_col(text: str, index: int) -> tuple[int, int]:
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


_WS = re.compile(r"[ \t\n\r]*")


def _json_position(text: str, path: tuple) -> int | None:
    """Index in JSON `text` of the value at `path` (skipping values with json's own scanner),
    or None when the path is not there."""
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    for p in path:
        if i >= len(text):
            return None
        opening = text[i]
        if opening not in "{[":
            return None
        i = _WS.match(text, i + 1).end()
        k = 0
        while i < len(text) and text[i] not in "}]":
            if opening == "{":
                key, i = json.decoder.scanstring(text, i + 1)
                i = _WS.match(text, i).end() + 1            # the ':'
                i = _WS.match(text, i).end()
                hit = key == p
            else:
                hit = k == p
            if hit:
                break
            _, i = dec.raw_decode(text, i)
            i = _WS.match(text, i).end()
            if i < len(text) and text[i] == ",":
                i = _WS.match(text, i + 1).end()
            k += 1
        else:
            return None
    return i


def _position(text: str, path: tuple) -> tuple[int, int]:
    """1-based (line, column) of the value at `path`, or of its nearest ancestor found."""
    path = tuple(path)
    while True:
        index = None
        try:
            if text.lstrip().startswith(("{", "[")):
                index = _json_position(text, path)
            else:
                index = _yaml_position(text, path)
        except (ValueError, IndexError, RecursionError, yaml.YAMLError):
            index = None
        if index is not None:
            return _line_col(text, index)
        if not path:
            return 1, 1
        path = path[:-1]


def _yaml_position(text: str, path: tuple) -> int | None:
    node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for p in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == p), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
            node = node.value[p]
        else:
            node = None
        if node is None:
            return None
    return node.start_mark.index if node is not None else None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows; write a finite number")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_replan_text(text: str, source: str) -> Any:
    """The data of a re-plan file (JSON, as `gpuvalues --output json replan` prints, or YAML),
    or a placed RolloutInputError: syntax, duplicate keys, NaN/Infinity, numbers too long."""
    from gpuvalues.yamlio.loader import parse_yaml

    if not text.lstrip().startswith(("{", "[")):
        try:
            return parse_yaml(text, source=source, error=RolloutInputError)
        except RolloutInputError as exc:
            raise RolloutInputError(exc.message, source=source, line=exc.line or 1, column=exc.column or 1,
                                    field="(root)", code="GV046") from None
    try:
        # NaN/Infinity parse as floats here and are refused, placed, by _check_numbers
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise RolloutInputError(f"invalid JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno,
                                field="(root)", code="GV046") from None
    except RecursionError:
        raise RolloutInputError("JSON nested too deeply to read", source=source, line=1, column=1,
                                field="(root)", code="GV046") from None
    except ValueError as exc:         # a duplicate key, an integer past Python's 4,300 digits
        m = re.search(r"\d{4000,}", text)
        line, col = _line_col(text, m.start()) if m else (1, 1)
        raise RolloutInputError(str(exc), source=source, line=line, column=col, field="(root)",
                                code="GV046") from None


def _finite(v: Any, lo: float = -MAX_NUMBER, hi: float = MAX_NUMBER) -> bool:
    """`v` is an int or float (not a bool), finite, within [lo, hi] (a 400-digit int is not:
    compared as an int, never converted to a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    return lo <= v <= hi


def _check_numbers(data: Any, fail: Callable[[tuple, str, str], None]) -> None:
    """Every number in the file finite and within MAX_NUMBER (iterative: no recursion limit)."""
    stack = [((), data)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        if isinstance(v, (int, float)):
            if not _finite(v):
                fail(path, f"{v!r} is not a finite number within +-{MAX_NUMBER:.0e}", "GV046")
        elif isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((path + (i,), x) for i, x in enumerate(v))


def _count(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def replan_changes(data: Any, *, source: str | None = None, text: str = "",
                   need_configs: bool = False) -> ReplanFile:
    """Check a whole re-plan result (`Replan.to_dict()`) before anything touches a cluster and
    return its node changes. Refused, as one placed RolloutInputError: not a re-plan result,
    a node name that is not a DNS-1123 subdomain (GV037), a config name that is not a label
    value (GV037: the API server would refuse the relabel with 422), a `to` config the plan
    does not define (its resources are unknown), devices that are not a list of per-GPU
    profile counts, a node listed twice, a number that is not finite or out of range; with
    `need_configs` (`--configmap`), a `to` config missing from `plan.mig_parted_config`."""
    from gpuvalues.catalog import parse_profile_name
    from gpuvalues.errors import CatalogError, MigPartedConfigError
    from gpuvalues.kube import is_dns_subdomain, is_label_key, is_label_value
    from gpuvalues.planners.mig.migparted import validate_mig_parted_config

    def fail(path: tuple, message: str, code: str = "GV046"):
        raise _placed(source, text, path, message, code)

    def get(obj: Any, path: tuple, key: str, kind: type | tuple, what: str, optional: bool = False) -> Any:
        if key not in obj:
            if optional:
                return None
            fail(path, f"missing {key!r}: not a re-plan result (`gpuvalues --output json replan ...`)")
        v = obj[key]
        if optional and v is None:
            return None
        if not isinstance(v, kind) or isinstance(v, bool):
            fail(path + (key,), f"must be {what}, got {type(v).__name__}")
        return v

    if not isinstance(data, dict):
        fail((), "not a re-plan result (`gpuvalues --output json replan ...`): expected a mapping with "
                 "changes and plan")
    _check_numbers(data, fail)
    changes = get(data, (), "changes", list, "a list of {node, from, to}")
    if len(changes) > MAX_CHANGES:
        fail(("changes",), f"{len(changes):,} node changes; a rollout takes at most {MAX_CHANGES:,}")
    plan = get(data, (), "plan", dict, "a mapping (the re-plan's plan)")
    pools = get(plan, ("plan",), "pools", list, "a list of pools")
    devices: dict[str, list] = {}
    pool_of: dict[str, str] = {}
    for pi, pool in enumerate(pools):
        pp = ("plan", "pools", pi)
        if not isinstance(pool, dict):
            fail(pp, "must be a mapping with name and node_groups")
        name = get(pool, pp, "name", str, "a string")
        if not name or len(name) > 253:
            fail(pp + ("name",), "a pool name has 1 to 253 characters")
        for gi, ng in enumerate(get(pool, pp, "node_groups", list, "a list of node groups")):
            gp = pp + ("node_groups", gi)
            if not isinstance(ng, dict):
                fail(gp, "must be a mapping with config, count and devices")
            config = get(ng, gp, "config", str, "a string")
            if not config or not is_label_value(config):
                fail(gp + ("config",), f"{config!r} cannot be the value of the node label {MIG_CONFIG_LABEL}: "
                     "use 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                     "GV037")
            if "count" in ng and not _count(ng["count"], 0, MAX_CHANGES):
                fail(gp + ("count",), f"must be a whole number from 0 to {MAX_CHANGES:,}")
            devs = get(ng, gp, "devices", list, "a list with one entry per GPU (profile counts, or null)")
            if len(devs) > MAX_GPUS_PER_NODE:
                fail(gp + ("devices",), f"{len(devs)} GPUs per node; at most {MAX_GPUS_PER_NODE}")
            for di, d in enumerate(devs):
                dp = gp + ("devices", di)
                if d is None:
                    continue
                if not isinstance(d, dict):
                    fail(dp, "must be a mapping of MIG profile -> instances on that GPU, or null (MIG off)")
                for prof, n in d.items():
                    try:
                        parse_profile_name(str(prof))
                    except CatalogError:
                        fail(dp + (prof,), f"{prof!r} is not a MIG profile name (e.g. 1g.10gb, 3g.40gb, 1g.10gb+me)")
                    if not is_label_key(mig_resource_name(prof)):
                        fail(dp + (prof,), f"{prof!r} makes no valid resource name", "GV037")
                    if not _count(n, 0, MAX_INSTANCES_PER_GPU):
                        fail(dp + (prof,), f"must be a whole number of instances from 0 to {MAX_INSTANCES_PER_GPU}")
            if config in devices and devices[config] != devs:
                fail(gp + ("config",), f"config {config!r} is defined twice with different devices")
            devices[config] = devs
            pool_of.setdefault(config, name)
    cfg = get(plan, ("plan",), "mig_parted_config", dict, "a mig-parted config (version, mig-configs)",
              optional=True)
    if cfg is not None:
        try:
            validate_mig_parted_config(cfg)
        except MigPartedConfigError as exc:
            fail(("plan", "mig_parted_config"), f"{exc.field + ': ' if exc.field else ''}{exc.message}")
    named = set((cfg or {}).get("mig-configs") or {})
    resources = {name: expected_resources(devs) for name, devs in devices.items()}   # once per config
    out: list[NodeChange] = []
    seen: dict[str, int] = {}
    for i, c in enumerate(changes):
        cp = ("changes", i)
        if not isinstance(c, dict):
            fail(cp, "must be a mapping {node, from, to}")
        node = get(c, cp, "node", str, "a string (the node's name)")
        if not is_dns_subdomain(node):
            fail(cp + ("node",), f"{node!r} is not a node name (a DNS-1123 subdomain: at most 253 lowercase "
                 "letters, digits, '-' and '.')", "GV037")
        if node in seen:
            fail(cp + ("node",), f"node {node!r} is listed twice (also changes[{seen[node]}])")
        seen[node] = i
        to = get(c, cp, "to", str, "a string (the new mig-parted config name)")
        if not to or not is_label_value(to):
            fail(cp + ("to",), f"{to!r} cannot be the value of the node label {MIG_CONFIG_LABEL}: use 1 to 63 "
                 "letters, digits, '-', '_' or '.', starting and ending with a letter or digit", "GV037")
        frm = get(c, cp, "from", str, "a string or null", optional=True)
        if frm is not None and not is_label_value(frm):
            fail(cp + ("from",), f"{frm!r} is not a label value {MIG_CONFIG_LABEL} can have", "GV037")
        if to not in devices:
            fail(cp + ("to",), f"config {to!r} is not one of the plan's node groups "
                 "(plan.pools[*].node_groups[*].config), so the resources it gives are unknown")
        if need_configs and to not in named:
            fail(cp + ("to",), f"config {to!r} is not in plan.mig_parted_config, so --configmap cannot give it "
                 "to mig-manager")
        out.append(NodeChange(node, pool_of[to], frm, to, resources[to]))
    return ReplanFile(source or "", tuple(out), cfg, text)


def load_replan(path: str, *, need_configs: bool = False) -> ReplanFile:
    """Read and check a re-plan file (the project's safe reader: a regular file up to 16 MiB,
    UTF-8); every problem is one placed RolloutInputError."""
    from gpuvalues.yamlio.inputs import decode, read_input

    data, source = read_input(path, error=RolloutInputError, expected="a re-plan JSON file")
    try:
        text = decode(data, source)
    except GpuValuesError as exc:     # a bad byte or a NUL: placed by yamlio, coded here
        raise RolloutInputError(exc.message, source=source, line=exc.line or 1, column=exc.column or 1,
                                field="(root)", code="GV046") from None
    return replan_changes(parse_replan_text(text, source), source=source, text=text, need_configs=need_configs)


def changes_from_replan(d: Mapping) -> list[NodeChange]:
    """The node changes in a `replan` result (`Replan.to_dict()`, as `gpuvalues replan -o json`
    prints), checked as `replan_changes` checks them."""
    return list(replan_changes(d).changes)


def check_option(name: str, value: float | int | None, lo: float, hi: float, *, whole: bool = False,
                 optional: bool = False) -> None:
    """A rollout option within [lo, hi] (finite; whole for counts), else a RolloutInputError
    naming the option (`--timeout nan` would otherwise never stop)."""
    if value is None and optional:
        return
    ok = _finite(value, lo, hi) and (not whole or float(value).is_integer())
    if not ok:
        kind = "a whole number" if whole else "a number of seconds"
        raise RolloutInputError(f"{value!r} is out of range: give {kind} from {lo:g} to {hi:g}", field=name,
                                code="GV046")


def check_configmap(ref: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` of the mig-parted ConfigMap, both valid Kubernetes names."""
    from gpuvalues.kube import is_dns_subdomain

    ns, sep, name = ref.partition("/")
    if not sep or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", ns) or not is_dns_subdomain(name):
        raise RolloutInputError(f"{ref!r} is not NAMESPACE/NAME (a DNS-1123 label / a DNS-1123 subdomain)",
                                field="--configmap", code="GV037")
    return ns, name


class _Room:
    """Per wave, the pods one PodDisruptionBudget still allows (a sparse max segment tree over
    wave indices, every wave `allowance` until used): `first(w, n)` is the first wave >= w that
    takes n more, in O(log waves)."""

    def __init__(self, allowance: int, waves: int):
        self.default = allowance
        self.size = 1 << max(1, (waves - 1).bit_length())
        self.tree: dict[int, int] = {}

    def _get(self, i: int) -> int:
        return self.tree.get(i, self.default)

    def use(self, w: int, n: int) -> None:
        tree, d = self.tree, self.default
        i = w + self.size
        tree[i] = tree.get(i, d) - n
        i >>= 1
        while i:
            top = max(tree.get(2 * i, d), tree.get(2 * i + 1, d))
            if tree.get(i, d) == top:                 # values only fall: nothing above changes
                break
            tree[i] = top
            i >>= 1

    def first(self, w: int, n: int) -> int:
        i = w + self.size
        if self._get(i) >= n:
            return w
        while True:                                   # up to a right sibling with room
            if i & 1 == 0 and self._get(i + 1) >= n:
                i += 1
                break
            i >>= 1
            if i <= 1:
                return self.size                      # none (never: a new wave has all of it)
        while i < self.size:                          # down to its first leaf with room
            i = 2 * i if self._get(2 * i) >= n else 2 * i + 1
        return i - self.size


def disruption_units(changes: Sequence[NodeChange], groups: Iterable[Iterable[str]]) -> list[list[NodeChange]]:
    """The changed nodes as disruption units: nodes that share a LeaderWorkerSet group (one
    of `groups`, each the nodes one group's pods run on) are one unit, transitively (a group
    on nodes a, b and another on b, c make a, b and c one unit): draining any of them takes
    the whole group down, so they move in one wave. Every other node is a unit of its own.
    Units keep the order of `changes`' first members; nodes inside a unit keep theirs."""
    index = {c.node: i for i, c in enumerate(changes)}
    parent = list(range(len(changes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for g in groups:
        mine = sorted({index[n] for n in g if n in index})
        for j in mine[1:]:
            a, b = root(mine[0]), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    units: dict[int, list[NodeChange]] = {}
    for i, c in enumerate(changes):
        units.setdefault(root(i), []).append(c)
    return list(units.values())


def plan_waves(changes: Sequence[NodeChange], pods: Mapping[str, Mapping[str, int]],
               allowance: Mapping[str, int], *, max_unavailable_per_pool: int = 1,
               max_nodes_per_wave: int | None = None, groups: Iterable[Iterable[str]] = ()) -> tuple[Wave, ...]:
    """Group `changes` into waves. `pods[node][budget]` = GPU pods on `node` covered by the
    PodDisruptionBudget `budget`; `allowance[budget]` = its disruptionsAllowed; `groups` =
    the nodes of each LeaderWorkerSet group (`pods_and_budgets`).

    What moves is a disruption unit (`disruption_units`): a node, or all the changed nodes of
    a LeaderWorkerSet group, which go down together whichever of them is drained, so they are
    cordoned and drained in one wave (never one wave each: the group would go down twice).
    A wave holds at most `max_unavailable_per_pool` units per pool (a unit counts once in each
    pool it has nodes in: one group down is one replica down, however many nodes it spans),
    at most `max_nodes_per_wave` nodes in all, and per budget at most its allowance of pods.
    A unit that alone exceeds the node limit or a budget's allowance is never split (that
    would take its group down twice) nor left waiting (no wave would ever take it): it gets a
    wave of its own (nothing else joins it where it is over) and the wave says so
    (`Wave.notes`, printed by `describe` and `--dry-run`; the Eviction API then paces its pods).
    Units with the fewest pods go first; the order is deterministic.

    The rule is a greedy scan: wave 1 takes, in order, every unit that still fits it, wave 2
    the same over the rest, and so on. A wave only fills as the scan goes, so a unit that does
    not fit a wave when the scan reaches it never fits it later: the scan is the same as giving
    each unit, in order, the first wave it fits (or a new one). That is what runs here: a
    "next wave with room" pointer (path-compressed) per pool, and for the wave size and per
    budget a tree of what each wave still allows, so a unit jumps to the first wave each of
    its constraints allows (in O(log n)) instead of rescanning: O(n log n) in all, as long as
    one unit's constraints do not send it back and forth between many waves (each jump passes
    waves one constraint refuses). tests/unit/test_rollout.py holds it to the scan itself."""
    if not _count(max_unavailable_per_pool, 1, MAX_CHANGES):
        raise RolloutInputError("max unavailable per pool must be a whole number >= 1",
                                field="--max-unavailable-per-pool", code="GV046")
    if max_nodes_per_wave is not None and not _count(max_nodes_per_wave, 1, MAX_CHANGES):
        raise RolloutInputError("max nodes per wave must be a whole number >= 1", field="--max-nodes-per-wave",
                                code="GV046")

    def unit_pods(u: list[NodeChange]) -> Counter[str]:
        total: Counter[str] = Counter()
        for c in u:
            total.update(pods.get(c.node, {}))
        return total

    units = [(u, unit_pods(u)) for u in disruption_units(changes, groups)]
    units.sort(key=lambda x: (sum(x[1].values()), x[0][0].pool, x[0][0].node))
    members: list[list[NodeChange]] = []
    per_pool: list[Counter[str]] = []
    notes: list[list[str]] = []
    # skip[key][w]: a later wave to try instead of w, which has no room left for `key`
    skip: dict[Any, dict[int, int]] = {}
    room: dict[str, _Room] = {}                       # per budget: pods it still allows, per wave
    size = _Room(max_nodes_per_wave, len(changes)) if max_nodes_per_wave is not None else None

    def first(key: Any, w: int) -> int:
        table = skip.get(key)
        if not table or w not in table:
            return w
        top = w
        while top in table:
            top = table[top]
        while table.get(w, top) != top:               # path compression
            table[w], w = top, table[w]
        return top

    def full(key: Any, w: int) -> None:
        skip.setdefault(key, {})[w] = w + 1

    for unit, counted in units:
        mine = {b: n for b, n in counted.items() if b in allowance and n}
        pools = sorted({c.pool for c in unit})
        over = [f"{n} pods of PodDisruptionBudget {b}, which allows {allowance[b]} disruption(s)"
                for b, n in sorted(mine.items()) if n > allowance[b]]
        if max_nodes_per_wave is not None and len(unit) > max_nodes_per_wave:
            over.append(f"{len(unit)} nodes, over --max-nodes-per-wave {max_nodes_per_wave}")
        w = len(members)                              # a new wave, unless an earlier one fits
        if not over:
            w = 0
            while True:                               # the first wave every constraint allows
                nxt = size.first(w, len(unit)) if size is not None else w
                for pool in pools:
                    nxt = first(("pool", pool), nxt)
                for b, n in mine.items():
                    nxt = room[b].first(nxt, n) if b in room else nxt
                if nxt == w or nxt >= len(members):       # a new wave takes any unit that fits alone
                    w = min(nxt, len(members))
                    break
                w = nxt
        if w == len(members):
            members.append([])
            per_pool.append(Counter())
            notes.append([])
        members[w].extend(unit)
        if over:
            names = ", ".join(c.node for c in unit)
            what = "LeaderWorkerSet group unit" if len(unit) > 1 else "node"
            notes[w].append(f"{what} {names} moves whole in its own wave: {'; '.join(over)}")
        for pool in pools:
            per_pool[w][pool] += 1
            if per_pool[w][pool] >= max_unavailable_per_pool:
                full(("pool", pool), w)
        if size is not None:
            size.use(w, len(unit))
        for b, n in mine.items():
            room.setdefault(b, _Room(allowance[b], len(changes))).use(w, n)
    return tuple(Wave(i + 1, tuple(ws), sum(sum(pods.get(c.node, {}).values()) for c in ws), tuple(notes[i]))
                 for i, ws in enumerate(members))


def describe(waves: Sequence[Wave]) -> str:
    """The ordered steps (`rollout --dry-run`)."""
    lines = []
    for w in waves:
        lines.append(f"wave {w.index}: {len(w.changes)} node(s), {w.pods} GPU pod(s) to move")
        lines += [f"  note: {n}" for n in w.notes]
        for c in w.changes:
            res = ", ".join(f"{k} {v}" for k, v in c.resources.items()) or "no MIG devices"
            lines += [f"  {c.node} ({c.pool}): {c.from_config or '(unconfigured)'} -> {c.to}",
                      f"    1. cordon {c.node}",
                      "    2. evict its GPU pods through the Eviction API (PodDisruptionBudgets honoured)",
                      f"    3. label {MIG_CONFIG_LABEL}={c.to} (removing the old {MIG_STATE_LABEL} in the same write)",
                      f"    4. wait for mig-manager to write {MIG_STATE_LABEL}=success",
                      f"    5. check allocatable: {res}",
                      f"    6. uncordon {c.node}"]
    return "\n".join(lines) + "\n"


# --- reading the cluster -------------------------------------------------------------------

def _selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against labels (apimachinery semantics)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pods_and_budgets(core, policy, nodes: Iterable[str]) -> tuple[dict[str, dict[str, int]], dict[str, int],
                                                                 list[list[str]]]:
    """GPU pods per node per PDB (`namespace/name`), each PDB's disruptionsAllowed, and the
    nodes of each LeaderWorkerSet group among `nodes` (`plan_waves`' `groups`), read from the
    cluster (`core`: CoreV1Api, `policy`: PolicyV1Api)."""
    pdbs = read_json(policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False), MAX_LIST_BYTES,
                     what="the PodDisruptionBudget list")["items"]
    allowance = {f"{p['metadata']['namespace']}/{p['metadata']['name']}":
                 int((p.get("status") or {}).get("disruptionsAllowed", 0)) for p in pdbs}
    wanted = set(nodes)
    per: dict[str, Counter[str]] = {n: Counter() for n in wanted}
    groups: dict[tuple[str, str, str], set[str]] = {}
    # one LIST of every pod (not one per node: a 16k-node rollout would make 16k calls)
    items = read_json(core.list_pod_for_all_namespaces(_preload_content=False), MAX_LIST_BYTES,
                      what="the pod list")["items"]
    for pod in items:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in wanted or drain.skip_reason(pod) or not drain.is_gpu_pod(pod):
            continue
        meta = pod["metadata"]
        group = drain.lws_group(pod)
        if group is not None:
            groups.setdefault(group, set()).add(node)
        keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pdbs
                if p["metadata"]["namespace"] == meta["namespace"]
                and _selector_matches((p.get("spec") or {}).get("selector"), meta.get("labels") or {})]
        for k in keys or [f"{meta['namespace']}/(no budget)"]:   # no budget: not limited by waves
            per[node][k] += 1
    return ({n: {k: v for k, v in c.items() if v} for n, c in per.items()}, allowance,
            [sorted(g) for _, g in sorted(groups.items()) if len(g) > 1])


# --- what the cluster says, checked -------------------------------------------------------

BUSY_STATES = ("pending", "rebooting")   # mig-manager is applying a change


def parse_state(node: Mapping) -> dict:
    """The node's rollout state annotation (ROLLOUT_ANNOTATION), checked: a JSON object with
    `target` (a label value), `step` (one of STEPS) and finite times `at`/`since`; {} when
    absent. Anything else (written by hand, forged, truncated) is a RolloutInputError (GV048)
    naming the node, with the way out: remove the annotation and that node starts over."""
    meta = node.get("metadata") or {}
    name = meta.get("name", "?")
    raw = (meta.get("annotations") or {}).get(ROLLOUT_ANNOTATION)
    if raw is None:
        return {}

    def bad(why: str) -> BadNodeState:
        return BadNodeState(f"node {name}: {why}; remove it to restart this node's rollout "
                                 f"(kubectl annotate node {name} {ROLLOUT_ANNOTATION}-)",
                                 source=f"node/{name}", field=f"metadata.annotations[{ROLLOUT_ANNOTATION}]",
                                 code="GV048")
    if not isinstance(raw, str) or len(raw) > MAX_STATE_BYTES:
        raise bad(f"the annotation is not a rollout state (over {MAX_STATE_BYTES} bytes)")
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise bad("the annotation is not JSON") from None
    if not isinstance(data, dict):
        raise bad("the annotation is not a JSON object")
    from gpuvalues.kube import is_label_value
    if not isinstance(data.get("target"), str) or not data["target"] or not is_label_value(data["target"]):
        raise bad("its target is not a mig.config label value")
    if data.get("step") not in STEPS:
        raise bad(f"its step {str(data.get('step'))[:40]!r} is not one of {', '.join(STEPS)}")
    for k in ("at", "since"):
        if k in data:
            v = data[k]
            if not _finite(v, 0, MAX_NUMBER):
                raise bad(f"its {k!r} is not a time (finite seconds since 1970)")
    return data


def check_cluster(nodes: Mapping[str, Mapping], replan: ReplanFile) -> None:
    """Before the first action: every node of the re-plan is in the cluster (`nodes`: name ->
    Node as the API returns it), runs the config the re-plan started from (or already the
    target: a rollout to resume), and carries no malformed rollout state. GV048 otherwise."""
    for c in replan.changes:
        node = nodes.get(c.node)
        if node is None:
            raise replan.error(replan.node_path(c.node), f"node {c.node!r} is not in the cluster; re-plan "
                               "against the current cluster (gpuvalues inventory --kubeconfig ...)", "GV048")
        parse_state(node)
        label = ((node.get("metadata") or {}).get("labels") or {}).get(MIG_CONFIG_LABEL)
        if label not in (c.from_config, c.to):
            raise replan.error(replan.node_path(c.node), f"node {c.node!r} runs {MIG_CONFIG_LABEL}={label}, "
                               f"the re-plan expected {c.from_config} (someone changed it since): re-plan "
                               "against the current cluster", "GV048")


def list_nodes(core) -> dict[str, dict]:
    """Every Node, by name (one LIST, read as JSON)."""
    items = read_json(core.list_node(_preload_content=False), MAX_LIST_BYTES, what="the node list").get("items") or []
    return {n["metadata"]["name"]: n for n in items}


class api_errors:
    """Turn the API server's answers into one line instead of a traceback: unreachable, a
    timeout, 429 or 5xx are a TransientError (GV036, exit 3: retry), any other refusal a
    RolloutError (GV049): `with api_errors(): ...`."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, GpuValuesError):
            return False
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        from gpuvalues.errors import TransientError

        if isinstance(exc, ApiException) and (exc.status == 429 or (exc.status or 0) >= 500):
            raise TransientError(f"the API server answered {exc.status} {exc.reason} (retry; a rerun "
                                 "resumes)") from None
        if isinstance(exc, ApiException):
            try:                          # the Status object's message, else the reason
                detail = json.loads(exc.body).get("message", "") or exc.reason
            except (TypeError, ValueError, AttributeError):
                detail = exc.reason
            raise RolloutError(f"the API server answered {exc.status} {exc.reason}: {detail} "
                               "(rerun to resume)") from None
        if isinstance(exc, HTTPError):
            raise TransientError(f"the API server cannot be reached: {exc} (retry; a rerun resumes)") from None
        return False


# --- running it -----------------------------------------------------------------------------

EVENT_COMPONENT = "gpu-inference-rollout"


@dataclass
class NodeResult:
    node: str
    to: str
    steps: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    done: bool = False
    skipped: str = ""        # why the rollout left this node (its state annotation went bad)


def _read(core, name: str) -> dict:
    return read_json(core.read_node(name, _preload_content=False), what=f"node {name}")


def advertises(node: Mapping, expected: Mapping[str, int]) -> bool:
    """The node's allocatable MIG resources are exactly `expected` (others absent or 0); a
    value that is not a whole number never matches."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    mig = {}
    for k, v in alloc.items():
        if k.startswith("nvidia.com/mig-"):
            if not re.fullmatch(r"[0-9]{1,9}", str(v)):
                return False
            if int(v):
                mig[k] = int(v)
    return mig == {k: v for k, v in expected.items() if v}


class Rollout:
    """Drives the waves against the cluster. `core` is a CoreV1Api. Each `advance(change)`
    does what the node's recorded step allows and records the next one; `run()` loops the
    waves until every node is done, `timeout` seconds per wave.

    mig-manager's state label is believed only once it was written after our relabel. Upstream
    (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go `Run`, the GPU Operator's
    mig-manager) reacts to a changed `nvidia.com/mig.config` by setting
    `nvidia.com/mig.config.state` to `failed` (config invalid) or `success` (already applied)
    at once, or to `pending`, then `rebooting` (a MIG mode change with reboot) and finally
    `success` or `failed`; writing an unchanged value changes nothing, so "success again" cannot
    be seen. The relabel therefore removes the state label in the same write (one merge patch
    with the node's resourceVersion, also recording the step): any state found afterwards was
    written after it, and a stale `failed` or `success` from an earlier change is never read.
    A node whose state is `pending`/`rebooting` (mig-manager busy with an earlier change) is
    not relabelled until that change ends. `success` then still needs the new resources
    advertised (`advertises`) before the node is uncordoned.

    Each step is a core/v1 Event on the Node (reporting component EVENT_COMPONENT)."""

    def __init__(self, core, waves: Sequence[Wave], *, poll: float = 1.0, timeout: float = 900.0,
                 drainer: drain.Drainer | None = None, log: Callable[[str], None] = lambda m: None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 events: bool = True):
        check_option("--poll", poll, 0.01, MAX_POLL_S)
        check_option("--timeout", timeout, 0.1, MAX_TIMEOUT_S)
        self.core = core
        self.waves = list(waves)
        self.poll, self.timeout = poll, timeout
        self.drainer = drainer or drain.Drainer(core, owner=OWNER)
        self.log, self.clock, self.sleep = log, clock, sleep
        self.events = events
        self.results: dict[str, NodeResult] = {}
        self._said: set[tuple[str, str, str]] = set()

    def event(self, node: Mapping, reason: str, message: str, *, warning: bool = False, once: str = "") -> None:
        """A core/v1 Event on the Node (in `default`, where the kubelet puts Node events);
        with `once`, only the first time for that key. Never fails the rollout."""
        name = node["metadata"]["name"]
        if once:
            if (name, reason, once) in self._said:
                return
            self._said.add((name, reason, once))
        self.log(f"{name}: {message}")
        if not self.events:
            return
        body = eventlib.event_body(kind="Node", name=name, namespace="", uid=node["metadata"].get("uid", ""),
                                   reason=reason, message=message, warning=warning, component=EVENT_COMPONENT,
                                   instance=EVENT_COMPONENT)
        refused = eventlib.post(self.core, body)
        if refused:
            self.log(f"{name}: event {reason} not recorded: {refused}")

    def _write(self, node: dict, change: NodeChange, step: str, labels: Mapping | None = None,
               **extra: Any) -> dict:
        """One merge patch, conditional on the node's resourceVersion: the step annotation and,
        with `labels`, label changes (None removes a label) in the same write."""
        state = {"target": change.to, "step": step, "at": time.time(), **extra}
        meta: dict = {"resourceVersion": node["metadata"]["resourceVersion"],
                      "annotations": {ROLLOUT_ANNOTATION: json.dumps(state, sort_keys=True)}}
        if labels:
            meta["labels"] = dict(labels)
        resp = self.core.patch_node(change.node, {"metadata": meta}, _content_type="application/merge-patch+json",
                                    _preload_content=False)
        self.results[change.node].steps.append(step)
        return read_json(resp, what=f"node {change.node}")

    def advance(self, change: NodeChange) -> bool:
        """One step of `change`'s node; True once it is done. A write that loses a race with
        another writer of the node (409: its resourceVersion moved on) is retried next time."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._advance(change)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def _advance(self, change: NodeChange) -> bool:
        res = self.results.setdefault(change.node, NodeResult(change.node, change.to))
        node = _read(self.core, change.node)
        state = parse_state(node)
        step = state.get("step", "start") if state.get("target") == change.to else "start"
        labels = (node.get("metadata") or {}).get("labels") or {}
        if step == "done":
            res.done = True
            return True
        if step == "start":
            if drain.cordon(self.core, change.node, OWNER):
                self.event(node, "MigRolloutCordoned", f"cordoned for the MIG change {change.from_config} -> "
                           f"{change.to}")
            else:
                self.event(node, "MigRolloutCordoned", "already cordoned by someone else: left to them",
                           once="theirs")
            self._write(_read(self.core, change.node), change, "cordoned", since=time.time())
            return False
        if step == "cordoned":
            prog = self.drainer.step(change.node, float(state.get("since", time.time())), already=res.evicted)
            res.evicted += [r.uid for r in prog.results if r.outcome in ("evicted", "deleted")]
            for r in prog.results:
                if r.outcome in ("evicted", "deleted"):
                    self.event(node, "MigRolloutEvicted", f"{r.outcome} {r.namespace}/{r.name} (Eviction API)")
                elif r.outcome == "blocked":
                    self.event(node, "MigRolloutEvictionBlocked", f"eviction of {r.namespace}/{r.name} blocked by "
                               "its PodDisruptionBudget; retrying", warning=True, once=r.uid)
            if prog.done:
                self._write(node, change, "drained")
                self.event(node, "MigRolloutDrained", "no GPU pods left")
            return False
        if step == "drained":
            mstate = labels.get(MIG_STATE_LABEL)
            if mstate in BUSY_STATES:
                self.event(node, "MigRolloutWaiting", f"mig-manager is still applying an earlier change "
                           f"({MIG_STATE_LABEL}={mstate}); relabelling after it ends", once=f"busy-{mstate}")
                return False
            if labels.get(MIG_CONFIG_LABEL) == change.to:
                # set by someone else: mig-manager reacts to a change only, so its state is kept
                self._write(node, change, "labelled")
                self.event(node, "MigRolloutRelabelled", f"{MIG_CONFIG_LABEL} was already {change.to}; "
                           f"taking mig-manager's {MIG_STATE_LABEL}={mstate} as it is", once="already")
                return False
            self._write(node, change, "labelled", labels={MIG_CONFIG_LABEL: change.to, MIG_STATE_LABEL: None},
                        stale=mstate)
            self.event(node, "MigRolloutRelabelled", f"{MIG_CONFIG_LABEL}={change.to} (was {change.from_config}); "
                       f"{MIG_STATE_LABEL} cleared in the same write (was {mstate})")
            return False
        if step == "labelled":
            if labels.get(MIG_CONFIG_LABEL) != change.to:   # someone changed it back: set it again
                self._write(node, change, "drained")
                self.event(node, "MigRolloutRelabelled", f"{MIG_CONFIG_LABEL} changed to "
                           f"{labels.get(MIG_CONFIG_LABEL)} by someone else: setting it again", warning=True)
                return False
            mstate = labels.get(MIG_STATE_LABEL)
            if mstate == "failed":
                self.event(node, "MigRolloutFailed", f"mig-manager reports {MIG_STATE_LABEL}=failed for "
                           f"{change.to}; the node stays cordoned", warning=True, once="failed")
                raise RolloutError(f"{change.node}: mig-manager reports {MIG_STATE_LABEL}=failed for {change.to}; "
                                   "the node stays cordoned (see the mig-manager logs; rerun to retry)",
                                   field=change.node)
            if mstate == "success" and advertises(node, change.resources):
                drain.uncordon(self.core, change.node, OWNER)
                self._write(_read(self.core, change.node), change, "done")
                self.event(node, "MigRolloutSucceeded", f"{change.to} applied; advertises "
                           f"{', '.join(f'{k} {v}' for k, v in change.resources.items()) or 'no MIG devices'}; "
                           "uncordoned")
                res.done = True
                return True
            what = ("the device plugin to advertise the new MIG resources" if mstate == "success"
                    else f"mig-manager ({MIG_STATE_LABEL}={mstate or '(not yet written)'})")
            self.event(node, "MigRolloutWaiting", f"waiting for {what}", once=f"wait-{mstate}")
            return False
        raise RolloutError(f"{change.node}: unknown rollout step {step!r} in {ROLLOUT_ANNOTATION}")

    def run(self) -> dict[str, NodeResult]:
        """Every wave in order; a wave ends when all its nodes are done."""
        for wave in self.waves:
            self.log(f"wave {wave.index}: {', '.join(c.node for c in wave.changes)}")
            pending = {c.node: c for c in wave.changes}
            deadline = self.clock() + self.timeout
            while pending:
                for name in sorted(pending):
                    try:
                        done = self.advance(pending[name])
                    except BadNodeState as exc:   # rewritten while we ran: this node only
                        self._skip(pending[name], exc)
                        done = True
                    if done:
                        del pending[name]
                if not pending:
                    break
                if self.clock() > deadline:
                    for name in sorted(pending):
                        self.event(_read(self.core, name), "MigRolloutTimedOut", f"wave {wave.index} not done "
                                   f"after {self.timeout:g} s; the node stays as it is (rerun to resume)",
                                   warning=True)
                    raise RolloutError(f"wave {wave.index} not done after {self.timeout:g} s: "
                                       f"{', '.join(sorted(pending))} (rerun to resume)")
                self.sleep(self.poll)
        skipped = sorted(n for n, r in self.results.items() if r.skipped)
        if skipped:
            raise RolloutError(f"{len(skipped)} node(s) skipped, their rollout state annotation went bad while the "
                               f"rollout ran: {', '.join(skipped)} (every other node is done; see their "
                               f"MigRolloutSkipped Events, remove the annotation and rerun)", code="GV071")
        return self.results

    def _skip(self, change: NodeChange, exc: BadNodeState) -> None:
        """Leave a node whose state annotation no longer parses as it is (a Warning Event says
        how it was left); the rest of the rollout goes on."""
        res = self.results.setdefault(change.node, NodeResult(change.node, change.to))
        res.skipped = exc.message
        node = _read(self.core, change.node)
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        self.event(node, "MigRolloutSkipped", f"skipped: {exc.message}; the node is left as it is"
                   f"{' (still cordoned)' if cordoned else ''}", warning=True)


def apply_mig_parted_config(core, namespace: str, name: str, cfg: Mapping, key: str = "config.yaml",
                            dry_run: bool = False) -> list[str]:
    """Merge the re-plan's mig-parted configs into the ConfigMap mig-manager reads (the GPU
    Operator's `migManager.config`, key `config.yaml`) before any node is relabelled; configs
    already there under other names are kept. Returns the config names written."""
    from kubernetes.client.exceptions import ApiException

    from gpuvalues.yamlio.loader import parse_yaml

    try:
        cm = read_json(core.read_namespaced_config_map(name, namespace, _preload_content=False),
                       what=f"configmap {namespace}/{name}")
    except ApiException as exc:
        raise RolloutError(f"configmap {namespace}/{name}: {exc.status} {exc.reason}") from None
    # what is in the cluster is read as untrusted as a file (aliases bounded, one document)
    current = parse_yaml((cm.get("data") or {}).get(key) or "", source=f"configmap/{namespace}/{name}",
                                error=RolloutInputError) or {"version": "v1", "mig-configs": {}}
    if not isinstance(current, dict) or not isinstance(current.get("mig-configs") or {}, dict):
        raise RolloutInputError(f"its {key} is not a mig-parted config (version, mig-configs): fix or replace it",
                                source=f"configmap/{namespace}/{name}", field=key, code="GV048")
    merged = {"version": current.get("version", "v1"),
              "mig-configs": {**(current.get("mig-configs") or {}), **cfg.get("mig-configs", {})}}
    body = {"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
            "data": {key: yaml.safe_dump(merged, sort_keys=False)}}
    answered(core.patch_namespaced_config_map(name, namespace, body, _content_type="application/merge-patch+json",
                                              _preload_content=False, **({"dry_run": "All"} if dry_run else {})),
             f"configmap {namespace}/{name}")
    return sorted(cfg.get("mig-configs", {}))
