"""A real Kubernetes control plane on 127.0.0.1 with fake GPU nodes, for the e2e tests.

Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler (all real, built by
ci/e2e/build.sh from pinned Go modules) and kwok, which plays the kubelets: it keeps the
fake nodes Ready and moves their pods through Running/Succeeded (ci/e2e/stages.yaml).
Nothing runs in a container and nothing leaves loopback.

Library use (what tests/e2e does)::

    with Cluster.start() as cluster:          # certificates, free ports, kubeconfig, CRDs
        cluster.add_nodes(nodes_from_inventory(load_inventory("inventory.yaml")))
        subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig, ...])

Command line (for poking at it by hand)::

    .venv/bin/python ci/e2e/cluster.py up [--nodes INVENTORY]   # Ctrl-C stops it; INVENTORY from `python -m tests.e2e.fleet -o FILE`

Every process runs in its own process group and gets SIGKILL when this Python process
dies (PR_SET_PDEATHSIG); `stop()` is also registered with atexit, so a failed start or a
crashed test run does not leave servers behind.
"""
from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STAGES = HERE / "stages.yaml"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


class ClusterError(RuntimeError):
    """The control plane could not be started (message says which part and why)."""


def versions(path: Path = HERE / "versions.env") -> dict[str, str]:
    """The pinned versions from ci/e2e/versions.env (KEY=VALUE lines)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Binaries:
    """Paths of the built components (see ci/e2e/build.sh)."""

    kube: Path
    etcd: Path
    kwok: Path
    crds: tuple[Path, ...] = ()
    adapter: Path | None = None

    @classmethod
    def find(cls, cache: Path | None = None) -> "Binaries":
        """Locate the binaries of the pinned versions; ClusterError names what is missing."""
        cache = Path(cache or os.environ.get("E2E_CACHE") or ROOT / ".cache" / "e2e")
        v = versions()
        paths = {
            "kube": cache / f"kube-{v['K8S_VERSION']}" / "bin" / "kube",
            "etcd": cache / (f"etcd-debian-{v['ETCD_DEBIAN_VERSION']}"
                             if os.environ.get("ETCD_SOURCE", v["ETCD_SOURCE"]) == "debian"
                             else f"etcd-{v['ETCD_MODULE_VERSION']}") / "bin" / "etcd",
            "kwok": cache / f"kwok-{v['KWOK_VERSION']}" / "bin" / "kwok",
        }
        missing = [str(p) for p in paths.values() if not os.access(p, os.X_OK)]
        crd_dir = cache / f"crds-po-{v['PROMETHEUS_OPERATOR_VERSION']}-keda-{v['KEDA_VERSION']}"
        crds = tuple(sorted(crd_dir.glob("*.yaml")))
        if not crds:
            missing.append(str(crd_dir))
        if missing:
            raise ClusterError(
                "e2e control-plane binaries are missing: " + ", ".join(missing)
                + "; build them with `bash ci/e2e/build.sh` (cold build takes minutes)")
        adapter = cache / f"adapter-{v['ADAPTER_VERSION']}" / "bin" / "adapter"
        return cls(adapter=adapter if os.access(adapter, os.X_OK) else None, crds=crds, **paths)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, chosen below the kernel's ephemeral
    range: a port from bind(0) can be taken by any outgoing connection before the server
    binds it (seen here: kwok failed with "address already in use")."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randint(10000, max(10001, low - 1))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # fall back to any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # Runs in the child before exec: SIGKILL it when the Python process that started it
    # dies, even by SIGKILL, so no server outlives a crashed test run.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# --- certificates (openssl CLI; no Python crypto dependency) -------------------------

def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode:
        raise ClusterError(f"openssl {' '.join(args)} failed: {res.stderr.strip()}")


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "7",
             "-subj", f"/CN={name}", cwd=d)


def _leaf(d: Path, name: str, ca: str, subj: str, usage: str, san: str = "") -> None:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj, cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text(f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else ""))
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "7", "-extfile", ext.name, cwd=d)


def make_pki(d: Path) -> None:
    """Cluster CA, apiserver serving cert, admin client cert (system:masters), the
    front-proxy CA and client for the aggregation layer, and the service-account key."""
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _leaf(d, "apiserver", "ca", "/CN=kube-apiserver", "serverAuth",
          "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
          "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
    _leaf(d, "admin", "ca", "/O=system:masters/CN=e2e-admin", "clientAuth")
    _ca(d, "front-proxy-ca")
    _leaf(d, "front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client", "clientAuth")
    _leaf(d, "serving", "ca", "/CN=127.0.0.1", "serverAuth", "IP:127.0.0.1,DNS:localhost")
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", "sa.key", cwd=d)


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    """A kubeconfig (JSON is YAML) with the admin credentials embedded."""
    b64 = lambda name: base64.b64encode((pki / name).read_bytes()).decode()  # noqa: E731
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {
            "server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": "e2e-admin", "user": {
            "client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e-admin"}}],
    }
    path.write_text(json.dumps(cfg, indent=1))


# --- fake GPU nodes ------------------------------------------------------------------

def kwok_node(node: Mapping) -> dict:
    """A v1 Node manifest made fake: kwok manages nodes with this annotation. Status
    capacity/allocatable are kept on create, and kwok's node-initialize stage keeps them;
    cpu/memory/pods default to generous values when absent (a missing `pods` would be 0)."""
    node = json.loads(json.dumps(node))  # deep copy
    meta = node.setdefault("metadata", {})
    meta.setdefault("annotations", {})[KWOK_ANNOTATION] = "fake"
    labels = meta.setdefault("labels", {})
    labels.setdefault("kubernetes.io/hostname", meta["name"])
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    status = node.setdefault("status", {})
    for key in ("capacity", "allocatable"):
        res = status.setdefault(key, {})
        for name, default in (("cpu", "64"), ("memory", "512Gi"), ("pods", "110"),
                              ("ephemeral-storage", "1Ti")):
            res.setdefault(name, default)
    return node


def nodes_from_inventory(inventory) -> list[dict]:
    """Fake Nodes from a `gpuvalues.planners.scheduling.inventory.Inventory`: its labels (GFD, topology),
    taints and capacity/allocatable, so the cluster is what `gpuvalues fit` reasons about."""
    return [kwok_node(n.to_k8s_node()) for n in inventory.nodes]


# --- the cluster ---------------------------------------------------------------------

@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path


class Cluster:
    """A running control plane. Use `Cluster.start()` (a context manager)."""

    def __init__(self, workdir: Path, binaries: Binaries, keep_dir: bool):
        self.dir = workdir
        self.bin = binaries
        self.keep_dir = keep_dir
        self.pki = workdir / "pki"
        self.kubeconfig = workdir / "kubeconfig"
        self.procs: list[_Proc] = []
        self.ports: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self._stopped = False
        atexit.register(self.stop)

    # lifecycle
    @classmethod
    def start(cls, workdir: Path | None = None, binaries: Binaries | None = None,
              timeout: float = 120.0) -> "Cluster":
        """Start etcd, apiserver, controller-manager, scheduler and kwok; return when all
        report healthy. On any failure everything started so far is stopped."""
        binaries = binaries or Binaries.find()
        if shutil.which("openssl") is None:
            raise ClusterError("openssl not found on PATH (needed to generate the cluster PKI)")
        keep = workdir is not None
        for attempt in range(3):
            if not keep:
                base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # etcd fsyncs
                workdir = Path(tempfile.mkdtemp(prefix="gpu-e2e-", dir=base))
            workdir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(workdir / "etcd", ignore_errors=True)
            c = cls(workdir, binaries, keep)
            try:
                c._boot(timeout)
                return c
            except ClusterError as e:
                c.stop()
                # Another process took a port between our check and the server's bind.
                if "address already in use" not in str(e) or attempt == 2:
                    raise
            except BaseException:
                c.stop()
                raise
        raise AssertionError("unreachable")

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def env(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def _spawn(self, name: str, argv: list[str]) -> _Proc:
        logdir = self.dir / "logs"
        logdir.mkdir(exist_ok=True)
        log = logdir / f"{name}.log"
        fh = open(log, "ab")
        popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=self.dir, start_new_session=True, preexec_fn=_die_with_parent)
        fh.close()
        p = _Proc(name, popen, log)
        self.procs.append(p)
        return p

    def _wait(self, proc: _Proc, probe, what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ClusterError(f"{proc.name} exited with {proc.popen.returncode} before {what}; "
                                   f"last log lines ({proc.log}):\n{_tail(proc.log)}")
            try:
                if probe():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"{proc.name}: timed out waiting for {what}; last log lines "
                           f"({proc.log}):\n{_tail(proc.log)}")

    def _https_ok(self, port: int, path: str, client_cert: bool = True) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if client_cert:
            ctx.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        else:  # kcm/scheduler serve a self-signed cert; only their health matters here
            ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=2) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False

    def _boot(self, timeout: float) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout
        make_pki(self.pki)
        for k in ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok"):
            self.ports[k] = free_port()
        self.timings["pki"] = time.monotonic() - t0
        p = self.pki
        etcd_url = f"http://127.0.0.1:{self.ports['etcd']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        etcd_args = [str(self.bin.etcd), "--name=e2e", f"--data-dir={self.dir / 'etcd'}",
                     f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                     f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                     f"--initial-cluster=e2e={peer_url}", "--quota-backend-bytes=8589934592",
                     "--auto-compaction-retention=1", "--log-level=warn"]
        if _has_flag(self.bin.etcd, "--unsafe-no-fsync"):
            etcd_args.append("--unsafe-no-fsync")
        etcd = self._spawn("etcd", etcd_args)
        self._wait(etcd, lambda: _http_ok(f"{etcd_url}/health"), "etcd /health", deadline)
        self.timings["etcd"] = time.monotonic() - t0

        api = self._spawn("kube-apiserver", [
            str(self.bin.kube), "kube-apiserver",
            f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}", f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}", "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none",  # Endpoints cannot hold a loopback IP
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.key'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            # aggregation layer (custom metrics API served by a host process)
            f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
            f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            # a test cluster on a shared 2-core machine: no API priority/fairness throttling
            "--enable-priority-and-fairness=false", "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
        ])
        self._wait(api, lambda: self._https_ok(self.ports["apiserver"], "/readyz"),
                   "kube-apiserver /readyz", deadline)
        self.timings["apiserver"] = time.monotonic() - t0
        write_kubeconfig(self.kubeconfig, self.server, p)
        kc = str(self.kubeconfig)
        common = [f"--kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
                  f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                  f"--tls-cert-file={p / 'serving.crt'}", f"--tls-private-key-file={p / 'serving.key'}"]
        kcm = self._spawn("kube-controller-manager", [
            str(self.bin.kube), "kube-controller-manager", *common,
            f"--secure-port={self.ports['kcm']}", f"--root-ca-file={p / 'ca.crt'}",
            f"--service-account-private-key-file={p / 'sa.key'}", "--controllers=*",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--kube-api-qps=500", "--kube-api-burst=1000",
            # react to node failures within seconds, not minutes (as kwokctl does, shorter)
            "--node-monitor-period=2s", "--node-monitor-grace-period=40s",
            # the HPA acts every 2 s instead of 15 s: tests wait less, behaviour is the same
            "--horizontal-pod-autoscaler-sync-period=2s",
        ])
        sched = self._spawn("kube-scheduler", [
            str(self.bin.kube), "kube-scheduler", *common, f"--secure-port={self.ports['scheduler']}",
            "--kube-api-qps=500", "--kube-api-burst=1000"])
        kwok = self._spawn("kwok", [
            str(self.bin.kwok), f"--kubeconfig={kc}", f"--config={STAGES}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}", "--node-ip=10.240.0.1", "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports['kwok']}"])
        self._wait(kcm, lambda: self._https_ok(self.ports["kcm"], "/healthz", False),
                   "kube-controller-manager /healthz", deadline)
        self._wait(sched, lambda: self._https_ok(self.ports["scheduler"], "/healthz", False),
                   "kube-scheduler /healthz", deadline)
        self._wait(kwok, lambda: _http_ok(f"http://127.0.0.1:{self.ports['kwok']}/healthz"),
                   "kwok /healthz", deadline)
        # The ServiceAccount admission plugin rejects pods until kcm created `default`.
        self._wait(kcm, lambda: self.kubectl("get", "serviceaccount", "default",
                                             check=False).returncode == 0,
                   "the default ServiceAccount", deadline)
        if self.bin.crds:  # upstream CRDs (ServiceMonitor, PrometheusRule, ScaledObject, ...)
            args = ["apply", "--server-side"]
            for f in self.bin.crds:
                args += ["-f", str(f)]
            self.kubectl(*args)
            self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        self.timings["ready"] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop everything this Cluster started (reverse order), then remove its files."""
        if self._stopped:
            return
        self._stopped = True
        for p in reversed(self.procs):
            _terminate(p.popen)
        if not self.keep_dir and not os.environ.get("E2E_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # helpers for tests
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the pinned kubectl against this cluster."""
        res = subprocess.run([str(kubectl_bin()), f"--kubeconfig={self.kubeconfig}", *args],
                             input=input, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def add_nodes(self, nodes: Iterable[Mapping], timeout: float = 60) -> None:
        """Create Node manifests (made fake with kwok_node) and wait until they are Ready."""
        items = [kwok_node(n) for n in nodes]
        self.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        self.wait_nodes_ready([n["metadata"]["name"] for n in items], timeout)

    def wait_nodes_ready(self, names: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            got = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
            ready = {n["metadata"]["name"] for n in got
                     if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in n.get("status", {}).get("conditions", []))
                     and not any(t["key"].startswith("node.kubernetes.io/")
                                 for t in n.get("spec", {}).get("taints", []))}
            if set(names) <= ready:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes not Ready after {timeout}s: {sorted(set(names) - ready)}")
            time.sleep(0.3)

    def spawn(self, name: str, argv: list[str], ready_url: str | None = None, timeout: float = 60) -> subprocess.Popen:
        """Run an extra process (a test's Prometheus, the adapter) under this cluster's
        supervision: own process group, log in logs/<name>.log, stopped with the cluster.
        With `ready_url` (http or https, certificate not checked), wait until it answers 200."""
        proc = self._spawn(name, argv)
        if ready_url:
            def probe() -> bool:
                ctx = ssl._create_unverified_context() if ready_url.startswith("https") else None
                try:
                    with urllib.request.urlopen(ready_url, context=ctx, timeout=2) as r:
                        return r.status == 200
                except urllib.error.HTTPError:
                    return False
            self._wait(proc, probe, ready_url, time.monotonic() + timeout)
        return proc.popen

    def terminate(self, popen: subprocess.Popen) -> None:
        """Stop one process started with spawn()."""
        _terminate(popen)
        self.procs = [p for p in self.procs if p.popen is not popen]

    def start_adapter(self, rules_file: Path, prometheus_url: str, name: str = "prometheus-adapter") -> tuple[int, subprocess.Popen]:
        """Run the real prometheus-adapter (built by build.sh) on 127.0.0.1 against this
        cluster; returns (port, process). Wiring it into the aggregation layer is the
        caller's job (see `expose_host_service`)."""
        if self.bin.adapter is None:
            raise ClusterError("prometheus-adapter binary missing: run `bash ci/e2e/build.sh adapter`")
        port = free_port()
        kc = str(self.kubeconfig)
        certs = self.dir / f"{name}-certs"
        certs.mkdir(exist_ok=True)
        popen = self.spawn(name, [
            str(self.bin.adapter), f"--lister-kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={certs}", f"--prometheus-url={prometheus_url}", f"--config={rules_file}",
            "--metrics-relist-interval=2s", "--v=2"], ready_url=f"https://127.0.0.1:{port}/healthz")
        return port, popen

    def expose_host_service(self, namespace: str, service: str, apiservice: str, port: int) -> None:
        """Point an APIService at a process on this host: its Service becomes
        `ExternalName: 127.0.0.1` and the APIService port the process's port. The
        aggregator resolves ExternalName services to https://<externalName>:<port>, while
        Endpoints/EndpointSlices reject loopback IPs (kwokctl's metrics-server trick)."""
        self.kubectl("patch", "service", service, "-n", namespace, "--type=merge", "-p", json.dumps(
            {"spec": {"type": "ExternalName", "externalName": "127.0.0.1", "clusterIP": None,
                      "clusterIPs": None, "selector": None, "ipFamilies": None, "ipFamilyPolicy": None,
                      "internalTrafficPolicy": None, "sessionAffinity": None}}))
        self.kubectl("patch", "apiservice", apiservice, "--type=merge", "-p", json.dumps(
            {"spec": {"service": {"port": port}, "insecureSkipTLSVerify": True, "caBundle": None}}))

    def logs(self, name: str, lines: int = 40) -> str:
        return _tail(self.dir / "logs" / f"{name}.log", lines)


def kubectl_bin() -> Path:
    return ROOT / ".tools" / "bin" / "kubectl"


def _terminate(p: subprocess.Popen, grace: float = 10) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def _has_flag(binary: Path, flag: str) -> bool:
    res = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    return flag in res.stdout + res.stderr


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster and keep it running until Ctrl-C")
    up.add_argument("--nodes", type=Path, help="gpuvalues inventory (or kubectl get nodes -o json) to fake")
    up.add_argument("--dir", type=Path, help="work dir (kept); default: a temp dir (removed)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        cluster = Cluster.start(args.dir)
    except ClusterError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 1
    with cluster:
        if args.nodes:
            from gpuvalues.io.cluster import load_inventory

            cluster.add_nodes(nodes_from_inventory(load_inventory(args.nodes)))
        print(f"cluster ready in {time.monotonic() - t0:.1f} s ({cluster.timings})")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while all(p.popen.poll() is None for p in cluster.procs):
                time.sleep(1)
            print("cluster: a component exited; stopping", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
