"""Many models behind one Gateway, judged by upstream code on what the project renders for
examples/multi-model-gateway.yaml (issue 26):

- the body-based router, built from the Gateway API Inference Extension module at the
  chart's pin (cmd/bbr, ci/oracle/build.sh bbr) and started with the args of the chart's
  own BBR Deployment, answers an Envoy ext_proc exchange (gRPC on loopback, sent by
  ci/oracle/bbr, a small Go client of go-control-plane's ext_proc v3 API) for an OpenAI
  chat/completions body naming model X by setting X-Gateway-Model-Name: X;
- Envoy Gateway's own Gateway API translator (internal/gatewayapi at ENVOY_GATEWAY_VERSION,
  ci/oracle/envoygateway) turns the rendered HTTPRoutes, InferencePools, EnvoyExtensionPolicy
  and ReferenceGrant, on a Gateway written here as the cluster's, into its xDS IR: every
  route is accepted and resolved, the IR puts BBR's ext_proc on the listener, and for every
  model name `gpuvalues plan` states, a request carrying that header is taken by the route
  whose backend is that model's InferencePool (the IR's routes in the IR's order, first
  match: how Envoy walks a route table), while a name nobody serves matches no route.

The IR walk is ours (a few lines over upstream's data); which routes exist, their order,
their header matches and their backends are Envoy Gateway's.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import socket
import subprocess
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.conftest import write_kubeconfig
from tests.oracle import oraclelib as ol

EXAMPLE = ol.EXAMPLES / "multi-model-gateway.yaml"
HEADER = "X-Gateway-Model-Name"      # GAIE v1.5.0 pkg/bbr/plugins/bodyfieldtoheader
BBR_IP = "10.96.1.2"


def _built(component: str, version_key: str, src: str, binary: str) -> Path:
    proc = subprocess.run(["bash", str(ol.ORACLE_DIR / "build.sh"), component],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ci/oracle/build.sh {component} failed:\n{proc.stderr[-4000:]}"
    digest = hashlib.sha256((ol.ORACLE_DIR / src).read_bytes()).hexdigest()[:12]
    path = ol.CACHE / f"{component}-{ol.versions()[version_key]}-{digest}" / "bin" / binary
    assert path.exists(), path
    return path


@lru_cache(maxsize=None)
def rendered() -> tuple:
    """Every object `gpuvalues render` writes for the example (all releases)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([str(ol.GPUVALUES), "-q", "render", str(EXAMPLE), "-o", tmp],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return tuple(d for f in sorted(Path(tmp).glob("*.yaml"))
                     for d in yaml.safe_load_all(f.read_text()) if d)


@lru_cache(maxsize=None)
def planned_routes() -> tuple:
    """(model name, workload) pairs as `gpuvalues plan` states them."""
    proc = subprocess.run([str(ol.GPUVALUES), "-q", "--output", "json", "plan", str(EXAMPLE)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tuple((m, r["workload"]) for r in json.loads(proc.stdout)["routes"] for m in r["models"])


def kinds(*names: str) -> list[dict]:
    return [o for o in rendered() if o["kind"] in names]


def pool_of(workload: str) -> str:
    """The InferencePool of a workload's release (its route's backend)."""
    found = [o["metadata"]["name"] for o in kinds("InferencePool")
             if o["metadata"]["labels"]["app.kubernetes.io/instance"] == workload]
    assert len(found) == 1, (workload, found)
    return found[0]


# --- the body-based router -----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bbr():
    """The real BBR with the chart's args (ports moved to free loopback ones: later flags
    win in pflag), a kubeconfig naming a closed loopback port (its controller-runtime
    manager needs a config; the one plugin makes no API call). Yields (client, address)."""
    server = _built("bbr", "GAIE_VERSION", "bbr/main.go", "bbr")
    client = server.parent / "extproc-client"
    dep = next(o for o in kinds("Deployment") if o["metadata"]["name"].endswith("-bbr"))
    args = [str(a) for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]]
    grpc, health, metrics = _free_port(), _free_port(), _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", f"https://127.0.0.1:{_free_port()}",
                                      token="unused", name="none")
        env = {"PATH": os.environ["PATH"], "KUBECONFIG": str(kubeconfig), "NAMESPACE": "gpu-platform"}
        log = open(Path(tmp) / "bbr.log", "w+")
        proc = subprocess.Popen([str(server), *args, f"--grpc-port={grpc}",
                                 f"--grpc-health-port={health}", f"--metrics-port={metrics}"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert proc.poll() is None, f"bbr exited {proc.returncode}:\n" + Path(log.name).read_text()[-3000:]
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", grpc)) == 0:
                        break
                time.sleep(0.2)
            else:
                raise AssertionError("bbr did not listen:\n" + Path(log.name).read_text()[-3000:])
            yield client, f"127.0.0.1:{grpc}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def exchange(bbr, body: bytes) -> list[dict]:
    client, addr = bbr
    proc = subprocess.run([str(client), "-addr", addr, "-chunk", "23"], input=body,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def set_headers(responses: list[dict]) -> dict[str, str]:
    """The headers the router's responses set (protojson: rawValue is base64)."""
    import base64
    out = {}
    for r in responses:
        for part in ("requestHeaders", "requestBody"):
            common = r.get(part, {}).get("response", {})
            for h in common.get("headerMutation", {}).get("setHeaders", []):
                hv = h["header"]
                value = base64.b64decode(hv["rawValue"]).decode() if "rawValue" in hv else hv.get("value", "")
                out[hv["key"]] = value
    return out


def chat(model: str | None) -> bytes:
    body: dict = {"messages": [{"role": "user", "content": "Linux is said to be an open source kernel because"}],
                  "max_tokens": 16, "stream": False}
    if model is not None:
        body = {"model": model, **body}
    return json.dumps(body).encode()


def test_bbr_sets_the_model_header_for_every_planned_name(bbr):
    names = [m for m, _ in planned_routes()]
    assert len(names) >= 5  # three models and their adapters
    for name in names:
        responses = exchange(bbr, chat(name))
        headers = set_headers(responses)
        assert headers.get(HEADER) == name, (name, responses)
        # the header is set before routing: the route cache is cleared with it
        first = responses[0]["requestHeaders"]["response"]
        assert first.get("clearRouteCache") is True, responses[0]
        # and the body goes on unchanged (streamed back in full)
        assert b"".join(_streamed(responses)) == chat(name)


def _streamed(responses):
    import base64
    for r in responses:
        sr = r.get("requestBody", {}).get("response", {}).get("bodyMutation", {}).get("streamedResponse")
        if sr is not None:
            yield base64.b64decode(sr.get("body", ""))


def test_bbr_negative_control_no_model_no_header(bbr):
    """A body without `model` gets no header (so no route matches): the check can fail."""
    assert HEADER not in set_headers(exchange(bbr, chat(None)))


# --- Envoy Gateway's translation ----------------------------------------------------------

GATEWAY_NS = "gateway-system"
FIXTURE = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: envoy}}
spec: {{controllerName: gateway.envoyproxy.io/gatewayclass-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: inference-gateway, namespace: {GATEWAY_NS}}}
spec:
  gatewayClassName: envoy
  listeners:
    - name: http
      protocol: HTTP
      port: 80
      allowedRoutes: {{namespaces: {{from: All}}}}
"""


def translate(objects: list[dict]) -> dict:
    binary = _built("envoygateway", "ENVOY_GATEWAY_VERSION", "envoygateway/main.go", "envoygateway")
    text = FIXTURE + "".join("\n---\n" + yaml.safe_dump(o) for o in objects)
    proc = subprocess.run([str(binary)], input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def routing_objects() -> list[dict]:
    """What the chart renders for the Gateway: routes, pools, BBR's Service and its wiring,
    and the namespaces they live in."""
    objs = kinds("HTTPRoute", "InferencePool", "EnvoyExtensionPolicy", "ReferenceGrant")
    objs += [o for o in kinds("Service") if o["metadata"]["name"].endswith("-bbr")]
    objs = copy.deepcopy(objs)
    for o in objs:
        if o["kind"] == "Service":  # an address, as a cluster gives it (egctl does the same)
            o["spec"]["clusterIP"] = BBR_IP
    spaces = {o["metadata"]["namespace"] for o in objs} | {GATEWAY_NS}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(spaces)] + objs


def ir_routes(result: dict) -> list[dict]:
    """The HTTP routes of the Gateway's listener, in the IR's order."""
    ir = result["xdsIR"][f"{GATEWAY_NS}/inference-gateway"]
    (listener,) = ir["http"]
    return listener["routes"] or []


def taken_by(routes: list[dict], path: str, headers: dict[str, str]) -> dict | None:
    """The first IR route whose path and header matches all hold for the request."""
    def holds(m: dict, value: str | None) -> bool:
        if value is None:
            return False
        if m.get("exact") is not None:
            return value == m["exact"]
        if m.get("prefix") is not None:
            return value.startswith(m["prefix"])
        raise AssertionError(f"match kind not handled here: {m}")
    for r in routes:
        pm = r.get("pathMatch")
        if pm and not holds(pm, path):
            continue
        if all(holds(h, headers.get(h["name"])) for h in r.get("headerMatches") or []):
            return r
    return None


def pool_name(route: dict) -> str:
    refs = [e["object"] for e in route.get("extensionRefs") or []]
    pools = [o["metadata"]["name"] for o in refs if o["kind"] == "InferencePool"]
    assert len(pools) == 1, route
    return pools[0]


@pytest.fixture(scope="module")
def translated():
    return translate(routing_objects())


def test_envoy_gateway_accepts_and_resolves_every_route(translated):
    routes = translated["httpRoutes"]
    assert len(routes) == 3
    for r in routes:
        conds = {c["type"]: c["status"] for p in r["status"]["parents"] for c in p["conditions"]}
        assert conds == {"Accepted": "True", "ResolvedRefs": "True"}, (r["metadata"]["name"], r["status"])


def test_envoy_gateway_runs_bbr_before_routing(translated):
    """The EnvoyExtensionPolicy lands: every route of the Gateway carries the ext_proc to
    BBR's Service, full-duplex streamed request bodies, fail closed."""
    for r in ir_routes(translated):
        procs = (r.get("envoyExtensions") or {}).get("extProcs") or []
        assert len(procs) == 1, r["name"]
        p = procs[0]
        assert p["failOpen"] is False
        assert p["requestBodyProcessingMode"] == "FullDuplexStreamed", p
        hosts = [e["host"] for s in p["destination"]["settings"] for e in s["endpoints"]]
        assert hosts == [BBR_IP], p["destination"]
        assert p["destination"]["settings"][0]["endpoints"][0]["port"] == 9004


def misrouted(routes: list[dict]) -> list[tuple[str, str]]:
    """The planned (model, workload) pairs whose request does not reach the workload's pool."""
    out = []
    for model, workload in planned_routes():
        r = taken_by(routes, "/v1/chat/completions", {HEADER: model})
        if r is None or pool_name(r) != pool_of(workload):
            out.append((model, workload))
    return out


def test_a_request_naming_model_x_reaches_pool_x(translated):
    routes = ir_routes(translated)
    assert misrouted(routes) == []
    # no catch-all: a model nobody serves, or no header at all (BBR found no `model`), is not routed
    assert taken_by(routes, "/v1/chat/completions", {HEADER: "gpt-unknown"}) is None
    assert taken_by(routes, "/v1/chat/completions", {}) is None


def test_negative_control_a_shadowed_route_is_seen():
    """Two routes taking one name (what validate refuses, GV050), forced past gpuvalues:
    Envoy Gateway gives that name to one route only, and the check above fails for the
    workload whose name was taken twice."""
    objs = routing_objects()
    routes = [o for o in objs if o["kind"] == "HTTPRoute"]
    victim, thief = routes[0], routes[1]
    stolen = victim["spec"]["rules"][0]["matches"][0]["headers"][0]["value"]
    thief["spec"]["rules"][0]["matches"][0]["headers"][0]["value"] = stolen
    lost = misrouted(ir_routes(translate(objs)))
    assert lost and {m for m, _ in lost} <= {stolen, thief["metadata"]["annotations"][
        "gpu-inference.io/model-names"].split(",")[0]}, lost


def test_the_oracle_is_the_release_the_chart_deploys():
    """BBR, the EPP and the InferencePool CRD come from one GAIE release: the oracle's pin."""
    values = yaml.safe_load((ol.CHART / "values.yaml").read_text())
    want = ol.versions()["GAIE_VERSION"]
    assert values["platform"]["bodyBasedRouting"]["image"]["tag"] == want
    assert values["gateway"]["epp"]["image"]["tag"] == want
