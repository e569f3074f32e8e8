"""`gpuvalues rollout` as a real process (issue 24): checks before contact, and --dry-run
never contacting the cluster. The kubeconfig points at a listener on loopback that records
every connection; a run that must contact the cluster is the negative control that proves
the listener sees one."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from tests.conftest import ROOT, write_kubeconfig
from tests.unit.test_rollout import BASE

GV = str(ROOT / ".venv" / "bin" / "gpuvalues")


@pytest.fixture
def listener(tmp_path):
    """A TCP listener on 127.0.0.1 counting connections, and a kubeconfig naming it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    seen: list[int] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            seen.append(1)
            conn.close()
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    kc = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{srv.getsockname()[1]}", token="t",
                          insecure=True)
    yield kc, seen
    stop.set()
    t.join(2)
    srv.close()


def _run(args, kubeconfig, timeout=60):
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([GV, "rollout", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_dry_run_and_refusals_never_contact_the_cluster(tmp_path, listener):
    kc, seen = listener
    good = tmp_path / "replan.json"
    good.write_text(json.dumps(BASE, indent=1))
    p = _run([str(good), "--dry-run"], kc)
    assert p.returncode == 0 and p.stdout.startswith("wave 1:"), p.stderr
    p = _run([str(good), "--dry-run", "--kubeconfig", str(tmp_path / "absent")], kc)
    assert p.returncode == 0, p.stderr
    bad = json.loads(json.dumps(BASE))
    bad["changes"][0]["to"] = "mixed 3g!"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    for args in ([str(tmp_path / "bad.json")], [str(good), "--timeout", "nan"], [str(good), "--poll", "-1"]):
        p = _run(args, kc)
        lines = p.stderr.splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
        assert lines[0].startswith("gpuvalues: error: ") and lines[0].endswith(("[GV046]", "[GV037]")), lines
    assert seen == []                                # not one connection so far
    # negative control: a real run must contact the cluster, and the listener sees it (then
    # the run is stopped: its client would retry the TLS-less listener for seconds)
    proc = subprocess.Popen([GV, "rollout", str(good), "--timeout", "5"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "KUBECONFIG": str(kc)})
    try:
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(10)
    assert seen, "the listener saw no connection: it could not have caught the ones above"
