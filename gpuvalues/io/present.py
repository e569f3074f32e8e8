"""Presentation: tables and pictures for people (the CLI's table output, ASCII and SVG
MIG layouts). Pure functions of the library's data; nothing here decides anything."""
from __future__ import annotations

from collections import Counter
import itertools
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from gpuvalues.catalog import get_gpu
from gpuvalues.io import output
from gpuvalues.planners.mig import geometry as mig
from gpuvalues.planners.mig.geometry import GpuLayout
from gpuvalues.errors import GpuValuesError
from gpuvalues.planners.scheduling.topology import DEFAULT_LABEL_PREFIX, DEFAULT_TOPOLOGY_KEY, Topology

if TYPE_CHECKING:
    from gpuvalues.planners.mig.milp.model import Plan
    from gpuvalues.fleet import Fleet

_SVG_COLORS = {1: "#9ecae1", 2: "#a1d99b", 3: "#fdd0a2", 4: "#fdae6b", 7: "#bcbddc"}


def _xml(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plan_table(data: Mapping[str, Any], pictures: Sequence[tuple[str, str]] = ()) -> str:
    """The people's view of `pipeline.plan_data`: workloads, node groups, the MIG solve
    (bounds, per-GPU layouts, baselines) and notes."""
    out = [f"GPUs in use: {data['gpus_in_use']} of {data['gpus_total']}", ""]
    out.append(output.table(["workload", "pool", "resource", "per pod", "peak", "layout gives"],
                            [[w["name"], w["pool"], w["resource"], w["per_pod"] if w.get(
                                "nodes_per_replica", 1) == 1 else
                                f"{w['per_pod']} x {w['nodes_per_replica']} pods (nodes)", w["peak_replicas"],
                              w["units"]] for w in data["workloads"]]))
    out.append(output.table(["node group", "pool", "nodes", "workloads", "labels"],
                            [[g["name"], g["pool"], g["nodes"], ", ".join(g["workloads"]) or "-",
                              ", ".join(f"{k}={v}" for k, v in g["labels"].items()) or "-"]
                             for g in data["node_groups"]]))
    mig = data.get("mig")
    if mig:
        out.append(f"MIG: {mig['gpus_used']} GPUs   LP bound: {mig['lp_bound']:.2f}   MIP bound: "
                   f"{mig['mip_bound']:g}   gap: {mig['gap']:.2%}   "
                   f"{'optimal' if mig['optimal'] else 'NOT proven optimal'}   "
                   f"solve: {mig['solve_seconds']:.3f}s")
        rows = []
        for p in mig["pools"]:
            for g in p["gpu_groups"]:
                models = Counter(i["model"] or "(spare)" for i in g["instances"])
                rows.append([p["name"], p["gpu"], g["count"], g["layout"],
                             ", ".join(f"{m} x{c}" for m, c in models.items())])
        out.append(output.table(["pool", "gpu", "gpus", "layout", "models per GPU"], rows))
        for title, pic in pictures:
            out += [title, pic, ""]
        if mig["baselines"]:
            out.append(output.table(["baseline", "gpus", "note"],
                                    [[b["name"], "n/a" if b["gpus"] is None else b["gpus"], b["note"]]
                                     for b in mig["baselines"]]))
        out += [f"warning: {w}" for w in mig["warnings"]]
    if data.get("routes"):
        # the `model` a client sends, and where the Gateway takes it
        out.append(output.table(["model (request body)", "workload", "gateway", "matched on"],
                                [[m, r["workload"], r["gateway"], r["header"]]
                                 for r in data["routes"] for m in r["models"]]))
    out += [f"note: {n}" for n in data["notes"]]
    return "\n".join(out).rstrip() + "\n"


def layout_pictures(plan_: Plan) -> list[tuple[str, str, mig.GpuLayout]]:
    """(title, ASCII picture, layout) for each distinct MIG layout in the plan."""
    out = []
    for p in plan_.pools:
        seen: dict[str, int] = Counter()
        layouts = {}
        for g in p.gpu_groups:
            if g.layout is not None:
                seen[g.layout.label()] += g.count
                layouts[g.layout.label()] = g.layout
        for label, n in seen.items():
            L = layouts[label]
            out.append((f"{p.pool.name} ({get_gpu(p.pool.gpu).name}) x{n}: {label}", L.picture(), L))
    return out


def layouts_svg(rows: Sequence[tuple[str, GpuLayout]]) -> str:
    """An SVG picture: one row per (title, layout), slots 0..N-1 left to right."""
    cell, h, top, left = 90, 34, 24, 260
    width = left + cell * max((get_gpu(L.gpu).mig.memory_slices for _, L in rows), default=8) + 10
    height = top + (h + 14) * len(rows) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="12">']
    n0 = get_gpu(rows[0][1].gpu).mig.memory_slices if rows else 8
    for i in range(n0):
        out.append(f'<text x="{left + i * cell + cell // 2}" y="16" text-anchor="middle">slot {i}</text>')
    for r, (title, L) in enumerate(rows):
        gpu = get_gpu(L.gpu)
        y = top + r * (h + 14)
        out.append(f'<text x="4" y="{y + h // 2 + 4}">{_xml(title)}</text>')
        for s in range(gpu.mig.memory_slices):
            out.append(f'<rect x="{left + s * cell}" y="{y}" width="{cell}" height="{h}" fill="#f0f0f0" stroke="#ccc"/>')
        for p in L.placements:
            prof = gpu.profile(p.profile)
            color = _SVG_COLORS.get(prof.compute_slices, "#ddd")
            x, w = left + p.start * cell + 2, prof.memory_slices * cell - 4
            out.append(f'<rect x="{x}" y="{y + 2}" width="{w}" height="{h - 4}" rx="4" fill="{color}" stroke="#333"/>')
            out.append(f'<text x="{x + w // 2}" y="{y + h // 2 + 4}" text-anchor="middle">{_xml(p.profile)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def fit_table(data: Mapping) -> str:
    """People's view of `FitReport.to_dict()`."""
    from gpuvalues.io.output import table

    out = [f"fits: {'yes' if data['fits'] else 'NO'} (min replicas: {'fit' if data['minFits'] else 'do NOT fit'}, "
           f"max replicas: {'fit' if data['maxFits'] else 'do NOT fit'})",
           f"placement: {data['placement']}"]
    for name in ("min", "max"):
        sc = data["scenarios"][name]
        out.append("")
        out.append(f"== {name} replicas: {'fits' if sc['fits'] else str(sc['pending']) + ' pod(s) Pending'}")
        rows = [(w["workload"], w["replicas"], w["scheduled"], w["pending"], w["extraReplicasThatFit"],
                 w.get("reason", "")) for w in sc["workloads"]]
        out.append(table(("WORKLOAD", "REPLICAS", "SCHEDULED", "PENDING", "MORE-FIT", "WHY PENDING"), rows).rstrip())
        node_rows = []
        for n in sc["nodes"]:
            res = ", ".join(f"{r} {v['used']}/{v['allocatable']}" for r, v in n["resources"].items())
            node_rows.append((n["node"], n["pods"], res or "-"))
        out.append(table(("NODE", "PODS", "GPU RESOURCES USED/ALLOCATABLE"), node_rows).rstrip())
        out.append("headroom: " + (", ".join(f"{r} {v} free" for r, v in sc["headroom"].items()) or "none"))
    for w in data["warnings"]:
        out.append(f"warning: {w}")
    for s in data["skipped"]:
        out.append(f"skipped: {s}")
    out.append("not modelled: " + "; ".join(data["notModelled"]))
    return "\n".join(out) + "\n"


def inventory_table(data: Mapping) -> str:
    """People's view of `Inventory.to_dict()`."""
    from gpuvalues.io.output import table

    rows = []
    for n in data["nodes"]:
        g = n.get("gpu", {})
        res = ", ".join(f"{k} {v}" for k, v in n.get("allocatable", {}).items() if k.startswith("nvidia.com/"))
        taints = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in n.get("taints", []))
        rows.append((n["name"], g.get("product") or "-", g.get("count", 0), g.get("migStrategy", "none"),
                     g.get("replicas", 1), n.get("labels", {}).get(DEFAULT_TOPOLOGY_KEY, "-"), res or "-",
                     taints or "-"))
    return table(("NODE", "PRODUCT", "GPUS", "MIG", "REPLICAS", "TOPOLOGY", "ALLOCATABLE", "TAINTS"), rows)


def simulate_table(data: Mapping[str, Any]) -> str:
    """The people's view: the plan in two lines, then behaviours side by side."""
    from gpuvalues.io.output import table

    p = data["plan"]
    head = (f"trace {data['trace']['source']}: {data['trace']['base_rps']:g}-{data['trace']['peak_rps']:g} req/s; "
            f"plan: replicas {p['minReplicas']}-{p['maxReplicas']}, metric {p['metric']['name']} "
            f"target {p['metric']['target']}, GPUs {p['gpusAtMin']:g}-{p['gpusAtMax']:g}\n")
    cols = ["behavior", "gpu_hours", "slo_violation_minutes", "slo_violation_request_pct", "scale_ups",
            "scale_downs", "flaps", "max_replicas", "mean_replicas"]
    warn = "".join(f"warning: {w}\n" for w in p.get("warnings", []))
    return head + warn + table(cols, [[row[c] for c in cols] for row in data["behaviors"]])


def topology_report(topo: Topology, *, best: int | None = None, available: Iterable[int] | None = None,
                    prefix: str = DEFAULT_LABEL_PREFIX, key: str = DEFAULT_TOPOLOGY_KEY,
                    count_nvswitch_links: bool = False) -> dict[str, Any]:
    """Plain-data summary for `gpuvalues topo`: links, cliques, labels, optional GPU choice."""
    names = [f"GPU{g}" for g in topo.gpus]
    links = {}
    for name, row in zip(names, topo.links):    # dict(zip()): C speed for 1,024 x 1,024 cells
        links[name] = cells = dict(zip(names, row))
        del cells[name]
    data: dict[str, Any] = {
        "gpus": list(topo.gpus),
        "links": links,
        "nvlinkCliques": [list(c) for c in topo.nvlink_cliques()],
        # disjoint groups a tensor-parallel pod's GPUs must stay in; the rest have no NVLink
        "nvlinkIslands": [list(g) for g in topo.nvlink_islands()],
        "nvswitch": topo.nvswitch,
        "numaAffinity": {f"GPU{g}": v for g, v in zip(topo.gpus, topo.numa_affinity)} if topo.numa_affinity else {},
        "labels": topo.labels(prefix=prefix, key=key),
    }
    if best is not None:
        free = sorted(topo.gpus if available is None else set(available))
        if not 1 <= best <= len(free):
            raise GpuValuesError(f"asked for {best} GPUs, but {len(free)} are available "
                                 f"({', '.join(map(str, free)) or 'none'}); ask for 1 to {len(free)}",
                                 field="best")
        chosen, exact, bound = topo.best_gpu_choice(best, available, count_nvswitch_links=count_nvswitch_links)
        data["bestGpuSet"] = {"size": best, "gpus": list(chosen),
                              "score": sum(topo.pair_score(a, b, count_nvswitch_links=count_nvswitch_links)
                                           for a, b in itertools.combinations(chosen, 2)),
                              "nvswitchLinksScored": count_nvswitch_links or not topo.nvswitch,
                              # False past MAX_SEARCH_STATES: a greedy set, its score <= the bound
                              "exact": exact, "scoreUpperBound": bound}
    return data


def topology_table(data: dict) -> str:
    """People's view of `topology_report`."""
    from gpuvalues.io.output import table

    gpus = data["gpus"]
    names = [f"GPU{g}" for g in gpus]
    rows = []
    for i, name in enumerate(names):   # the report's rows list every other GPU in order
        links = data["links"][name]
        cells = list(links.values())
        cells.insert(i, "X")
        if len(cells) != len(names) or (i == 0 and list(links) != names[1:]):
            cells = [("X" if b == name else links[b]) for b in names]
        rows.append([name, *cells, data["numaAffinity"].get(name) or "-"])
    out = [table([""] + [f"GPU{g}" for g in gpus] + ["NUMA"], rows).rstrip()]
    cliques = data["nvlinkCliques"]
    out.append("NVLink cliques: " + (", ".join("{" + ",".join(map(str, c)) + "}" for c in cliques) or "none")
               + (" (through NVSwitch)" if data["nvswitch"] else ""))
    islands = data.get("nvlinkIslands") or []
    alone = sorted(set(gpus) - {g for i in islands for g in i})
    if alone:    # tensor-parallel pods must not get these
        out.append("GPUs without NVLink: " + ", ".join(f"GPU{g}" for g in alone))
    out.append("labels:")
    out.extend(f"  {k}={v}" for k, v in data["labels"].items())
    if "bestGpuSet" in data:
        b = data["bestGpuSet"]
        out.append(f"device plugin would give a {b['size']}-GPU pod: "
                   + (", ".join(f"GPU{g}" for g in b["gpus"]) or "nothing (not enough GPUs)")
                   + f" (score {b['score']})"
                   + ("" if b.get("exact", True) else
                      f"; greedy, not upstream's exhaustive choice: the best set scores at most "
                      f"{b['scoreUpperBound']}"))
    return "\n".join(out) + "\n"


def values_table(fleet: Fleet) -> str:
    """People's view of a fleet's releases: one row per release, then the decisions."""
    rows = []
    for r in fleet.releases:
        v = r.values
        if r.is_platform:
            parts = [k for k, x in v["platform"].items() if isinstance(x, dict) and x.get("enabled")]
            rows.append([r.name, r.namespace, "platform", "-", "-", "-", ", ".join(parts) or "-"])
            continue
        gpu = v["gpu"]
        unit = gpu["mode"] + (f" {gpu['mig']['profile']}" if gpu["mode"] == "mig" else "")
        a = v.get("autoscaling", {})
        metric = (a.get("metrics") or [{}])[0]
        rows.append([r.name, r.namespace, unit, gpu["count"], a.get("engine"),
                     f"{a.get('minReplicas', '-')}..{a.get('maxReplicas', '-')}",
                     f"{metric.get('name', '-')} {metric.get('target', '')}".strip()])
    text = output.table(["release", "namespace", "gpu", "per pod", "autoscaling", "replicas",
                         "metric / parts"], rows)
    for r in fleet.releases:
        text += "".join(f"\n{d}" for d in r.decisions)
    return text + "\n"


def scale_to_zero_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The trade side by side: GPU-hours saved against requests that waited for a cold start."""
    from gpuvalues.io.output import table

    cols = ["cooldown_s", "gpu_hours_min1", "gpu_hours_zero", "gpu_hours_saved", "saved_pct", "cold_starts",
            "requests_waited", "waited_pct", "mean_wait_s", "max_wait_s"]
    return table(cols, [[r[c] for c in cols] for r in rows])


def doctor_table(data: Mapping[str, Any]) -> str:
    """The people's view of a doctor `Report.to_dict()` (its `DoctorFinding`s as dicts):
    one table per workload (its replicas and its findings), then the platform's findings,
    then notes."""
    out = []
    by_workload: dict[str, list[Any]] = {}
    for f in data["findings"]:
        by_workload.setdefault(f["workload"], []).append(f)
    for w in data["workloads"]:
        out.append(f"workload {w['workload']} ({w['namespace']}): {w['running']}/{w['desired']} Running, "
                   f"{w['pending']} Pending" + (f"; scaled by {w['autoscaler']}" if w["autoscaler"] else ""))
        rows = [[f["code"], f["object"], f["message"], f["fix"]] for f in by_workload.pop(w["workload"], [])]
        out.append(output.table(["code", "object", "broken link", "fix"], rows) if rows else "  healthy\n")
    rest = [f for fs in by_workload.values() for f in fs]
    if rest:
        out.append("platform and nodes:")
        out.append(output.table(["code", "object", "broken link", "fix"],
                                [[f["code"], f["object"], f["message"], f["fix"]] for f in rest]))
    out += [f"note: {n}\n" for n in data.get("notes", [])]
    out.append("healthy: no finding\n" if data["healthy"] else f"{len(data['findings'])} finding(s)\n")
    return "\n".join(x.rstrip("\n") for x in out) + "\n"
