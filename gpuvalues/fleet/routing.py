"""Routing many models through one Gateway: the model names each workload's HTTPRoute
matches on the body-based router's header, and the conflicts between routes.

The Gateway API Inference Extension's body-based router (BBR) copies the OpenAI `model`
field of a request body into the `X-Gateway-Model-Name` header (GAIE v1.5.0
pkg/bbr/plugins/bodyfieldtoheader/body_field_to_header.go); each workload's HTTPRoute
matches that header exactly, once per name it serves: the served model name (vLLM
`--served-model-name`, the chart's model.name) and the name of each LoRA adapter (vLLM
serves an adapter under its `--lora-modules` name on the base model's pods, so an adapter's
requests go to the base model's InferencePool).
"""
from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["MODEL_HEADER", "MAX_MATCHES", "model_names", "conflicts"]

# GAIE v1.5.0 pkg/bbr/plugins/bodyfieldtoheader/body_field_to_header.go ModelHeader
MODEL_HEADER = "X-Gateway-Model-Name"
# Gateway API v1 HTTPRouteRule.matches: +kubebuilder:validation:MaxItems=64
# (apis/v1/httproute_types.go); the chart puts one workload's names in one rule.
MAX_MATCHES = 64


def model_names(model: str, adapters: Iterable[str]) -> tuple[str, ...]:
    """The `model` values a workload's route takes: the served name, then each adapter's,
    each once, in order."""
    out: list[str] = []
    for name in (model, *adapters):
        if name not in out:
            out.append(name)
    return tuple(out)


def conflicts(routes: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[int, str, int]]:
    """Pairs of routes on one Gateway that match the same requests: for `routes`, a list
    of (gateway key, model names) in spec order, each (index of the later route, the name,
    the earlier route's index). Two Exact matches on one
    header with one value take the same requests; Gateway API then gives them to the
    oldest route (apis/v1/httproute_types.go "Precedence"), so the later one gets none."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for i, (gateway, names) in enumerate(routes):
        for name in names:
            first = seen.setdefault((gateway, name), i)
            if first != i:
                out.append((i, name, first))
    return out
