"""Where encoders run: CUDA when available and asked for, otherwise CPU."""

from __future__ import annotations


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
