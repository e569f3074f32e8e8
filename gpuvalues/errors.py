"""One error hierarchy for everything a user can get wrong.

Every user-facing failure is a `GpuValuesError` (a `ValueError`), whose message says
what to change. The CLI prints it as one line ending in its `[code]` and exits with the
class's `exit_code`: 2 for bad input (permanent: the same input fails again), 3 for a
`TransientError` (a server that is down, slow or overloaded: the same command may pass
later); anything else is a bug and shows a traceback. Errors about a file carry its location so the message reads
`file:line:col: field: message`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

# A value quoted in a message (any run of non-blank characters) is cut to this many
# characters, and a whole message to MAX_MESSAGE: a 10 MB string in a spec must not make a
# 10 MB "one-line" error.
MAX_QUOTED = 80
MAX_MESSAGE = 4096
_LONG_TOKEN = re.compile(r"\S{%d,}" % (MAX_QUOTED + 1))
_ENDS_WITH_CODE = re.compile(r"\[GV\d{3}\]( \(fix: .*\))?( \(and \d+ more\))?$")


def _cut(match: re.Match[str]) -> str:
    token: str = match.group(0)
    close = token[-1] if token[-1] in "'\"" else ""
    return token[:MAX_QUOTED - 3 - len(close)] + "..." + close


def one_line(text: str) -> str:
    """`text` as one bounded line: newlines become spaces, each run of more than
    MAX_QUOTED non-blank characters (a long quoted value, key or path) keeps its start and
    an ellipsis (and its closing quote), the whole at most MAX_MESSAGE characters. The one
    place where every error and finding message is bounded."""
    text = str(text)
    if "\n" in text or "\r" in text:
        text = re.sub(r"[\r\n]+", " ", text)
    if len(text) > MAX_QUOTED:
        text = _LONG_TOKEN.sub(_cut, text)
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 3] + "..."
    return text


class GpuValuesError(ValueError):
    """Base class: bad input or an impossible request, never a bug in gpuvalues."""

    code = "GV100"      # the class's code in CODES; an instance may carry a more exact one
    exit_code = 2       # the CLI's exit status for this class (EXIT_BAD_INPUT)

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 column: int | None = None, field: str | None = None,
                 code: str | None = None) -> None:
        message = one_line(message)
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.field = one_line(field) if field else field
        if code is not None:
            if code not in CODES:
                raise ValueError(f"unregistered error code {code!r}: add it to CODES")
            self.code = code

    def __str__(self) -> str:
        where = ""
        if self.source:
            where = self.source
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"

    def lines(self) -> list[str]:
        """What the CLI prints: one line `file:line:col: field: message [code]`."""
        text = str(self)
        return [text if _ENDS_WITH_CODE.search(text) else f"{text} [{self.code}]"]


class CatalogError(GpuValuesError):
    """Unknown GPU model or profile, or a broken catalog data file."""


class MigLayoutError(GpuValuesError):
    """A set of MIG profiles that cannot be placed on one GPU."""


class PlanError(GpuValuesError):
    """No plan satisfies the workload mix on the given inventory."""


class DevicePluginConfigError(GpuValuesError):
    """A device-plugin config that the NVIDIA device plugin would reject."""


class MigPartedConfigError(GpuValuesError):
    """A mig-parted config that nvidia-mig-parted would reject."""


class TopologyParseError(GpuValuesError):
    """`nvidia-smi topo -m` output that cannot be parsed."""


class InventoryError(GpuValuesError):
    """A cluster inventory that is malformed or inconsistent."""


class CapacityError(GpuValuesError):
    """Load, SLO or autoscaling inputs that cannot be satisfied or make no sense."""


class SpecError(GpuValuesError):
    """A spec or values file that is malformed (YAML, schema or semantic checks)."""


class ToolNotFoundError(GpuValuesError):
    """A required external tool (helm) is not installed."""


class RenderError(GpuValuesError):
    """helm failed to render the chart, or a rendered object is invalid."""


class OutputError(GpuValuesError):
    """An output path that cannot be written (full disk, read-only, not ours to replace)."""


class TransientError(GpuValuesError):
    """A failure that is not the input's fault and may pass on a retry: an API server or
    Prometheus that is unreachable, times out, or answers 429/5xx. Exit code 3, so scripts
    and controllers can tell "retry later" from "fix the input" (exit 2). Wrappers that
    re-raise a library error as their own class must keep this one as it is."""

    code = "GV036"
    exit_code = 3


class InputError(SpecError):
    """An input path that must not be read (FIFO, device, directory, too large, outside the
    spec's folder)."""

    code = "GV019"


# code -> (title, hint). Stable: add new codes, never renumber.
CODES = {
    "GV000": ("schema", "change the value to what the schema allows"),
    "GV001": ("MIG profile not on this GPU model",
              "pick a profile the GPU offers (gpuvalues plan lists them) or another node pool"),
    "GV002": ("MIG layout impossible",
              "use fewer or smaller instances; `gpuvalues plan` computes a valid layout"),
    "GV003": ("autoscaling metric invalid for the GPU mode",
              "use the metric gpuvalues chooses (autoscaling.metric: choose)"),
    "GV004": ("PodDisruptionBudget blocks node drains",
              "set pdb.maxUnavailable: 1, or minAvailable below minReplicas"),
    "GV005": ("maxReplicas x GPUs per replica exceeds the inventory",
              "lower autoscaling.maxReplicas or add GPU nodes"),
    "GV006": ("tensor-parallel degree larger than the node's NVLink group",
              "lower tensorParallel to the NVLink group size or use a node pool with larger "
              "NVLink groups"),
    "GV007": ("time-slicing with memory need above GPU memory / replicas (OOM risk)",
              "lower replicasPerGpu, use MIG (memory isolation) or whole GPUs"),
    "GV008": ("GPU requests differ from limits",
              "set GPU resources in limits only (requests, if given, equal to limits)"),
    "GV009": ("DRA needs Kubernetes >= 1.34",
              "target Kubernetes 1.34+ (kubernetesVersion / --kube-version) or use whole/mig"),
    "GV010": ("value read differently by YAML 1.1 (Helm) and YAML 1.2 tools",
              "quote the value or write it unambiguously (true/false, 0o755)"),
    "GV011": ("minReplicas greater than maxReplicas",
              "make autoscaling.minReplicas <= autoscaling.maxReplicas"),
    "GV012": ("GPUs per replica exceed GPUs per node",
              "lower gpus / tensorParallel, or use nodes with more GPUs"),
    "GV013": ("memory need exceeds the GPU's memory",
              "use a GPU with more memory or split the model (tensorParallel)"),
    "GV014": ("no node pool can host the workload",
              "change the workload's sharing or nodePool, or add a pool that fits it"),
    "GV015": ("the fleet does not fit its node pools at maxReplicas",
              "lower maxReplicas, give workloads separate pools, or add nodes"),
    "GV016": ("an autoscaler metric that nothing serves",
              "enable the Prometheus adapter (platform.prometheusAdapter) or use KEDA"),
    "GV017": ("a resource no node group offers",
              "check the workload's sharing and the pool's device-plugin/MIG config"),
    "GV018": ("two releases or objects with one name",
              "rename a workload or give it another namespace"),
    "GV019": ("a YAML, file or size limit was hit",
              "fix the file; gpuvalues reads regular files only"),
    "GV020": ("a workload that would block or hurt a node drain",
              "keep >= 2 replicas, pdb.maxUnavailable 1 with unhealthyPodEvictionPolicy AlwaysAllow, "
              "and no toleration of the remediation taint"),
    "GV021": ("pods select a node label that nothing in the install produces",
              "turn on the part that produces it (platform.gpuFeatureDiscovery, cluster.nfd, the "
              "device plugin) or drop the selector"),
    "GV031": ("an image tagged latest (it changes under a running release)",
              "pin a version tag or a digest (image.digest: sha256:...)"),
    "GV032": ("a hugepages or extended resource requested without an equal limit",
              "set the limit equal to the request (the API server does not overcommit them)"),
    "GV036": ("a server gpuvalues needs is down, slow or overloaded (transient; exit 3)",
              "retry later; check the server's address, credentials and health"),
    "GV037": ("a name or label Kubernetes would refuse",
              "use a DNS-1123 name (lowercase, digits, '-', '.'; <= 253 characters) and "
              "label keys/values of <= 63 characters ([A-Za-z0-9] at both ends, '-_.' inside)"),
    "GV038": ("a number or count out of range",
              "use a value within the range the message gives"),
    "GV039": ("a key given twice in one mapping (JSON or YAML)",
              "keep one of them: readers disagree about which one wins"),
    "GV040": ("an output path of the wrong kind (a file where a folder belongs, or the reverse)",
              "give a folder for several files (ending in /), a file name for one"),
    "GV041": ("remediation controller options, config or kubeconfig invalid",
              "fix the option or key the message names (docs/self-healing.md lists them)"),
    "GV046": ("a re-plan file or rollout option a rollout cannot run",
              "give `gpuvalues --output json replan` output unchanged, and finite option values in range"),
    "GV048": ("the cluster does not match the re-plan",
              "re-plan against the current cluster, or remove a malformed rollout state annotation"),
    "GV049": ("a rollout stopped: mig-manager failed or a wave timed out",
              "see the node's Events and mig-manager's logs, fix, then rerun (it resumes)"),
    "GV050": ("two HTTPRoutes on one Gateway match the same requests (one model name, two workloads)",
              "serve each model name from one workload (rename the LoRA adapter, or merge the workloads)"),
    "GV051": ("more model names in one HTTPRoute than Gateway API allows (64 matches per rule)",
              "split the LoRA adapters across workloads"),
    "GV052": ("the workloads' HTTPRoutes name Gateways in several namespaces, the body-based router serves one",
              "set gateway.namespace (the Gateway's namespace)"),
    "GV055": ("a replica's memory below its weights plus the KV-cache floor",
              "raise memoryGB to at least the weights + max(1 GB, 10%) (docs/serving.md), or "
              "correct modelSizeGB / parameters / dtype"),
    "GV056": ("a large model whose weights the spec does not state (warning)",
              "give modelSizeGB, or parameters and dtype: they size the download volume, "
              "ephemeral storage and the memory check"),
    "GV057": ("a LoRA adapter source vLLM cannot load",
              "give a Hugging Face repo id, or an absolute path under /models in the model's "
              "claim (modelPvc or modelSource cache/image); object storage URLs are not loaded"),
    "GV060": ("a multi-node replica (nodesPerReplica > 1) with GPU sharing, MIG or DRA",
              "give the workload whole GPUs (sharing: whole): a group takes whole nodes"),
    "GV061": ("a multi-node replica that its node pool cannot hold",
              "lower nodesPerReplica (or the memory per replica), or add nodes to the pool"),
    "GV062": ("nodesPerReplica disagrees with gpus / tensorParallel",
              "give tensorParallel = gpusPerNode (GPUs per pod) and gpus = nodesPerReplica x gpusPerNode, or leave them out"),
    "GV063": ("a multi-node replica with a server other than vLLM",
              "use server: vllm (Ray across the group's pods), or a model that fits one node"),
    "GV064": ("LeaderWorkerSet values the group cannot run with",
              "multi-node groups need gpu.mode whole, server.type vllm and minReplicas >= 1 (no scale to zero)"),
    "GV065": ("a cluster dump doctor cannot read (not `kubectl get -o json` output)",
              "give the folder of `kubectl get ... -o json` files docs/doctor.md lists"),
    "GV066": ("doctor's options or dump folder are wrong",
              "give exactly one of --dump DIR or a live cluster (--kubeconfig/--context), and an existing folder"),
    "GV067": ("Prometheus series doctor cannot read",
              "give prometheus-series.json as {series name: /api/v1/series response}, or a reachable --prometheus URL"),
    "GV068": ("a Helm release record that does not decode",
              "dump the Secrets Helm wrote (kubectl get secrets -l owner=helm -o json) unchanged"),
    "GV070": ("an API server answer larger than its cap (transient; exit 3)",
              "check what grew (a node or pod list, a forged answer); a selector narrows what is read"),
    "GV071": ("a rollout skipped nodes whose rollout state annotation went bad while it ran",
              "see the node's MigRolloutSkipped Event; remove the annotation (the message gives the command) and rerun"),
    "GV075": ("a topology too irregular to analyse within gpuvalues' search bound",
              "check the `nvidia-smi topo -m` output: real NVLink graphs are a few cliques"),
    "GV080": ("the GPU Operator's one MIG strategy cannot serve every node group's config",
              "set platform.gpuOperator: false (the platform's device plugin reads each group's "
              "strategy) or give the fleet one MIG strategy and no MPS beside mixed MIG"),
    "GV100": ("bad input", "fix the value the message names"),
}

# The CLI's exit statuses (README "Errors as data"); a class's `exit_code` is one of them.
EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_TRANSIENT = 0, 1, 2, 3


@dataclass(frozen=True)
class Finding:
    """One problem, placed in a file when known: `file:line:col: path: message [code]`."""

    code: str
    message: str
    path: str = "(root)"
    source: str = ""
    line: int | None = None
    column: int | None = None
    severity: str = "error"          # "error" or "warning"
    hint: str = ""

    def __post_init__(self) -> None:
        for name in ("message", "path", "hint"):
            value = getattr(self, name)
            if value and len(value) > MAX_QUOTED:
                object.__setattr__(self, name, one_line(value))

    def sort_key(self) -> tuple[str, int, int, str, str, str]:
        """Order findings by file position, then path and code."""
        return (self.source, self.line or 0, self.column or 0, self.path, self.code, self.message)

    def __str__(self) -> str:
        where = self.source
        if where and self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        head = f"{where}: " if where else ""
        sev = "warning: " if self.severity == "warning" else ""
        hint = f" (fix: {self.hint})" if self.hint else ""
        return f"{head}{self.path}: {sev}{self.message} [{self.code}]{hint}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--output yaml|json`."""
        return {"code": self.code, "severity": self.severity, "source": self.source,
                "line": self.line, "column": self.column, "path": self.path,
                "message": self.message, "hint": self.hint}


class ValidationFailed(SpecError):
    """Raised where validation must pass (values, render, update); carries every finding."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = sorted(findings, key=Finding.sort_key)
        first = self.findings[0]
        more = len(self.findings) - 1
        text = str(first) + (f" (and {more} more)" if more else "")
        super().__init__(text)
        # one_line() would cut a long file path as if it were a quoted value; the finding
        # has bounded its own parts, so only the whole line's length is bounded here.
        self.message = text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."

    def __str__(self) -> str:
        return self.message

    def lines(self) -> list[str]:
        """One printable line per finding (the CLI prints them all)."""
        return [str(f) for f in self.findings]


def errors_only(findings: Iterable[Finding]) -> list[Finding]:
    """The findings with severity `error` (warnings dropped)."""
    return [f for f in findings if f.severity == "error"]
