"""ONNX graphs made batch-exact: dynamically quantised matrix products rewritten to fp32.

A dynamically quantised (INT8) export computes each ``MatMulInteger``'s activation scale over
the whole input tensor (``DynamicQuantizeLinear``), so a text's output depends on the texts
beside it in a run and on its padding. The packaged bge-small and cross-encoder are such
exports. This module rewrites every chain

    DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast -> Mul(scale_x * scale_W)

into ``MatMul(x, W)`` against the dequantised weights ``W = (W_q - W_zp) * scale_W`` (per output
column when the scales are per column). The weights are the shipped ones, so the model is the
same model; only the activations are no longer quantised. Measured on the packaged models: a
text's vector, or a pair's score, is bit for bit the same alone, in any batch and with any
padding (docs/models.md "Exact encoders").

The rewrite happens in memory at load time (under a second) and needs the ``onnx`` package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

# Recorded with the encoder (and in the embedding cache's fingerprint): which graph made a vector.
GRAPH_AS_SHIPPED = "as-shipped"
GRAPH_DEQUANTIZED = "dequantized-fp32"


class GraphRewriteError(ValueError):
    """The graph quantises activations in a way the rewrite does not recognise; names the node."""


@dataclass(frozen=True)
class LoadedGraph:
    """What an onnxruntime session is created from, and whether its outputs ignore batch company."""

    source: bytes | str  # serialised model, or the file path when loaded as shipped
    graph: str  # GRAPH_AS_SHIPPED or GRAPH_DEQUANTIZED
    batch_exact: bool  # no activation is quantised with a scale shared across the batch
    rewritten: int  # MatMulInteger chains replaced


def load_graph(model_path: str | Path, dequantize: bool) -> LoadedGraph:
    """The model at ``model_path``, with its dynamic INT8 products rewritten when ``dequantize``.

    A graph without dynamic quantisation is returned as shipped (nothing to rewrite) and is
    batch-exact; with ``dequantize`` false an INT8 graph is returned as shipped and is not.
    """
    import onnx

    path = Path(model_path)
    model = onnx.load(str(path))
    quantized = any(node.op_type == "DynamicQuantizeLinear" for node in model.graph.node)
    if not quantized:
        return LoadedGraph(source=str(path), graph=GRAPH_AS_SHIPPED, batch_exact=True, rewritten=0)
    if not dequantize:
        return LoadedGraph(source=str(path), graph=GRAPH_AS_SHIPPED, batch_exact=False, rewritten=0)
    rewritten = dequantize_dynamic_matmuls(model)
    return LoadedGraph(
        source=model.SerializeToString(), graph=GRAPH_DEQUANTIZED, batch_exact=True, rewritten=rewritten
    )


def dequantize_dynamic_matmuls(model: onnx.ModelProto) -> int:
    """Rewrite every dynamically quantised matrix product of ``model`` in place; returns how many.

    Raises GraphRewriteError, naming the node, when a ``MatMulInteger`` or a
    ``DynamicQuantizeLinear`` is not part of the chain described in the module docstring, so a
    graph is never left half quantised.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def only_consumer(node: onnx.NodeProto, op_type: str) -> onnx.NodeProto:
        found = consumers.get(node.output[0], [])
        if len(found) != 1 or found[0].op_type != op_type:
            raise GraphRewriteError(f"{node.op_type} node {node.name!r} does not feed exactly one {op_type}")
        return found[0]

    def weight(name: str, node: onnx.NodeProto) -> np.ndarray:
        if name not in initializers:
            raise GraphRewriteError(f"{node.op_type} node {node.name!r}: {name!r} is not a constant weight")
        return numpy_helper.to_array(initializers[name]).astype(np.float32)

    replacements: dict[str, onnx.NodeProto] = {}
    removed: set[str] = set()
    dequantized: list[onnx.TensorProto] = []
    for product in [node for node in graph.node if node.op_type == "MatMulInteger"]:
        quantize = producer.get(product.input[0])
        if quantize is None or quantize.op_type != "DynamicQuantizeLinear" or len(product.input) != 4:
            raise GraphRewriteError(f"MatMulInteger node {product.name!r} does not take a dynamically quantised input")
        cast = only_consumer(product, "Cast")
        rescale = only_consumer(cast, "Mul")
        (scales_name,) = [name for name in rescale.input if name != cast.output[0]]
        scales = producer.get(scales_name)
        if scales is None or scales.op_type != "Mul" or quantize.output[1] not in scales.input:
            raise GraphRewriteError(f"Mul node {rescale.name!r} does not rescale by the activation scale")
        (weight_scale_name,) = [name for name in scales.input if name != quantize.output[1]]
        codes = weight(product.input[1], product)
        if codes.ndim != 2:
            raise GraphRewriteError(f"MatMulInteger node {product.name!r} has a weight of rank {codes.ndim}")
        # Scales and zero points are per tensor (scalars) or per output column (length N): both broadcast.
        values = (codes - weight(product.input[3], product)) * weight(weight_scale_name, scales)
        name = f"{product.input[1]}_dequantized"
        dequantized.append(numpy_helper.from_array(values.astype(np.float32), name))
        replacements[product.name] = helper.make_node(
            "MatMul", [quantize.input[0], name], [rescale.output[0]], name=f"{product.name}_fp32"
        )
        removed.update({cast.name, rescale.name, scales.name})

    nodes = [replacements.get(node.name, node) for node in graph.node if node.name not in removed]
    still_read = {name for node in nodes for name in node.input}
    for node in nodes:
        if node.op_type == "DynamicQuantizeLinear" and any(output in still_read for output in node.output):
            raise GraphRewriteError(f"DynamicQuantizeLinear node {node.name!r} feeds something besides MatMulInteger")
    nodes = [node for node in nodes if node.op_type != "DynamicQuantizeLinear"]
    still_read = {name for node in nodes for name in node.input}
    kept = [tensor for tensor in graph.initializer if tensor.name in still_read]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + dequantized)
    return len(replacements)
