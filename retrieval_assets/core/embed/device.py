"""Where encoders run: CUDA when available and asked for, otherwise CPU, and how many cores."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_device(requested: str = "auto") -> str:
    """Return "cuda" when ``requested`` is "auto" or "cuda" and torch sees a GPU, else "cpu"."""
    if requested not in ("auto", "cuda"):
        return "cpu"
    import torch  # deferred: torch takes seconds to import and callers may only need the CPU

    return "cuda" if torch.cuda.is_available() else "cpu"


def onnx_providers(device: str) -> list[str]:
    """onnxruntime execution providers for ``device``, GPU first when this build has it."""
    if device != "cuda":
        return ["CPUExecutionProvider"]
    import onnxruntime

    available = set(onnxruntime.get_available_providers())
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def provider_device(providers: list[str]) -> str:
    """The device an onnxruntime session on ``providers`` runs on: "cuda" only when the CUDA
    provider leads, so an onnxruntime build without it keeps the CPU's batching."""
    return "cuda" if providers[0] == "CUDAExecutionProvider" else "cpu"
