"""Leader election for the remediation controller on a coordination.k8s.io/v1 Lease, as
client-go's tools/leaderelection does it: holderIdentity, leaseDurationSeconds, renewTime,
and expiry judged on the local clock from when the record last changed. The Lease also
carries the circuit breaker's latch (`BREAKER_ANNOTATION`), so it survives a failover."""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from gpuvalues.errors import GpuValuesError
from gpuvalues.operations.events import now_micro
from gpuvalues.operations.kubeapi import answered, read_json
from gpuvalues.operations.remediation import PREFIX

# On the Lease: the breaker pools latched open (JSON list; "" is the whole fleet).
BREAKER_ANNOTATION = f"{PREFIX}/breaker-latched"
log = logging.getLogger("gpuvalues.remediate")


class LeaseElector:
    """Leader election on a coordination.k8s.io/v1 Lease (client-go
    tools/leaderelection/leaderelection.go semantics, one call per sync): the holder
    renews; others take over only after leaseDurationSeconds without a change of the
    record, measured on their own monotonic clock (no cross-node clock comparison).
    Updates carry the Lease's resourceVersion, so two candidates never both win."""

    def __init__(self, api_client: Any, namespace: str, name: str, identity: str, duration_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from kubernetes import client

        self.api: Any = client.CoordinationV1Api(api_client)
        self.ns, self.name, self.identity, self.duration = namespace, name, identity, duration_s
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._lease: dict[str, Any] = {}

    def _read(self) -> dict[str, Any]:
        lease: dict[str, Any] = read_json(self.api.read_namespaced_lease(self.name, self.ns, _preload_content=False),
                                          what=f"lease {self.ns}/{self.name}")
        return lease

    @property
    def renewed_at(self) -> float | None:
        """When (monotonic) our last successful renewal was, or None."""
        return self._renewed_at

    def latched(self) -> frozenset[str]:
        """The breaker pools latched open, as the Lease we last read records them (the
        latch survives a failover; an operator resets it by removing the annotation)."""
        raw = ((self._lease.get("metadata") or {}).get("annotations") or {}).get(BREAKER_ANNOTATION)
        try:
            pools = json.loads(raw) if raw else []
        except ValueError:
            return frozenset({""})          # unreadable: stay safe, the fleet's breaker open
        if not isinstance(pools, list):
            return frozenset({""})
        return frozenset(str(p) for p in pools)

    def set_latched(self, pools: frozenset[str]) -> None:
        """Record the latched pools on the Lease (its resourceVersion: a lost race fails)."""
        lease = self._read()
        if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        ann = lease.setdefault("metadata", {}).setdefault("annotations", {}) or {}
        ann[BREAKER_ANNOTATION] = json.dumps(sorted(pools))
        lease["metadata"]["annotations"] = ann
        answered(self.api.replace_namespaced_lease(self.name, self.ns, lease, _preload_content=False), "the Lease")
        self._lease = lease

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than the lease duration."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.duration

    def try_acquire_or_renew(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        try:
            lease = self._read()
        except ApiException as e:
            if e.status != 404:
                log.warning("lease %s/%s: %s", self.ns, self.name, e.reason)
                return self.is_leader()
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.ns},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                             "acquireTime": now_micro(), "renewTime": now_micro(), "leaseTransitions": 0}}
            try:
                answered(self.api.create_namespaced_lease(self.ns, body, _preload_content=False), "the Lease")
            except ApiException:
                return False
            self._renewed_at = now
            return True
        self._lease = lease
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity and now - self._observed_at < float(spec.get("leaseDurationSeconds") or self.duration):
            self._renewed_at = None
            return False
        new_spec = dict(spec, holderIdentity=self.identity, leaseDurationSeconds=int(self.duration), renewTime=now_micro())
        if holder != self.identity:
            new_spec["acquireTime"] = now_micro()
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            answered(self.api.replace_namespaced_lease(self.name, self.ns, lease, _preload_content=False), "the Lease")
        except ApiException as e:
            log.info("lease %s/%s: lost the race (%s)", self.ns, self.name, e.status)
            return self.is_leader() if holder == self.identity else False
        if holder != self.identity:
            log.info("acquired lease %s/%s as %s", self.ns, self.name, self.identity)
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the Lease up on a clean exit, so another replica takes over at once."""
        from kubernetes.client.exceptions import ApiException

        if not self.is_leader():
            return
        try:
            lease = self._read()
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                answered(self.api.replace_namespaced_lease(self.name, self.ns, lease, _preload_content=False),
                         "the Lease")
        except (ApiException, GpuValuesError):
            pass
