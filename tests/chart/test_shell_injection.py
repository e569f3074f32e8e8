"""Nothing from a values file or spec reaches a shell as code (issue 25).

Every container the chart renders whose command runs an interpreter on a script (`sh -c`,
`python3 -c`...) is found in the real helm's output; its script must be the same text
whatever the values are (a value pasted into a script is code), and each `sh -c` script is
run with the real /bin/sh in a sandbox: PATH is a folder of stub commands that record their
argv and exit 0, the working folder must stay empty, a timeout bounds it, and the value must
arrive intact (the marker the script waits for is created at the path the value names, so
the script ends at once only if it sees that exact path).

The hostile values go in with `--skip-schema-validation`: the schema refuses them too
(tests/chart/test_names_validated.py), and this test holds the templates safe without it.
"""
from __future__ import annotations

import os
from functools import lru_cache
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chart.chartlib import HELMS, SCENARIO_DIR, parse, rendered
from tests.conftest import CHART

INTERPRETERS = {"sh", "/bin/sh", "bash", "/bin/bash", "ash", "dash", "python", "python3"}
# Stubs: the commands an injection would most likely run (sleep is also the script's own).
STUBS = ("sleep", "touch", "rm", "id", "cat", "ls", "curl", "wget", "env", "nc", "chmod")

# Each class of shell metacharacter, and the two reproductions.
HOSTILE = [
    "x ] || touch PWNED; true || [ x",
    "org/model with space",
    "a;touch PWNED", "a&&touch PWNED", "a||touch PWNED", "a|touch PWNED", "a&touch PWNED",
    "$(touch PWNED)", "`touch PWNED`", "${HOME}", "$HOME", "$(MODEL_DIR)", "$$(HOME)",
    "a'b", 'a"b', "a\\b", "a\nb", "a\ttouch PWNED", "a>PWNED", "a<PWNED", "a*", "a?", "[a]",
    "a{b,c}", "~root", "a#b", "-n", "--help", "a!b", "a%b", "(a)",
]


def interpreter_scripts(objects: list[dict]) -> list[tuple[str, dict, str]]:
    """(kind/container, container, script) for every container that runs a `-c` script."""
    out = []
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get(
            "spec", {}).get("template", {}).get("spec") or (spec if obj.get("kind") == "Pod" else {})
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            argv = list(c.get("command") or []) + list(c.get("args") or [])
            if argv and argv[0] in INTERPRETERS and "-c" in argv[1:]:
                i = argv.index("-c", 1)
                if i + 1 < len(argv):
                    # Keyed by kind and container: object names may carry a hash of the model.
                    out.append((f"{obj['kind']}/{c['name']}", c, argv[i + 1]))
    return out


class QuotedDumper(yaml.SafeDumper):
    """Every string double-quoted (YAML escapes): PyYAML leaves `N` bare, which Helm's
    YAML 1.1 reads as false."""


QuotedDumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style='"'))


def render_unchecked(values: dict, helm: str = "helm") -> list[dict]:
    """helm template with the schema off, so the templates alone are under test."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "values.yaml"
        f.write_text(yaml.dump(values, Dumper=QuotedDumper))
        proc = subprocess.run(
            [HELMS[helm], "template", "gi", str(CHART), "--namespace", "inference",
             "--kube-version", "1.34.0", "--skip-schema-validation", "--values", str(f)],
            capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout)


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of env values, command and args: `$$` is `$`,
    `$(NAME)` a defined variable's value, anything else verbatim. Port of Kubernetes
    third_party/forked/golang/expansion/expand.go (Expand, tryReadVariableName)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end >= 0:
                    name = text[i + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append(text[i:i + 2])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(container: dict) -> dict[str, str]:
    """The container's literal env as the kubelet builds it (each value expanded against
    the ones before it)."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = kubelet_expand(e["value"], env)
    return env


def run_sandboxed(script: str, env: dict[str, str], root: Path) -> tuple[int, list[str], list[str]]:
    """Run `sh -c script` with stubbed PATH in an empty working folder; return the exit
    code, the stub calls made and what appeared in the working folder."""
    stubs, cwd = root / "stubs", root / "cwd"
    stubs.mkdir(parents=True)
    cwd.mkdir()
    log = root / "calls.log"
    for name in STUBS:
        p = stubs / name
        p.write_text(f'#!/bin/sh\nprintf "%s" "{name}" >> "{log}"\nfor a in "$@"; do printf " [%s]" "$a" >> "{log}"; done\n'
                     f'printf "\\n" >> "{log}"\n' + ('kill -TERM "$PPID"\n' if name == "sleep" else "exit 0\n"))
        p.chmod(0o755)
    run_env = {**env, "PATH": str(stubs)}
    try:
        proc = subprocess.run(["/bin/sh", "-c", script], env=run_env, cwd=cwd,
                              capture_output=True, text=True, timeout=10)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = -999
    calls = log.read_text().splitlines() if log.exists() else []
    return rc, calls, sorted(os.listdir(cwd))


def base_values(name: str, mount: str) -> dict:
    # model.source pvc + pvc.create: the fill Job (python3 -c) and the wait-model init container (sh -c)
    return {"model": {"name": name, "mountPath": mount, "source": "pvc", "sizeGB": 2,
                      "pvc": {"create": True}}}


@lru_cache(maxsize=None)
def reference_scripts(helm: str) -> dict[str, str]:
    return {where: s for where, _, s in interpreter_scripts(render_unchecked(
        base_values("org/plain", "/models"), helm))}


def check_value(name: str, mount_suffix: str = "", helm: str = "helm") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mount = str(root / "models") + mount_suffix
        objects = render_unchecked(base_values(name, mount), helm)
        scripts = interpreter_scripts(objects)
        assert any(c["name"] == "wait-model" for _, c, _ in scripts), "no wait-model script rendered"
        reference = reference_scripts(helm)
        for where, container, script in scripts:
            # The script is the chart's text alone, the same for every value.
            assert script == reference[where], f"{where}: a value reached the script text:\n{script}"
            env = container_env(container)
            assert env["MODEL_DIR"] == f"{mount.rstrip('/')}/{name}", f"{where}: MODEL_DIR not intact"
            if "MODEL_NAME" in env:
                assert env["MODEL_NAME"] == name, f"{where}: MODEL_NAME not intact"
            if container["command"][0] not in ("sh", "/bin/sh"):
                continue
            model_dir = Path(env["MODEL_DIR"])
            model_dir.mkdir(parents=True, exist_ok=True)
            (model_dir / ".gpu-inference-complete").touch()
            rc, calls, created = run_sandboxed(script, env, root / "box" / where.replace("/", "_"))
            assert (rc, calls, created) == (0, [], []), (
                f"{where} with {name!r}: exit {rc}, calls {calls}, created {created}")


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_model_name_never_runs(name):
    check_value(name)


@pytest.mark.parametrize("suffix", ["/a;touch PWNED", "/$(touch PWNED)", "/a b", "/`id`"])
def test_hostile_mount_path_never_runs(suffix):
    check_value("org/model", suffix)


def test_helm3_renders_the_same_safe_script():
    check_value(HOSTILE[0], helm="helm3")


# Path segments the sandbox can create (no NUL, no '/' tricks that leave the sandbox).
SEGMENT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                  min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SEGMENT, min_size=1, max_size=2).map("/".join))
def test_generated_model_names_never_run(name):
    check_value(name)


def test_the_sandbox_catches_an_injection():
    """Negative control: the script the chart rendered before this fix (the path pasted
    into the text) fails every check on the issue's reproduction."""
    name = HOSTILE[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = root / "models" / name
        model_dir.mkdir(parents=True)
        (model_dir / ".gpu-inference-complete").touch()
        old = (f"until [ -f {root}/models/{name}/.gpu-inference-complete ]; do echo waiting for "
               "the model cache; sleep 10; done")
        rc, calls, created = run_sandboxed(old, {}, root / "box")
        assert calls == ["touch [PWNED]"] and created == [], (rc, calls, created)
        # The space case: the loop never sees the marker and sleeps (the stub ends it).
        spaced = root / "models" / "a b"
        spaced.mkdir()
        (spaced / ".gpu-inference-complete").touch()
        old = f"until [ -f {root}/models/a b/.gpu-inference-complete ]; do sleep 10; done"
        rc, calls, _ = run_sandboxed(old, {}, root / "box2")
        assert calls and calls[0] == "sleep [10]", calls


def test_kubelet_expansion_port_matches_upstream_cases():
    """Cases worked from Kubernetes third_party/forked/golang/expansion/expand.go (no
    kubelet runs here, so the port is held to its source's rules on these)."""
    env = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
    cases = {
        "$(VAR_A)": "A", "___$(VAR_B)___": "___B___", "$(VAR_A)-$(VAR_A)": "A-A",
        "$$(VAR_B)_$(VAR_A)": "$(VAR_B)_A", "$$$$$$(BIG_MONEY)": "$$$(BIG_MONEY)",
        "$(VAR_DNE)": "$(VAR_DNE)", "$(VAR_A": "$(VAR_A", "$VAR_A": "$VAR_A",
        "$(VAR_REF)": "$(VAR_A)", "f000-$$VAR_A": "f000-$VAR_A", "$": "$", "$()": "$()",
        "$(VAR_EMPTY)": "",
    }
    assert {k: kubelet_expand(k, env) for k in cases} == cases


def test_every_interpreter_script_in_the_scenarios_is_one_this_test_runs():
    """A `-c` script added to any template (and rendered by a ci/ scenario) must join the
    checks above: the scenarios render none but the two checked here."""
    checked = set(reference_scripts("helm"))
    assert checked == {"Deployment/wait-model", "Job/fill"}, checked
    found = {}
    for f in sorted(SCENARIO_DIR.glob("*-values.yaml")):
        scenario = f.name.removesuffix("-values.yaml")
        for where, _, script in interpreter_scripts(list(rendered("helm", scenario))):
            found.setdefault(where, set()).add(script)
    assert set(found) <= checked, sorted(set(found) - checked)
    for where, scripts in found.items():
        assert scripts == {reference_scripts("helm")[where]}, where
