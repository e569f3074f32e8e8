"""One error contract on every command and reader (issue 25), through the real CLI.

Every refusal is one stderr line `gpuvalues: error: FILE:LINE:COL: FIELD: message [GVxxx]`
(line:col when the problem is inside a file, FIELD when it has one, the code registered
in errors.CODES), exit 2; nothing on stdout; no traceback. A server that is down or busy
is not bad input: exit 3, GV036. The bounds, names and labels each reader refuses mirror
what Kubernetes refuses (gpuvalues.kube, citing apimachinery's validation.go). Also here:
one file/one folder rules of `values -o`, install commands that work from any folder
(run with the real helm from another directory), and `--output json` printing one JSON
document on every command. In-process `cli.main` (the same code as the binary) except
where a real server or process is the point.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from gpuvalues import cli
from gpuvalues.errors import CODES
from tests.conftest import ROOT, TOOLS

MIXED = ROOT / "examples" / "mixed-a100-h100-mig.yaml"
SINGLE = ROOT / "examples" / "single-a100.yaml"
CURRENT = (ROOT / "examples" / "current" / "mixed-a100-h100-mig.yaml").read_text()
# file:line:col (line-oriented text too: CSV traces and nvidia-smi CSV, `topo -m` output)
LINE = re.compile(r"gpuvalues: error: (?P<where>\S+?)(:(?P<line>\d+)(:(?P<col>\d+))?)?: (?P<rest>.*) "
                  r"\[(?P<code>GV\d{3})\]$")


# 48 GPUs NVLinked to all but their pair partner: 2^24 maximal cliques (Moon and Moser's worst case)
MOON_MOSER = "\t" + "\t".join(f"GPU{j}" for j in range(48)) + "\n" + "".join(
    f"GPU{i}\t" + "\t".join("X" if i == j else "SYS" if i // 2 == j // 2 else "NV1" for j in range(48)) + "\n"
    for i in range(48))


def node(**edits) -> dict:
    n = {"kind": "Node", "metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "4"}},
        "status": {"capacity": {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"}}}
    for path, value in edits.items():
        d = n
        keys = path.split("__")
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        d[keys[-1]] = value
    return n


def nodes_json(**edits) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [node(), node(**{"metadata__name": "n2", **edits})]},
                      indent=1)


def ours(nodes_yaml: str) -> str:
    return "apiVersion: gpuvalues/v1\nkind: Inventory\nnodes:\n" + nodes_yaml


# (name, file name, file text, argv with {f} for the file, code, field (or None), the
# value the line:col must point at (or None))
CASES = [
    # plan --current: the current-layout reader
    ("current: a list where a label value belongs", "c.yaml",
     CURRENT.replace("nvidia.com/mig.config: a100-mig\n", "nvidia.com/mig.config: [a]\n", 1),
     ["plan", MIXED, "--current", "{f}"], "GV037", "nodes.a100-mig-1.labels.nvidia.com/mig.config", "[a]"),
    ("current: a list where the pool name belongs", "c.yaml",
     CURRENT.replace("pool: a100-mig\n", "pool: [a100-mig]\n", 1),
     ["plan", MIXED, "--current", "{f}"], "GV000", "nodes.a100-mig-1.pool", "[a100-mig]"),
    ("current: node name with $()", "c.yaml", CURRENT.replace("  a100-mig-1:", '  "$(touch x)":', 1),
     ["plan", MIXED, "--current", "{f}"], "GV037", "nodes.$(touch x)", '"$(touch x)"'),
    ("current: node name of 300 characters", "c.yaml", CURRENT.replace("  a100-mig-1:", "  " + "a" * 300 + ":", 1),
     ["plan", MIXED, "--current", "{f}"], "GV037", None, "aaaa"),
    ("current: a 10 MB label value", "c.yaml",
     CURRENT.replace("nvidia.com/mig.config: a100-mig\n", "nvidia.com/mig.config: a100-mig\n      x: " + "v" * 10_000_000 + "\n", 1),
     ["plan", MIXED, "--current", "{f}"], "GV037", None, "vvvv"),
    ("current: a MIG count of 10^30", "c.yaml", CURRENT.replace("1g.10gb: 4", "1g.10gb: " + "1" + "0" * 30, 1),
     ["plan", MIXED, "--current", "{f}"], "GV100", "mig-configs.a100-mig[0].mig-devices", None),
    ("current: pods out of range", "c.yaml", CURRENT.replace("pods: 9", "pods: 123456789", 1),
     ["plan", MIXED, "--current", "{f}"], "GV038", "nodes.a100-mig-1.pods", "123456789"),
    ("current: a key given twice", "c.yaml", CURRENT + "version: v1\n",
     ["plan", MIXED, "--current", "{f}"], "GV039", None, "version"),
    ("current: unknown key on a node", "c.yaml", CURRENT.replace("    pods: 9", "    pods: 9\n    podz: 1", 1),
     ["plan", MIXED, "--current", "{f}"], "GV000", "nodes.a100-mig-1.podz", "1"),
    # inventory (kubectl JSON, our YAML)
    ("inventory: capacity 1e400", "n.json", nodes_json(status__capacity__cpu="1e400"),
     ["inventory", "--inventory", "{f}"], "GV038", "items[1].status.capacity.cpu", '"1e400"'),
    ("inventory: 1e400 GPUs", "n.json", nodes_json(status__capacity={"nvidia.com/gpu": "1e400"}),
     ["inventory", "--inventory", "{f}"], "GV038", "items[1].status.capacity.nvidia.com/gpu", '"1e400"'),
    ("inventory: a MIG count of 10^30", "n.json",
     nodes_json(metadata__labels={"nvidia.com/mig-1g.10gb.count": "1" + "0" * 30}),
     ["inventory", "--inventory", "{f}"], "GV000", "items[1].metadata.labels.nvidia.com/mig-1g.10gb.count", '"1000'),
    ("inventory: gpu.count abc", "n.json", nodes_json(metadata__labels={"nvidia.com/gpu.count": "abc"}),
     ["inventory", "--inventory", "{f}"], "GV000", "items[1].metadata.labels.nvidia.com/gpu.count", '"abc"'),
    ("inventory: gpu.count 5000", "n.json", nodes_json(metadata__labels={"nvidia.com/gpu.count": "5000"}),
     ["inventory", "--inventory", "{f}"], "GV038", "items[1].metadata.labels.nvidia.com/gpu.count", '"5000"'),
    ("inventory: a key given twice", "n.json", '{"kind": "List",\n "items": [],\n "items": []}',
     ["inventory", "--inventory", "{f}"], "GV039", None, '"items"'),
    ("inventory: a key given twice inside a node", "n.json",
     nodes_json().replace('"name": "n1"', '"name": "n1", "name": "n2"', 1),
     ["inventory", "--inventory", "{f}"], "GV039", "items[0].metadata", '"name"'),
    ("inventory: node name with $()", "n.json", nodes_json(metadata__name="$(touch x)"),
     ["inventory", "--inventory", "{f}"], "GV037", "items[1].metadata.name", '"$(touch x)"'),
    ("inventory: node name with a newline", "n.json", nodes_json(metadata__name="a\nb"),
     ["inventory", "--inventory", "{f}"], "GV037", "items[1].metadata.name", '"a\\nb"'),
    ("inventory: node name of 300 characters", "n.json", nodes_json(metadata__name="a" * 300),
     ["inventory", "--inventory", "{f}"], "GV037", "items[1].metadata.name", '"aaaa'),
    ("inventory: a 10 MB label value", "n.json", nodes_json(metadata__labels={"x": "v" * 10_000_000}),
     ["inventory", "--inventory", "{f}"], "GV037", "items[1].metadata.labels.x", '"vvvv'),
    ("inventory: a taint key with a space", "n.json", nodes_json(spec={"taints": [{"key": "a b", "effect": "NoSchedule"}]}),
     ["inventory", "--inventory", "{f}"], "GV037", "items[1].spec.taints[0]", "{"),
    ("inventory: a node listed twice", "n.json", nodes_json(metadata__name="n1"),
     ["inventory", "--inventory", "{f}"], "GV018", "items[1].metadata.name", '"n1"'),
    ("inventory: our format, a node listed twice", "i.yaml", ours("- name: n1\n- name: n1\n"),
     ["inventory", "--inventory", "{f}"], "GV018", "nodes[1].name", "n1"),
    ("inventory: items a string", "n.json", '{"kind": "List", "items": "x"}',
     ["inventory", "--inventory", "{f}"], "GV100", "kind", '"List"'),
    ("inventory: metadata a list", "n.json", '{"kind": "List", "items": [{"metadata": [1]}]}',
     ["inventory", "--inventory", "{f}"], "GV100", "items[0].metadata", "[1]"),
    ("inventory: our format, count abc", "i.yaml", ours("- name: n1\n  gpu: {count: abc}\n"),
     ["inventory", "--inventory", "{f}"], "GV000", "nodes[0].gpu.count", "abc"),
    ("inventory: our format, node name with $()", "i.yaml", ours('- name: "$(x)"\n'),
     ["inventory", "--inventory", "{f}"], "GV037", "nodes[0].name", '"$(x)"'),
    ("inventory: our format, capacity 1e400", "i.yaml", ours("- name: n1\n  capacity: {cpu: '1e400'}\n"),
     ["inventory", "--inventory", "{f}"], "GV038", "nodes[0].capacity.cpu", "'1e400'"),
    ("inventory: our format, a key given twice", "i.yaml", ours("- name: n1\n  name: n2\n"),
     ["inventory", "--inventory", "{f}"], "GV039", None, "name: n2"),
    ("inventory: 10,001 nodes", "n.json",
     json.dumps({"kind": "List", "items": [node(metadata__name=f"n{i}") for i in range(10_001)]}),
     ["inventory", "--inventory", "{f}"], "GV038", "items[10000]", '{"kind"'),
    # fit
    ("fit: an empty manifest", "m.yaml", "", ["fit", "--inventory", "{inv}", "--manifests", "{f}"], "GV100",
     "--manifests", None),
    ("fit: a list document", "m.yaml", "---\nkind: ConfigMap\n---\n- 1\n",
     ["fit", "--inventory", "{inv}", "--manifests", "{f}"], "GV100", None, "- 1"),
    ("fit: a key given twice", "m.yaml", "kind: Deployment\nkind: Pod\n",
     ["fit", "--inventory", "{inv}", "--manifests", "{f}"], "GV039", None, "kind: Pod"),
    # topo, simulate, update, values, validate
    ("topo: not a matrix", "t.txt", "garbage\n", ["topo", "{f}"], "GV100", "header", "garbage"),
    ("topo: a cell that is no link", "t.txt", "\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n", ["topo", "{f}"],
     "GV100", "GPU0.GPU1", "FAST"),
    ("topo: a link that reads differently both ways", "t.txt", "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tSYS\t X \n",
     ["topo", "{f}"], "GV100", "GPU1.GPU0", "SYS"),
    ("topo: a row cut short", "t.txt", "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\nGPU1\tPIX\t X\tPIX\n", ["topo", "{f}"],
     "GV100", "GPU0.GPU2", None),
    ("topo: an affinity that is no CPU list", "t.txt", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n"
     "GPU1\tPIX\t X \t0-7x\n", ["topo", "{f}"], "GV100", "GPU1.CPU Affinity", "0-7x"),
    ("topo: NVLinks with 3^(n/3) maximal cliques", "t.txt", MOON_MOSER, ["topo", "{f}"], "GV075", None, None),
    ("simulate: a rate that is not a number", "t.csv", "time_s,requests_per_s\n0,abc\n",
     ["simulate", "{f}", "--replica-rps", "3"], "GV100", "requests_per_s", "abc"),
    ("simulate: a time that does not increase", "t.csv", "time_s,requests_per_s\n5,1\n 5,2\n",
     ["simulate", "{f}", "--replica-rps", "3"], "GV100", "time_s", "5,2"),
    ("simulate: an unclosed quote", "t.csv", 'time_s,requests_per_s\n0,1\n60,"2\n',
     ["simulate", "{f}", "--replica-rps", "3"], "GV100", "row", '"2'),
    ("inventory --nvidia-smi: a memory that is not MiB", "q.csv", "index, name, memory.total [MiB]\n0, Tesla T4, lots\n",
     ["inventory", "--nvidia-smi", "n1={f}"], "GV100", "memory.total", "lots"),
    ("inventory --nvidia-smi: a row short of fields", "q.csv", "index, name, memory.total [MiB]\n0, Tesla T4\n",
     ["inventory", "--nvidia-smi", "n1={f}"], "GV100", "memory.total", None),
    ("inventory --nvidia-smi: two GPU models", "q.csv",
     "index, name, memory.total [MiB]\n0, Tesla T4, 15360 MiB\n1, Tesla V100, 16384 MiB\n",
     ["inventory", "--nvidia-smi", "n1={f}"], "GV100", "name", "Tesla V100"),
    ("update: not a mapping", "v.yaml", "- 1\n", ["update", "{f}", "--set", "a=1"], "GV100", None, None),
    ("values: a list spec", "s.yaml", "- 1\n", ["values", "{f}"], "GV100", None, "- 1"),
    ("values: gpus 1 for a model that needs 3 GPUs", "s.yaml",
     SINGLE.read_text().replace("memoryGB: 40 ", "memoryGB: 200"), ["values", "{f}"], "GV013", "workloads[0]", "name: llama-8b"),
    ("validate --values: a key given twice", "v.yaml", "replicaCount: 1\nreplicaCount: 2\n",
     ["validate", "--values", "{f}"], "GV039", None, "replicaCount: 2"),
    ("render: a spec file that is a FIFO", None, None, ["render", "{fifo}"], "GV019", None, None),
]


def _run(capsys, argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _at(text: str, line: int, col: int) -> str:
    return text.splitlines()[line - 1][col - 1:]


@pytest.mark.parametrize("name,fname,text,argv,code,field,points_at", CASES, ids=[c[0] for c in CASES])
def test_every_refusal_is_one_placed_line_with_a_registered_code(tmp_path, capsys, name, fname, text, argv,
                                                                 code, field, points_at):
    inv = tmp_path / "inv.json"
    inv.write_text(nodes_json())
    f = tmp_path / (fname or "fifo.yaml")
    if text is None:
        os.mkfifo(f)
    else:
        f.write_text(text)
    rc, out, err = _run(capsys, [str(a).format(f=f, inv=inv, fifo=f) for a in argv])
    assert "Traceback" not in err
    assert rc == 2 and out == "", (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 5000, err
    m = LINE.match(lines[0])
    assert m, lines[0]
    assert m["where"] == str(f), lines[0]
    assert m["code"] == code and m["code"] in CODES, lines[0]
    if field:
        assert m["rest"].startswith(field + ": "), lines[0]
    if points_at:
        assert m["line"], lines[0]
        assert _at(text, int(m["line"]), int(m["col"] or 1)).startswith(points_at), (lines[0], points_at)
    if text is not None and fname.endswith((".yaml", ".json")) and code != "GV019":
        assert m["line"] or "--manifests" in lines[0] or name.startswith("update"), lines[0]


def test_nvidia_smi_node_names_are_checked(tmp_path, capsys):
    q = tmp_path / "q.csv"
    q.write_text("index, name, memory.total [MiB]\n0, NVIDIA A100-SXM4-80GB, 81920 MiB\n")
    rc, out, err = _run(capsys, ["inventory", "--nvidia-smi", f"$(touch x)={q}"])
    assert rc == 2 and err.startswith("gpuvalues: error: --nvidia-smi: node name") and err.strip().endswith("[GV037]")
    assert _run(capsys, ["inventory", "--nvidia-smi", f"gpu-1={q}"])[0] == 0           # control


def test_controls_the_same_readers_accept_the_unedited_files(tmp_path, capsys):
    """Negative controls: the files the corpus edits pass, so each refusal is the edit's."""
    c = tmp_path / "c.yaml"
    c.write_text(CURRENT)
    assert _run(capsys, ["plan", MIXED, "--current", c])[0] == 0
    n = tmp_path / "n.json"
    n.write_text(nodes_json())
    assert _run(capsys, ["inventory", "--inventory", n])[0] == 0
    i = tmp_path / "i.yaml"
    i.write_text(ours("- name: n1\n  capacity: {cpu: '8'}\n"))
    assert _run(capsys, ["inventory", "--inventory", i])[0] == 0
    big = tmp_path / "big.json"          # 10,000 nodes: the bound itself is accepted
    big.write_text(json.dumps({"kind": "List", "items": [node(metadata__name=f"n{k}") for k in range(10_000)]}))
    assert _run(capsys, ["inventory", "--inventory", big, "-o", tmp_path / "big-out.json"])[0] == 0


# ------------------------------------------------------------------ transient vs permanent
class _Answer(http.server.BaseHTTPRequestHandler):
    status = 503

    def do_GET(self):
        body = json.dumps({"kind": "Status", "code": self.status, "message": "x"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


def _kubeconfig(tmp_path: Path, port: int) -> Path:
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return kc


@pytest.mark.parametrize("status,exit_code,code", [(503, 3, "GV036"), (429, 3, "GV036"), (403, 2, "GV100"),
                                                   (None, 3, "GV036")])
def test_a_server_down_or_busy_is_transient_exit_3_and_a_refusal_is_permanent(tmp_path, capsys, status,
                                                                              exit_code, code):
    """A loopback HTTP server answering as an API server that is overloaded (503, 429) or
    refuses the credentials (403) -- a stand-in: the e2e control plane cannot be made to
    answer 503 on demand -- and a port nothing listens on (None)."""
    if status is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]         # closed again: nothing listens there
        server = None
    else:
        handler = type("H", (_Answer,), {"status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc, out, err = _run(capsys, ["inventory", "--kubeconfig", _kubeconfig(tmp_path, port)])
    finally:
        if server:
            server.shutdown()
            server.server_close()
    assert rc == exit_code and out == "" and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"[{code}]"), err


# ------------------------------------------------------------------ values -o and install
def test_values_o_folder_and_file_rules(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, ["values", SINGLE, "-o", "one/"])[0] == 0
    assert (tmp_path / "one").is_dir() and sorted(os.listdir("one")) == ["gpu-platform.values.yaml",
                                                                         "llama-8b.values.yaml"]
    rc, out, err = _run(capsys, ["values", SINGLE, "-o", "two", "--artifacts", "two/nodes"])
    assert rc == 2 and not (tmp_path / "two").exists() and "[GV040]" in err, err
    (tmp_path / "file").write_text("x\n")
    rc, out, err = _run(capsys, ["values", MIXED, "-o", "file"])
    assert rc == 2 and "[GV040]" in err and (tmp_path / "file").read_text() == "x\n", err
    rc, out, err = _run(capsys, ["values", SINGLE, "-o", "f.yaml"])
    assert rc == 0 and (tmp_path / "f.yaml").is_file()
    assert "f.yaml/" not in err and f"-f {tmp_path / 'f.yaml'}" in err, err


@pytest.mark.parametrize("spec,out", [(MIXED, "dir/"), (SINGLE, "one.yaml")])
def test_printed_install_commands_work_from_any_folder(tmp_path, capsys, monkeypatch, spec, out):
    """The printed `helm upgrade --install` lines, run as `helm template` (same chart, values
    and namespace; no cluster needed) by the real helm from another folder."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc, _, err = _run(capsys, ["values", spec, "-o", out, "--artifacts", "nodes"])
    assert rc == 0, err
    commands = [line.strip() for line in err.splitlines() if line.strip().startswith("helm upgrade --install")]
    assert commands
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in commands:
        argv = shlex.split(command)
        assert Path(argv[4]).is_absolute() and Path(argv[argv.index("-f") + 1]).is_absolute()
        argv = [str(TOOLS / "helm"), "template"] + [a for a in argv[3:] if a != "--create-namespace"]
        proc = subprocess.run(argv, cwd=elsewhere, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "kind: " in proc.stdout


# ------------------------------------------------------------------ --output json everywhere
def test_every_command_prints_one_json_document_with_output_json(tmp_path, capsys):
    inv = tmp_path / "inv.json"
    inv.write_text(nodes_json())
    values = tmp_path / "v.yaml"
    assert _run(capsys, ["values", SINGLE, "-o", values])[0] == 0
    manifests = tmp_path / "m.yaml"
    rc, text, _ = _run(capsys, ["render", SINGLE])
    manifests.write_text(text)
    topo = ROOT / "examples" / "topology" / "hgx-h100-nv18.txt"
    runs = {
        "render": ["render", SINGLE], "render -o": ["render", SINGLE, "-o", tmp_path / "out"],
        "plan": ["plan", SINGLE], "values": ["values", SINGLE], "values -o": ["values", SINGLE, "-o", tmp_path / "x/"],
        "validate": ["validate", SINGLE], "update": ["update", values, "--set", "replicaCount=2"],
        "topo": ["topo", topo, "--best", "2"], "inventory": ["inventory", "--inventory", inv],
        "inventory -o": ["inventory", "--inventory", inv, "-o", tmp_path / "inv.yaml"],
        "fit": ["fit", "--inventory", inv, "--manifests", manifests],
        "simulate": ["simulate", "spike", "--replica-rps", "3"],
    }
    for name, argv in runs.items():
        rc, out, err = _run(capsys, ["--output", "json", *argv])
        assert rc in (0, 1), (name, err)
        assert isinstance(json.loads(out), (dict, list)), name        # one JSON document
    data = json.loads(_run(capsys, ["--output", "json", "render", SINGLE])[1])
    assert {o["kind"] for r in data["releases"] for o in r["objects"]} >= {"Deployment", "Service"}


def test_validate_reports_a_finding_once(tmp_path, capsys):
    """A pool's unknown GPU failed the placement of each of its two workloads: the same
    finding twice, counted as 2 errors."""
    spec = tmp_path / "s.yaml"
    spec.write_text(MIXED.read_text().replace("gpu: A100-80GB", "gpu: NOPE"))
    rc, out, err = _run(capsys, ["validate", spec])
    assert rc == 1 and len(out.splitlines()) == len(set(out.splitlines())) == 1, out
    assert err.strip() == "1 errors, 0 warnings"
