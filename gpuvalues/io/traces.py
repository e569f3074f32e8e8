"""Load traces and HPA behaviours from files, and plot simulated runs (simulate's I/O)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from gpuvalues.bundle import TRACES as TRACES_DIR
from gpuvalues.errors import CapacityError, GpuValuesError, OutputError, ToolNotFoundError
from gpuvalues.io.files import write_atomic
from gpuvalues.planners.autoscaling.hpa import HPA
from gpuvalues.planners.autoscaling.simulate import BUILTIN_TRACES, SimResult, Trace, builtin_behaviors, parse_trace
from gpuvalues.yamlio.loader import parse_yaml
from gpuvalues.yamlio.inputs import read_input


def _read_text(path: str | Path, expected: str, *, shown: str | None = None,
               not_text: str | None = None) -> str:
    """A UTF-8 file's text, or one CapacityError naming it (FIFOs, devices, directories
    and files over the size limit are refused before reading)."""
    data, source = read_input(path, error=CapacityError, expected=expected)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CapacityError(not_text or f"not a UTF-8 text file; expected {expected}",
                            source=shown or source) from None


def load_trace(path_or_name: str | Path) -> Trace:
    """A trace from a CSV file, or a built-in one by name ("diurnal", "spike")."""
    name = str(path_or_name)
    if name in BUILTIN_TRACES:
        path = TRACES_DIR / f"{name}.csv"
    else:
        path = Path(name)
    if not path.exists() and name not in BUILTIN_TRACES:
        raise CapacityError(f"file not found; give a CSV file or one of {', '.join(BUILTIN_TRACES)}",
                            source=name)
    text = _read_text(path, "a text CSV file (time_s,requests_per_s)", shown=name,
                      not_text="not a text CSV file (time_s,requests_per_s)")
    return parse_trace(text, name)


def plot(results: Sequence[SimResult], path: str | Path, metric_label: str = "metric") -> None:
    """A PNG with three panels (load, replicas per behaviour, the metric the HPA saw).
    Needs matplotlib: `pip install 'gpuvalues[plot]'`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ToolNotFoundError("plotting needs matplotlib: pip install 'gpuvalues[plot]'") from None
    import io

    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    hours = [t / 3600.0 for t in results[0].times_s]
    axes[0].plot(hours, results[0].load_rps, color="black", lw=1)
    axes[0].set_ylabel("load (req/s)")
    for r in results:
        axes[1].step(hours, r.replicas, where="post", lw=1.2, label=f"{r.name} ({r.summary['flaps']} flaps)")
        axes[2].plot([t / 3600.0 for t in r.times_s], r.metric, lw=0.8, label=r.name)
    axes[1].set_ylabel("replicas")
    axes[1].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel(metric_label)
    axes[2].set_xlabel("hours")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    try:
        write_atomic(path, buf.getvalue())
    except OutputError as exc:
        raise CapacityError(f"cannot write the plot ({exc.message})", source=str(path)) from None


def load_behaviors(items: Sequence[str], startup_s: float) -> dict[str, Mapping[str, Any] | None]:
    """`NAME` (a built-in: no-stabilization, legacy, recommended) or `NAME=FILE` (YAML with
    an autoscaling/v2 `behavior` mapping, or a mapping holding one under `behavior`)."""
    builtins = builtin_behaviors(startup_s)
    out: dict[str, Mapping[str, Any] | None] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            if name not in builtins:
                raise CapacityError(f"unknown behavior {name!r}; use {', '.join(builtins)} or NAME=FILE",
                                    field="behavior")
            out[name] = builtins[name]
            continue
        text = _read_text(path, "a behavior YAML file")
        doc = parse_yaml(text, source=path, error=CapacityError)
        if isinstance(doc, Mapping) and "behavior" in doc:
            doc = doc["behavior"]
        try:
            HPA(1, 2, doc)  # validate now, with the file named in the error
        except GpuValuesError as exc:
            raise CapacityError(exc.message, source=path, field=exc.field) from None
        out[name] = doc
    return out
