"""The INT8 -> fp32 graph rewrite, on the packaged models and on small hand-made graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from retrieval_assets.core.embed.onnx_graph import (
    GRAPH_AS_SHIPPED,
    GRAPH_DEQUANTIZED,
    GraphRewriteError,
    dequantize_dynamic_matmuls,
    load_graph,
)
from retrieval_assets.core.embed.packaged import resolve_model_path

WEIGHT = np.array([[-3, 7, 0], [12, -128, 127], [5, 5, -5], [1, 2, 3]], dtype=np.int8)  # (K=4, N=3)
ZERO_POINT = np.array([1, -2, 0], dtype=np.int8)  # per output column
SCALE = np.array([0.5, 0.01, 2.0], dtype=np.float32)


def _quantized_linear(extra_reader: bool = False) -> onnx.ModelProto:
    """y = x @ W the way onnxruntime's dynamic quantiser writes it, with per-column weight scales."""
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"], name="quantize"),
        helper.make_node("MatMulInteger", ["x_q", "w_q", "x_zp", "w_zp"], ["y_int"], name="product"),
        helper.make_node("Cast", ["y_int"], ["y_float"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scales"], name="scales"),
        helper.make_node("Mul", ["y_float", "scales"], ["y"], name="rescale"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])]
    if extra_reader:  # something besides MatMulInteger reads the quantised activations
        nodes.append(helper.make_node("Cast", ["x_q"], ["x_codes"], to=TensorProto.FLOAT, name="peek"))
        outputs.append(helper.make_tensor_value_info("x_codes", TensorProto.FLOAT, ["batch", 4]))
    graph = helper.make_graph(
        nodes,
        "quantized_linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs,
        initializer=[
            numpy_helper.from_array(WEIGHT, "w_q"),
            numpy_helper.from_array(ZERO_POINT, "w_zp"),
            numpy_helper.from_array(SCALE, "w_scale"),
        ],
    )
    # IR version 8: what onnxruntime 1.31 reads (onnx 1.23 would write a newer one).
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(source: bytes | str, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["y"], {"x": x})[0])


def test_a_quantized_linear_becomes_an_exact_fp32_product(tmp_path: Path) -> None:
    model = _quantized_linear()
    assert dequantize_dynamic_matmuls(model) == 1
    assert [node.op_type for node in model.graph.node] == ["MatMul"]
    assert {tensor.name for tensor in model.graph.initializer} == {"w_q_dequantized"}
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    expected = x @ ((WEIGHT.astype(np.float32) - ZERO_POINT) * SCALE)
    got = _run(model.SerializeToString(), x)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # Each row is the same alone as in the batch: nothing is shared across rows any more.
    assert np.array_equal(np.concatenate([_run(model.SerializeToString(), row[None]) for row in x]), got)
    onnx.save(_quantized_linear(), tmp_path / "int8.onnx")
    as_shipped = _run(str(tmp_path / "int8.onnx"), x)
    assert not np.array_equal(np.concatenate([_run(str(tmp_path / "int8.onnx"), row[None]) for row in x]), as_shipped)


def test_an_unrecognised_chain_is_refused_naming_the_node() -> None:
    with pytest.raises(GraphRewriteError, match="'quantize'"):
        dequantize_dynamic_matmuls(_quantized_linear(extra_reader=True))
    broken = _quantized_linear()
    broken.graph.node[2].op_type = "Identity"  # the Cast after MatMulInteger
    with pytest.raises(GraphRewriteError, match="'product'"):
        dequantize_dynamic_matmuls(broken)


def test_load_graph_rewrites_on_request_and_passes_fp32_graphs_through(tmp_path: Path) -> None:
    onnx.save(_quantized_linear(), tmp_path / "int8.onnx")
    exact = load_graph(tmp_path / "int8.onnx", dequantize=True)
    assert (exact.graph, exact.batch_exact, exact.rewritten) == (GRAPH_DEQUANTIZED, True, 1)
    shipped = load_graph(tmp_path / "int8.onnx", dequantize=False)
    assert (shipped.graph, shipped.batch_exact) == (GRAPH_AS_SHIPPED, False)
    assert shipped.source == str(tmp_path / "int8.onnx")
    fp32 = _quantized_linear()
    dequantize_dynamic_matmuls(fp32)
    onnx.save(fp32, tmp_path / "fp32.onnx")
    plain = load_graph(tmp_path / "fp32.onnx", dequantize=True)
    assert (plain.graph, plain.batch_exact, plain.rewritten) == (GRAPH_AS_SHIPPED, True, 0)


@pytest.mark.parametrize("name", ["BAAI/bge-small-en-v1.5", "cross-encoder/ms-marco-MiniLM-L-12-v2"])
def test_the_packaged_models_are_rewritten_whole(name: str) -> None:
    model = onnx.load(str(Path(resolve_model_path(name).path) / "model.onnx"))
    assert dequantize_dynamic_matmuls(model) >= 72  # Q, K, V, output and two FFN products per layer
    ops = {node.op_type for node in model.graph.node}
    assert not ops & {"DynamicQuantizeLinear", "MatMulInteger"}
    onnx.checker.check_model(model)
