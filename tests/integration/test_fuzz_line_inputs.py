"""Fuzz the line-oriented inputs (issue 25): `topo -m` matrices (`gpuvalues topo`), load
traces (`simulate`) and `nvidia-smi --query-gpu --format=csv` files (`inventory
--nvidia-smi`), with hypothesis, through the CLI.

The contract for every run: exit 0, or exit 2 with exactly one stderr line
`gpuvalues: error: FILE:LINE:COL: ... [GVxxx]` (line AND column: every refusal of these
readers is placed; the code registered), nothing on stdout, no traceback. Each case is a
valid file with a hostile edit (a token replaced, dropped, doubled or glued, a line
doubled or cut, quotes, tabs, NUL, ANSI codes, huge numbers), so most runs fail deep in
the reader, past the header. In-process (`cli.main`, the code the binary runs; an
escaping exception fails the test as a traceback would); tests/integration/
test_fuzz_cli.py runs the real binary on the file-level cases.
"""
from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvalues import cli
from gpuvalues.errors import CODES
from tests.conftest import ROOT

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

TOPO = (ROOT / "examples" / "topology" / "hgx-h100-nv18.txt").read_text()
TRACE = "# a spike\ntime_s,requests_per_s\n0,2\n60, 8\n120,\"4\"\n180,2\n"
SMI = ("index, name, memory.total [MiB], mig.mode.current\n0, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled\n"
       "1, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled\n")

_TOKENS = st.one_of(
    st.sampled_from(["X", "NV18", "NV0", "NV99999999999999999999", "SYS", "SOC", "PIX", "NODE", "nv4", "N/A",
                     "0-47", "0-99999999999", "0,1,2", "-1", "1e400", "nan", "inf", '"', '""', ",", ",,", "\t",
                     "\x00", "\x1b[1m", "\x1b[0m", "GPU0", "GPU99", "NIC0", "CPU Affinity", "Legend:", "#",
                     "81559 MiB", "Enabled", "Disabled", "[N/A]", "$(touch x)", "x" * 300]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6),
)


def _edit(text: str):
    """A hostile edit of `text`, drawn from its own tokens and lines."""
    lines = text.split("\n")
    n = len(lines)
    return st.one_of(
        st.tuples(st.integers(0, n - 1), st.integers(0, 60), _TOKENS).map(
            lambda a: _replace_token(lines, *a)),
        st.tuples(st.integers(0, n - 1), st.integers(0, 60)).map(lambda a: _replace_token(lines, *a, None)),
        st.tuples(st.integers(0, n - 1), st.integers(0, 200), _TOKENS).map(
            lambda a: "\n".join(lines[:a[0]] + [lines[a[0]][:a[1]] + a[2] + lines[a[0]][a[1]:]] + lines[a[0] + 1:])),
        st.integers(0, n - 1).map(lambda i: "\n".join(lines[:i + 1] + lines[i:])),
        st.integers(0, n - 1).map(lambda i: "\n".join(lines[:i] + lines[i + 1:])),
        st.integers(0, len(text)).map(lambda i: text[:i]),
    )


def _replace_token(lines: list[str], i: int, k: int, new: str | None) -> str:
    toks = re.split(r"(\s+|,)", lines[i])
    words = [j for j, t in enumerate(toks) if t and not re.fullmatch(r"\s+|,", t)]
    if words:
        j = words[k % len(words)]
        toks[j] = "" if new is None else new
    return "\n".join(lines[:i] + ["".join(toks)] + lines[i + 1:])


def _check(capsys, argv: list[str], shown: str) -> None:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code == 0:
        return
    assert code == 2 and out == "", (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 5000, err
    m = re.match(r"gpuvalues: error: " + re.escape(shown) + r"(:(\d+):(\d+))?: .* \[(GV\d{3})\]$", lines[0])
    assert m, lines[0]
    assert m.group(4) in CODES, lines[0]
    # placed, except a property of the whole matrix (its cliques: GV075)
    assert m.group(1) or m.group(4) == "GV075", lines[0]


@SETTINGS
@given(text=_edit(TOPO), best=st.sampled_from([None, "1", "3", "8"]))
def test_hostile_topology_matrices(tmp_path_factory, capsys, text, best):
    f = tmp_path_factory.mktemp("topo") / "topo.txt"
    f.write_text(text, errors="surrogatepass")
    _check(capsys, ["topo", str(f)] + (["--best", best] if best else []), str(f))


@SETTINGS
@given(text=_edit(TRACE))
def test_hostile_load_traces(tmp_path_factory, capsys, text):
    f = tmp_path_factory.mktemp("trace") / "trace.csv"
    f.write_text(text, errors="surrogatepass")
    _check(capsys, ["-q", "simulate", str(f), "--replica-rps", "3"], str(f))


@SETTINGS
@given(text=_edit(SMI), topo=st.booleans())
def test_hostile_nvidia_smi_csv(tmp_path_factory, capsys, text, topo):
    work = tmp_path_factory.mktemp("smi")
    f = work / "q.csv"
    f.write_text(text, errors="surrogatepass")
    arg = f"gpu-1={f}"
    if topo:          # a 2-GPU matrix beside it: the CSV's rows must agree with it
        t = work / "t.txt"
        t.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")
        arg += f":{t}"
    _check(capsys, ["inventory", "--nvidia-smi", arg], str(f))


def test_the_unedited_files_pass(tmp_path, capsys):
    """Negative control: the files the cases edit are accepted, so each refusal is the edit's."""
    (tmp_path / "t.txt").write_text(TOPO)
    (tmp_path / "s.csv").write_text(TRACE)
    (tmp_path / "q.csv").write_text(SMI)
    assert cli.main(["topo", str(tmp_path / "t.txt"), "--best", "4"]) == 0
    assert cli.main(["-q", "simulate", str(tmp_path / "s.csv"), "--replica-rps", "3"]) == 0
    assert cli.main(["inventory", "--nvidia-smi", f"gpu-1={tmp_path / 'q.csv'}"]) == 0
    capsys.readouterr()


def test_the_checker_fails_on_an_unplaced_refusal(tmp_path, capsys):
    """Negative control of `_check`: a refusal without line:col (an unknown file) fails it."""
    try:
        _check(capsys, ["topo", str(tmp_path / "missing.txt")], str(tmp_path / "missing.txt"))
    except AssertionError:
        return
    raise AssertionError("_check accepted an unplaced refusal")
