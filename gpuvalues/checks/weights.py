"""Spec rules on a model's weights and LoRA adapters, before any GPU is considered.

- GV055: a replica's memory (`memoryGB` / `memoryGiB`) below its weights plus the KV-cache
  floor. vLLM loads the weights first and then gives what is left of its memory budget to
  the KV cache; with nothing left it refuses to start ("No available memory for the cache
  blocks", and below one max-length sequence "To serve at least one request with the
  model's max seq len ..."; vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory).
- GV056 (warning): a large model whose weights the spec does not state: the download volume
  keeps the chart's default size (64Gi) and GV055 cannot run.
- GV057: a LoRA adapter source vLLM's `--lora-modules` cannot load. vLLM keeps an absolute
  path, and passes anything else to huggingface_hub.snapshot_download as a repo id; when
  that fails the text is used as a path (vllm/lora/utils.py get_adapter_absolute_path), so
  `s3://...` fails at start. An absolute path must be inside a volume the pod mounts.
"""
from __future__ import annotations

import re
from typing import Any

from gpuvalues.catalog import GIB_PER_GB
from gpuvalues.checks.rules import finding
from gpuvalues.errors import Finding
from gpuvalues.fleet.spec import DEFAULT_DTYPE, DTYPE_BYTES, weights_gb
from gpuvalues.yamlio.loader import Loaded, format_path

__all__ = ["KV_FLOOR_MIN_GB", "KV_FLOOR_FRACTION", "kv_floor_gb", "named_parameters_b",
           "is_hf_repo_id", "weight_findings"]

# The KV-cache floor: room for at least one sequence's KV cache, the activations of vLLM's
# profiling run and its CUDA graphs. One 4,096-token sequence of a 16-bit dense model takes
# 0.2-1.6 GB (Qwen2.5-7B 0.23, Llama-3.1-8B 0.54, Phi-3-mini without GQA 1.6), its CUDA
# graphs about 1 GB more: 10% of the weights, at least 1 GB. A floor, not a recommendation:
# serving many long requests needs several times more.
KV_FLOOR_MIN_GB = 1.0
KV_FLOOR_FRACTION = 0.10
# Parameters (billions) from which a model whose weights are not stated is warned about:
# 30B at 16 bits is 60 GB, at the chart's default 64Gi (68.7 GB) download volume.
LARGE_PARAMETERS_B = 30.0
# The parameter count a model id names: "Llama-3.1-70B-Instruct" -> 70, "Qwen2.5-0.5B" -> 0.5.
_NAMED_PARAMS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)[bB](?![A-Za-z0-9])")
# huggingface_hub's validate_repo_id (utils/_validators.py), as the chart's $defs.hfRepoId.
_HF_REPO_ID = re.compile(r"([A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?/)?"
                         r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
# Where the chart mounts the model volume (values.yaml model.mountPath).
MODEL_MOUNT = "/models"


def kv_floor_gb(weights: float) -> float:
    """The KV-cache floor above `weights` GB that a replica's memory must hold."""
    return max(KV_FLOOR_MIN_GB, KV_FLOOR_FRACTION * weights)


def named_parameters_b(model: str) -> float | None:
    """The largest parameter count (billions) the model id names, None if none."""
    found = [float(m.group(1)) for m in _NAMED_PARAMS.finditer(model.rsplit("/", 1)[-1])]
    return max(found) if found else None


def is_hf_repo_id(text: str) -> bool:
    """True when huggingface_hub would take `text` as a repo id."""
    return bool(_HF_REPO_ID.fullmatch(text)) and "--" not in text and ".." not in text \
        and not text.endswith(".git")


def _weights_text(w: dict[str, Any], weights: float) -> str:
    if w.get("modelSizeGB"):
        return f"{weights:g} GB (modelSizeGB)"
    dtype = w.get("dtype", DEFAULT_DTYPE)
    return (f"{weights:.2f} GB ({w['parameters']:g}B parameters x {DTYPE_BYTES[dtype]:g} "
            f"bytes, {dtype})")


def weight_findings(data: dict[str, Any], loaded: Loaded) -> list[Finding]:
    """GV055, GV056 and GV057 over a schema-valid spec's workloads."""
    out: list[Finding] = []
    for i, w in enumerate(data["workloads"]):
        at: tuple[Any, ...] = ("workloads", i)
        where = f"workloads[{i}]"
        weights = weights_gb(w.get("modelSizeGB"), w.get("parameters"), w.get("dtype"))
        memory_key = "memoryGiB" if "memoryGiB" in w else "memoryGB"
        memory = w.get("memoryGB") if memory_key == "memoryGB" else \
            (w["memoryGiB"] / GIB_PER_GB if "memoryGiB" in w else None)
        if weights is not None and memory is not None:
            need = weights + kv_floor_gb(weights)
            if memory < need:
                given = f"{memory_key} {w[memory_key]:g}" + (f" ({memory:.2f} GB)"
                                                             if memory_key == "memoryGiB" else "")
                out.append(finding(
                    "GV055", f"{given} is below the weights, {_weights_text(w, weights)}, plus "
                    f"the KV-cache floor {kv_floor_gb(weights):.2f} GB = {need:.2f} GB: vLLM "
                    "loads the weights, then refuses to start without room for the KV cache "
                    "(vllm/v1/core/kv_cache_utils.py)", f"{where}.{memory_key}",
                    loaded=loaded, at=at + (memory_key,),
                    hint=f"set memoryGB >= {need:.2f} (or check modelSizeGB / parameters / dtype)"))
        if weights is None:
            named = named_parameters_b(w["model"])
            multi = max(w.get("gpus", 1), w.get("tensorParallel", 1)) > 1
            if (named is not None and named >= LARGE_PARAMETERS_B) or multi:
                why = (f"{w['model']} names {named:g}B parameters" if named is not None
                       and named >= LARGE_PARAMETERS_B else
                       f"{max(w.get('gpus', 1), w.get('tensorParallel', 1))} GPUs per replica")
                downloads = not w.get("modelPvc") and \
                    w.get("modelSource", {}).get("type", "download") == "download"
                out.append(finding(
                    "GV056", f"{why} but the spec does not state the weights: " + (
                        "the download volume and ephemeral storage keep the chart's default "
                        "(64Gi, evicted when the download outgrows it) and " if downloads else
                        "") + "memoryGB is not checked against them",
                    f"{where}.model", loaded=loaded, at=at + ("model",), severity="warning"))
        out += _lora_findings(w, at, loaded)
    return out


def _lora_findings(w: dict[str, Any], at: tuple[Any, ...], loaded: Loaded
                   ) -> list[Finding]:
    out: list[Finding] = []
    source = w.get("modelSource", {}).get("type", "download")
    mounted = bool(w.get("modelPvc")) or source in ("cache", "image")
    for j, adapter in enumerate(w.get("lora", ())):
        src = adapter["source"]
        where = format_path(at + ("lora", j, "source"))
        if src.startswith("/"):
            inside = src.startswith(MODEL_MOUNT + "/") and "/../" not in src + "/"
            if inside and mounted:
                continue
            why = (f"{src} is not under {MODEL_MOUNT}/, the only volume of the pod that holds "
                   "files the spec provides" if not inside else
                   f"{src} is under {MODEL_MOUNT}, but this workload's model volume is "
                   f"{'a download cache' if source == 'download' else 'streamed'}: nothing "
                   "puts the adapter there")
            out.append(finding(
                "GV057", f"LoRA adapter {adapter['name']}: {why}", where, loaded=loaded,
                at=at + ("lora", j, "source"),
                hint="put the adapter in the claim the model comes from (modelPvc, or a "
                     "modelSource cache/image) and give its path under /models, or use a "
                     "Hugging Face repo id"))
        elif not is_hf_repo_id(src):
            scheme = src.split("://", 1)[0] + "://" if "://" in src else None
            why = (f"{scheme} is not something vLLM's --lora-modules loads" if scheme else
                   "it is neither an absolute path nor a Hugging Face repo id")
            out.append(finding(
                "GV057", f"LoRA adapter {adapter['name']}: source {src}: {why} (an absolute "
                "path in the pod, or a Hugging Face repo id; anything else is passed on as a "
                "path and fails at start: vllm/lora/utils.py get_adapter_absolute_path)",
                where, loaded=loaded, at=at + ("lora", j, "source"),
                hint="publish the adapter to the Hugging Face Hub and give its repo id, or copy "
                     "it into the model's claim (modelPvc, or modelSource cache) and give its "
                     "path under /models"))
    return out
