"""gpuvalues.planners.scheduling.topology: parsing real `nvidia-smi topo -m` outputs, cliques, labels, GPU choice.

Fixtures in data/topo/*.txt are real outputs from public bug reports (source in each
file's header). Expected values below were read off those files by hand. The GPU-choice
tests use upstream go-gpuallocator test cases (data/topo/go-gpuallocator-cases.json) and
an independent brute-force port of its exhaustive search as the oracle.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuvalues.errors import GpuValuesError, TopologyParseError
from gpuvalues.planners.scheduling.topology import Topology, allocate_best_effort, parse_topo_matrix

DATA = Path(__file__).parent / "data" / "topo"
FIXTURES = sorted(p.name for p in DATA.glob("*.txt"))
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def load(name: str) -> Topology:
    return parse_topo_matrix((DATA / name).read_text(), source=name)


def test_every_fixture_names_its_public_source():
    assert len(FIXTURES) >= 9
    for name in FIXTURES:
        first = (DATA / name).read_text().splitlines()[0]
        assert first.startswith("# source: https://github.com/"), name


# -- parsing: expected values read off each fixture by hand ------------------------------
def test_pcie_8x4090_raw_tabs_no_pcie_switch():
    t = load("pcie-8x4090-sys.txt")
    assert t.gpus == tuple(range(8))
    assert all(t.link(a, b) == "SYS" for a, b in itertools.permutations(range(8), 2))
    assert t.nvlink_cliques() == []
    assert t.numa_affinity == ("0",) * 4 + ("1",) * 4
    assert t.cpu_affinity[0] == "0-55,112-167" and t.cpu_affinity[7] == "56-111,168-223"
    assert t.gpu_numa_id == (None,) * 8  # N/A
    assert t.nics == ("NIC0", "NIC1")
    assert t.gpu_nic_links[6] == ("PHB", "PHB") and t.gpu_nic_links[0] == ("SYS", "SYS")
    assert t.labels()["nvidia.com/gpu.topology"] == "PCIe"


def test_hgx_h100_nvswitch_all_nv18():
    t = load("hgx-h100-nv18.txt")
    assert t.gpus == tuple(range(8))
    assert t.nvlinks(3, 6) == 18
    assert t.nvlink_cliques() == [tuple(range(8))]
    assert t.nvswitch  # 7 x 18 links per GPU cannot be direct
    assert t.numa_affinity == ("0",) * 4 + ("1",) * 4
    assert t.cpu_affinity[4] == "48-95,144-191"
    assert t.nics == ()
    labels = t.labels()
    assert labels["nvidia.com/gpu.topology"] == "NV8"
    assert labels["topology.gpu-inference.io/nvswitch"] == "true"
    assert labels["topology.gpu-inference.io/nvlink-min-links"] == "18"
    assert labels["topology.gpu-inference.io/numa-nodes"] == "2"
    assert labels["topology.gpu-inference.io/max-gpus-per-numa"] == "4"
    assert labels["topology.gpu-inference.io/pcie-closest"] == "none"


def test_a100_pair_with_blank_affinity_columns():
    t = load("a100-nv12-pair-blank-affinity.txt")
    assert t.gpus == (0, 1) and t.link(0, 1) == "NV12"
    assert t.cpu_affinity == (None, None) and t.numa_affinity == (None, None)
    assert t.gpu_numa_id == (None, None)
    assert t.nics == tuple(f"NIC{i}" for i in range(8))
    assert t.gpu_nic_links[0][6:] == ("PXB", "PXB")
    assert not t.nvswitch  # 12 links, possible as direct links: not detectable from two GPUs
    assert t.labels()["nvidia.com/gpu.topology"] == "NV2"
    assert t.labels()["topology.gpu-inference.io/numa-nodes"] == "unknown"


def test_two_5090_on_one_host_bridge():
    t = load("pcie-2x5090-phb.txt")
    assert t.link(0, 1) == "PHB" and t.numa_affinity == ("0", "0") and t.cpu_affinity == ("0-63", "0-63")
    assert t.labels()["topology.gpu-inference.io/pcie-closest"] == "PHB"


def test_rtx3090_nvlink_bridged_pairs():
    t = load("rtx3090-nv4-bridged-pairs.txt")
    assert t.link(0, 2) == "NV4" and t.link(1, 3) == "NV4" and t.link(0, 1) == "PHB" and t.link(0, 3) == "NODE"
    assert t.nvlink_cliques() == [(0, 2), (1, 3)]
    labels = t.labels()
    assert labels["nvidia.com/gpu.topology"] == "NV2"
    assert labels["topology.gpu-inference.io/nvlink-cliques"] == "2"
    assert labels["topology.gpu-inference.io/nvlink-min-links"] == "4"


def test_h100_four_gpus_direct_nv6():
    t = load("h100-4x-nv6-nics.txt")
    assert t.nvlink_cliques() == [(0, 1, 2, 3)]
    assert not t.nvswitch  # 3 x 6 = 18 links: direct NVLink is possible
    assert t.numa_affinity == ("3", "1", "7", "5")
    assert t.cpu_affinity[0] == "6,14,22,30"
    assert [row.index("PIX") for row in t.gpu_nic_links] == [0, 1, 2, 3]
    assert t.labels()["topology.gpu-inference.io/max-gpus-per-numa"] == "1"


def test_l40s_prompt_preamble_and_nic_legend():
    t = load("l40s-4x-pcie-nic-legend.txt")
    assert t.gpus == (0, 1, 2, 3)
    assert t.link(0, 1) == "NODE" and t.link(1, 2) == "SYS"
    assert dict(t.nic_names) == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert t.numa_affinity == ("0", "0", "1", "1")


def test_odd_gpu_count_phb_node_mix():
    t = load("pcie-5x4090-phb-node.txt")
    assert t.gpus == (0, 1, 2, 3, 4)
    assert t.link(1, 2) == "PHB" and t.link(3, 4) == "PHB" and t.link(1, 3) == "NODE" and t.link(0, 4) == "SYS"
    assert t.numa_affinity == ("1", "0", "0", "0", "0")


def test_dgx_a100_old_mlx5_columns_numa_range_no_gpu_numa_id():
    t = load("dgx-a100-mlx5-pxb.txt")
    assert t.nics == tuple(f"mlx5_{i}" for i in range(12))
    assert t.numa_affinity == ("6-7",) * 8
    assert t.gpu_numa_id == ()  # column absent on this driver
    assert t.link(0, 1) == "PXB" and t.link(0, 2) == "SYS"
    assert t.gpu_nic_links[2][2:4] == ("PXB", "PXB")


@pytest.mark.parametrize("name", FIXTURES)
def test_labels_are_valid_kubernetes_labels(name):
    for key, value in load(name).labels().items():
        assert LABEL_KEY.match(key), key
        assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


@pytest.mark.parametrize("name", FIXTURES)
def test_to_dict_round_trip(name):
    t = load(name)
    assert Topology.from_dict(json.loads(json.dumps(t.to_dict()))) == t


# -- forms derived from the real fixtures (the variations the issue lists) ---------------
def _variants(text: str) -> dict[str, str]:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    header = next(line for line in body.splitlines() if "GPU0" in line and "CPU" in line)
    return {
        "tabs-to-spaces": body.replace("\t", "    "),
        "no-leading-tab": body.replace(header, header.lstrip()),
        "crlf": body.replace("\n", "\r\n"),
        "trailing-spaces": "\n".join(line + "   " for line in body.splitlines()),
        "ansi-underlined-header": body.replace(header, "\x1b[4m" + header + "\x1b[0m"),
        "nic-preamble": "76 NICs found in the topology, only displaying 56 in the matrix.\n" + body,
        "no-comment-header": body,
    }


@pytest.mark.parametrize("name", ["pcie-8x4090-sys.txt", "hgx-h100-nv18.txt", "dgx-a100-mlx5-pxb.txt",
                                  "rtx3090-nv4-bridged-pairs.txt", "l40s-4x-pcie-nic-legend.txt"])
def test_equivalent_forms_parse_the_same(name):
    original = load(name)
    for form, text in _variants((DATA / name).read_text()).items():
        assert parse_topo_matrix(text) == original, form


def test_old_soc_spelling_means_sys():
    text = (DATA / "pcie-8x4090-sys.txt").read_text()
    assert parse_topo_matrix(text.replace("SYS", "SOC")) == load("pcie-8x4090-sys.txt")


def test_minimal_old_driver_form_without_affinity_columns():
    t = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n")
    assert t.link(0, 1) == "PIX" and t.numa_affinity == () and t.cpu_affinity == ()


# -- malformed input: one error naming the line -----------------------------------------
def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_glued_cells_from_a_damaged_paste():
    text = (DATA / "h100-4x-nv6-nics.txt").read_text().replace("PIX     SYS     SYS     SYS     6,14",
                                                               "PIXSYS     SYS     SYS     6,14")
    with pytest.raises(TopologyParseError) as exc:
        parse_topo_matrix(text, source="t.txt")
    assert exc.value.line == _line_of(text, "PIXSYS")
    assert str(exc.value).startswith(f"t.txt:{exc.value.line}: ")


def test_asymmetric_link():
    text = (DATA / "rtx3090-nv4-bridged-pairs.txt").read_text()
    bad = text.replace("GPU3    NODE    NV4     PHB", "GPU3    NODE    NV4     PIX")
    with pytest.raises(TopologyParseError) as exc:
        parse_topo_matrix(bad)
    assert exc.value.line == _line_of(bad, "GPU3    NODE") and "PHB" in exc.value.message


def test_truncated_matrix():
    text = (DATA / "hgx-h100-nv18.txt").read_text()
    cut = "\n".join(line for line in text.splitlines() if not line.startswith("GPU7"))
    with pytest.raises(TopologyParseError, match="no row for GPU7"):
        parse_topo_matrix(cut)


def test_self_link_off_the_diagonal():
    with pytest.raises(TopologyParseError) as exc:
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \t X \nGPU1\tPIX\t X \n")
    assert exc.value.line == 2


def test_unknown_cell_and_unknown_row():
    with pytest.raises(TopologyParseError, match="not a link") as exc:
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n")
    assert exc.value.line == 2
    with pytest.raises(TopologyParseError, match="not a column") as exc:
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU9\tPIX\t X \n")
    assert exc.value.line == 3


def test_no_header():
    with pytest.raises(TopologyParseError) as exc:
        parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert exc.value.line == 1


def test_too_many_affinity_fields():
    with pytest.raises(TopologyParseError) as exc:
        parse_topo_matrix("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\t0\t1\n")
    assert exc.value.line == 2


# -- cliques on hand-built topologies ------------------------------------------------------
def _topology(n: int, links: dict[tuple[int, int], str], numa=None, default="SYS") -> Topology:
    rows = [["X" if i == j else links.get((min(i, j), max(i, j)), default) for j in range(n)] for i in range(n)]
    return Topology(gpus=tuple(range(n)), links=tuple(tuple(r) for r in rows),
                    numa_affinity=tuple(numa) if numa else ())


def test_dgx1_volta_hybrid_cube_mesh_cliques():
    # NVLink pairs of the DGX-1 Volta test node in go-gpuallocator common_test.go.
    nv = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
          (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
    t = _topology(8, {k: f"NV{v}" for k, v in nv.items()})
    assert t.nvlink_cliques() == [(0, 1, 2, 3), (4, 5, 6, 7), (0, 4), (1, 5), (2, 6), (3, 7)]
    assert t.labels()["nvidia.com/gpu.topology"] == "NV4"
    assert not t.nvswitch  # at most 6 links per V100


def test_topology_rejects_inconsistent_matrices():
    with pytest.raises(GpuValuesError):
        Topology(gpus=(0, 1), links=(("X", "NV2"), ("NV1", "X")))
    with pytest.raises(GpuValuesError):
        Topology(gpus=(0, 1), links=(("X",), ("SYS", "X")))


def test_label_key_and_prefix_are_configurable_and_checked():
    t = load("rtx3090-nv4-bridged-pairs.txt")
    labels = t.labels(prefix="example.com/gpu-", key="example.com/nvlink")
    assert labels["example.com/nvlink"] == "NV2" and labels["example.com/gpu-nvlink-cliques"] == "2"
    with pytest.raises(GpuValuesError, match="label key"):
        t.labels(prefix="Not A Prefix/")


# -- best_gpu_set: upstream cases, hand-computed cases, brute-force oracle -----------------
CASES = json.loads((DATA / "go-gpuallocator-cases.json").read_text())
# go-gpuallocator besteffort_policy.go calculateGPUPairScore, written out independently.
UPSTREAM_SCORE = {"P2PLinkCrossCPU": 10, "P2PLinkSameCPU": 20, "P2PLinkHostBridge": 30, "P2PLinkMultiSwitch": 40,
                  "P2PLinkSingleSwitch": 50, "P2PLinkSameBoard": 60, "SingleNVLINKLink": 100, "TwoNVLINKLinks": 200}


def _upstream_scores(node: str):
    links = CASES["nodes"][node]["links"]
    return lambda a, b: sum(UPSTREAM_SCORE[t] for t in links.get(f"{a}-{b}", []))


@pytest.mark.parametrize("case", CASES["policyCases"], ids=lambda c: c["description"])
def test_upstream_best_effort_policy_cases(case):
    got = allocate_best_effort(_upstream_scores(case["node"]), case["available"], case["required"], case["size"])
    assert sorted(got) == sorted(case["result"])


@pytest.mark.parametrize("seq", CASES["allocatorSequences"], ids=lambda s: s["test"])
def test_upstream_allocator_sequences(seq):
    remaining = list(range(CASES["nodes"][seq["node"]]["gpus"]))
    for size, expected in seq["steps"]:
        got = allocate_best_effort(_upstream_scores(seq["node"]), remaining, (), size)
        assert sorted(got) == expected
        remaining = [g for g in remaining if g not in got]


def test_prefers_the_split_that_leaves_the_node_least_fragmented():
    # 0-1 NV2, 1-2 NV3, 2-3 NV2, everything else SYS; one NUMA node.
    # Pair scores: 0-1 = 200 + 20 (NODE, same NUMA), 1-2 = 320, 2-3 = 220, others 10.
    # Greedy would take {1,2} (320) and strand 0 and 3 (10). Partitions: {01,23} = 440,
    # {03,12} = 330, {02,13} = 20 -> the plugin keeps {01,23} and returns its first best set.
    t = _topology(4, {(0, 1): "NV2", (1, 2): "NV3", (2, 3): "NV2"}, numa=["0"] * 4)
    assert t.pair_score(1, 2) == 320 and t.pair_score(0, 3) == 10
    assert t.best_gpu_set(2) == (0, 1)
    assert t.best_gpu_set(2, available=[1, 2, 3]) == (1, 2)  # 3 left: {1,2}+{3,pad} beats {2,3}+{1,pad}


def test_bridged_pairs_fixture():
    t = load("rtx3090-nv4-bridged-pairs.txt")
    assert t.best_gpu_set(2) == (0, 2)
    assert t.best_gpu_set(2, available=[1, 2, 3]) == (1, 3)
    assert t.best_gpu_set(1) == (0,)  # upstream: one GPU -> the first available
    assert t.best_gpu_set(2, required=[3]) == (1, 3)
    assert t.best_gpu_set(5) == ()


def test_nvswitch_machine_scores_like_the_plugin():
    t = load("hgx-h100-nv18.txt")
    # NVLinks end at the switch: the plugin counts 0 of them; PCIe part estimated from NUMA.
    assert t.pair_score(0, 1) == 20 and t.pair_score(0, 4) == 10
    assert t.pair_score(0, 1, count_nvswitch_links=True) == 1800 + 20
    assert t.best_gpu_set(4) == (0, 1, 2, 3)
    assert t.best_gpu_set(2, available=[0, 4, 5]) == (4, 5)  # same NUMA node


def _go_brute_force(score, avail, required, size):
    """Literal, exhaustive port of bestEffortPolicy.Allocate (upstream order and ties)."""
    if size <= 0 or len(avail) < size or len(required) > size or not set(required) <= set(avail):
        return []
    if size == 1:
        parts = [[[d]] for d in avail]
    else:
        devices = list(avail) + [None] * ((-len(avail)) % size)
        padding = devices.count(None)
        parts = []

        def iterate(devs, accum):
            if size == len(devs):
                parts.append(accum + [devs])
                return
            for combo in itertools.combinations(devs[1:], size - 1):
                s = [devs[0]] + list(combo)
                if s.count(None) not in (0, padding):
                    continue
                rest = [d for d in devs if d not in s] if None in s else [d for d in devs if d not in s or d is None]
                iterate(rest, accum + [s])
        iterate(devices, [])

    def set_score(s):
        return sum(score(a, b) for a, b in itertools.combinations([d for d in s if d is not None], 2))

    best, best_score = None, 0
    for p in parts:
        if not any(None not in s and set(required) <= set(s) for s in p):
            continue
        total = sum(set_score(s) for s in p)
        if best is None or total > best_score:
            best, best_score = p, total
    if best is None:
        return []
    sets = [s for s in best if set(required) <= set(s) and None not in s]
    chosen = max(sets, key=set_score)  # max() keeps the first of equal scores, like upstream
    return sorted(chosen)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_matches_exhaustive_search(data):
    m = data.draw(st.integers(2, 7))
    values = st.sampled_from([10, 20, 30, 40, 50, 110, 220, 420, 1210])
    table = {}
    for a, b in itertools.combinations(range(m), 2):
        table[(a, b)] = table[(b, a)] = data.draw(values)
    size = data.draw(st.integers(1, m))
    required = data.draw(st.lists(st.integers(0, m - 1), max_size=2, unique=True))
    score = lambda a, b: table[(a, b)]  # noqa: E731
    expected = _go_brute_force(score, list(range(m)), required, size)
    assert list(allocate_best_effort(score, list(range(m)), required, size)) == expected


# -- the CLI (thin shell; in-process) -------------------------------------------------------------
def test_cli_topo(capsys):
    from gpuvalues.cli import main

    path = str(DATA / "rtx3090-nv4-bridged-pairs.txt")
    assert main(["topo", path, "--best", "2", "--available", "1,2,3", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bestGpuSet"]["gpus"] == [1, 3] and data["nvlinkCliques"] == [[0, 2], [1, 3]]
    assert data["labels"]["nvidia.com/gpu.topology"] == "NV2"
    assert main(["topo", path]) == 0
    assert "NVLink cliques: {0,2}, {1,3}" in capsys.readouterr().out
    assert main(["topo", str(DATA / "go-gpuallocator-cases.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "go-gpuallocator-cases.json:1:" in err[0]


def test_hgx_a100_nv12_with_nic_legend():
    t = load("hgx-a100-nv12-nic-legend.txt")
    assert t.nvlink_cliques() == [tuple(range(8))] and t.nvswitch  # 7 x 12 links per GPU
    assert t.numa_affinity == ("3", "3", "1", "1", "7", "7", "5", "5")
    assert t.gpu_numa_id == ()
    assert dict(t.nic_names)["NIC9"] == "mlx5_9"
    assert t.gpu_nic_links[4][4:6] == ("PXB", "PXB")
    # NVLink scores 0 behind NVSwitch (plugin); same NUMA 20, else 10: pairs by NUMA node
    assert t.best_gpu_set(2) == (0, 1)
    assert t.best_gpu_set(2, available=[1, 2, 3, 6]) == (2, 3)
    assert t.best_gpu_set(4) == (0, 1, 2, 3)


def test_hgx_h100_raw_tabs_with_cut_nic_rows():
    t = load("hgx-h100-nv18-tabs-nics.txt")
    assert t.nics == tuple(f"NIC{i}" for i in range(9))
    assert t.gpu_nic_links[0][8] == "PIX" and t.gpu_nic_links[7][1] == "PIX"
    assert t.cpu_affinity == ("0-79",) * 4 + ("80-159",) * 4 and t.gpu_numa_id == (None,) * 8


def test_columns_run_together_are_an_error():
    # vLLM's collect_env sometimes glues NUMA Affinity and GPU NUMA ID ("0N/A"), e.g. vllm-project/vllm#31884
    text = (DATA / "hgx-h100-nv18.txt").read_text().replace("0-47,96-143     0               N/A",
                                                            "0-47,96-143      0N/A", 1)
    with pytest.raises(TopologyParseError, match="not a CPU/NUMA list") as exc:
        parse_topo_matrix(text)
    assert exc.value.line == _line_of(text, "0N/A")


def test_pcie_switch_pairs_are_preferred():
    t = load("dgx-a100-mlx5-pxb.txt")  # PXB between GPU pairs behind one PCIe switch, SYS otherwise
    assert t.pair_score(0, 1) == 40 and t.pair_score(0, 2) == 10
    assert t.best_gpu_set(2) == (0, 1)
    assert t.best_gpu_set(2, available=[1, 2, 3]) == (2, 3)
    # 3 of {0..4}: {0,1,4}+{2,3} = 60+40 keeps the other PXB pair whole; {0,1,2}+{3,4} = 60+10 would not
    assert t.best_gpu_set(3, available=[0, 1, 2, 3, 4]) == (0, 1, 4)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(FIXTURES), data=st.data())
def test_damaged_input_gives_a_parse_error_or_a_topology(name, data):
    """Cut, duplicate or garble lines of a real output: never a crash, only TopologyParseError."""
    lines = (DATA / name).read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "dup", "truncate", "garble"]))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "truncate":
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
        else:
            lines[i] = data.draw(st.text(alphabet="GPUNVX0123456789 \t-,/SYSPIXN", max_size=40))
        if not lines:
            lines = [""]
    try:
        t = parse_topo_matrix("\n".join(lines))
    except TopologyParseError as exc:
        assert exc.line is not None and exc.line >= 1
    else:
        assert len(t.links) == len(t.gpus) >= 1


# -- a degraded NVSwitch node, NVLink groups, NUMA ranges (issue 23) --------------------
def test_degraded_nvswitch_node_is_labelled_by_its_worst_gpu():
    t = load("hgx-h100-degraded-gpu7.txt")
    assert t.nvlink_cliques() == [(0, 1, 2, 3, 4, 5, 6)]
    labels = t.labels()
    # GPU7 has no NVLink: the node is not NV7 for every GPU a pod may get
    assert labels["nvidia.com/gpu.topology"] == "PCIe"
    assert labels["topology.gpu-inference.io/nvlink-clique-size"] == "7"   # the fact stays
    assert load("hgx-h100-nv18.txt").labels()["nvidia.com/gpu.topology"] == "NV8"


def test_worst_gpu_rule_on_uneven_islands():
    # a 4-clique and a bridged pair: every GPU can count on 2 NVLinked GPUs, not 4
    nv = {(a, b): "NV4" for a, b in itertools.combinations(range(4), 2)}
    nv[(4, 5)] = "NV2"
    t = _topology(6, nv)
    assert t.nvlink_cliques()[0] == (0, 1, 2, 3)
    assert t.labels()["nvidia.com/gpu.topology"] == "NV2"
    assert t.nvlink_islands() == ((0, 1, 2, 3), (4, 5))


@pytest.mark.parametrize("name, size, sets", [
    ("hgx-h100-nv18.txt", 4, 2), ("hgx-h100-nv18.txt", 8, 1),
    ("hgx-h100-degraded-gpu7.txt", 4, 1), ("hgx-h100-degraded-gpu7.txt", 2, 3),
    ("hgx-h100-degraded-gpu7.txt", 8, 0), ("rtx3090-nv4-bridged-pairs.txt", 2, 2),
    ("rtx3090-nv4-bridged-pairs.txt", 4, 0), ("pcie-8x4090-sys.txt", 2, 0),
])
def test_tensor_parallel_sets_stay_inside_an_nvlink_group(name, size, sets):
    t = load(name)
    assert t.tp_sets(size) == sets
    groups = t.nvlink_islands()
    # every set counted lies inside one island (read the islands back: disjoint, all NVLinked)
    assert sum(len(g) // size for g in groups) == sets
    for g in groups:
        assert all(t.nvlinks(a, b) for a, b in itertools.combinations(g, 2))
    assert len({x for g in groups for x in g}) == sum(len(g) for g in groups)


@pytest.mark.parametrize("text, nodes", [
    ("0", {0}), ("6-7", {6, 7}), ("0,2", {0, 2}), ("0-1,3", {0, 1, 3}), ("3-3", {3}),
])
def test_numa_affinity_ranges(text, nodes):
    from gpuvalues.planners.scheduling.topology import numa_nodes
    assert numa_nodes(text) == frozenset(nodes)


def test_numa_range_counts_every_node():
    t = load("dgx-a100-mlx5-pxb.txt")         # every GPU: NUMA Affinity 6-7
    labels = t.labels()
    assert labels["topology.gpu-inference.io/numa-nodes"] == "2"
    assert labels["topology.gpu-inference.io/max-gpus-per-numa"] == "8"
    mixed = _topology(3, {}, numa=("0,2", "0-1,3", "1"))
    assert mixed.labels()["topology.gpu-inference.io/numa-nodes"] == "4"
    assert mixed.labels()["topology.gpu-inference.io/max-gpus-per-numa"] == "2"


def test_numa_range_past_any_machine_is_a_parse_error():
    text = (DATA / "dgx-a100-mlx5-pxb.txt").read_text().replace("240-255\t6-7", "240-255\t0-99999999", 1)
    assert "0-99999999" in text
    with pytest.raises(TopologyParseError, match="more than 1024 NUMA nodes"):
        parse_topo_matrix(text, source="t")


def test_topo_report_names_the_gpus_without_nvlink():
    from gpuvalues.io.present import topology_table
    from gpuvalues.io.present import topology_report
    data = topology_report(load("hgx-h100-degraded-gpu7.txt"))
    assert data["nvlinkIslands"] == [[0, 1, 2, 3, 4, 5, 6]]
    assert "GPUs without NVLink: GPU7" in topology_table(data)
    assert "without NVLink" not in topology_table(topology_report(load("hgx-h100-nv18.txt")))
