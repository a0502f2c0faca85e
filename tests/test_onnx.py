"""kokoro-onnx's .onnx files as a model source (kokoro_gpu/onnx_weights.py).

The real int8 file (marked ``real``) is checked against independent expectations:
onnxruntime running the file's own integer nodes (ConvInteger, MatMulInteger,
DynamicQuantizeLSTM) and a float LSTM node on the test's own dequantization, with
each weight scale read by its initializer's name; float32 and fp16 graphs are built
from it in the float export's node structure (Conv, MatMul / Gemm, LSTM, Gather),
and must load to the same weights. Foreign, broken and oversized files give one-line
errors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from real_weights import real_onnx_or_skip

from kokoro_gpu.config import ModelConfig
from kokoro_gpu.errors import CheckpointError
from kokoro_gpu.layout import folded_layout
from kokoro_gpu.onnx_weights import absent_from_onnx, dequantize, load_onnx_weights, onnx_weights
from kokoro_gpu.ops.lstm import lstm_bidirectional, pack_lstm

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

CONFIG = ModelConfig.load()
LAYOUT = folded_layout(CONFIG)


def one_line_error(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckpointError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def save(tmp_path: Path, nodes: list, initializers: list, name: str = "m.onnx") -> Path:  # type: ignore[type-arg]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializers))
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def conv(name: str, weight: np.ndarray, bias: np.ndarray | None = None) -> tuple[list, list]:  # type: ignore[type-arg]
    inits = [numpy_helper.from_array(weight, f"{name}.w")]
    inputs = ["x", f"{name}.w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, f"{name}.b"))
        inputs.append(f"{name}.b")
    return [helper.make_node("Conv", inputs, ["y"], name=f"{name}/Conv")], inits


# --- Files that are not (whole) Kokoro graphs --------------------------------------------------------------


def test_foreign_graph(tmp_path: Path) -> None:
    nodes, inits = conv("/encoder/classifier", np.ones((4, 1, 3), np.float32))
    msg = one_line_error(load_onnx_weights, save(tmp_path, nodes, inits), CONFIG)
    assert "is not a Kokoro ONNX graph" in msg and "and " in msg and "more" in msg


def test_partial_and_misshaped_graph(tmp_path: Path) -> None:
    good, good_inits = conv("/decoder/decoder/F0_conv", np.ones((1, 1, 3), np.float32),
                            np.zeros(1, np.float32))
    bad, bad_inits = conv("/decoder/decoder/N_conv", np.ones((1, 1, 5), np.float32))
    msg = one_line_error(load_onnx_weights, save(tmp_path, good + bad, good_inits + bad_inits), CONFIG)
    missing = len(LAYOUT) - len(absent_from_onnx(CONFIG)) - 3  # F0_conv weight + bias, N_conv weight
    assert f"does not match the Kokoro layout: {missing} missing (" in msg
    assert "mis-shaped (decoder.N_conv.weight (1, 1, 5) (expected (1, 1, 3)))" in msg


def test_garbage_and_truncated_files(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xfe not protobuf \x00\x01" * 100)
    one_line_error(load_onnx_weights, garbage, CONFIG)
    nodes, inits = conv("/decoder/decoder/F0_conv", np.ones((1, 1, 3), np.float32))
    whole = save(tmp_path, nodes, inits).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole[: len(whole) // 2])
    one_line_error(load_onnx_weights, cut, CONFIG)
    msg = one_line_error(load_onnx_weights, tmp_path / "absent.onnx", CONFIG)
    assert msg.startswith("ONNX model file not found")


def test_oversized_file_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.onnx"
    with open(big, "wb") as f:
        f.truncate(8 * sum(int(np.prod(s)) for s in LAYOUT.values()) + (65 << 20))  # sparse: no disk used
    assert "more than a Kokoro model in float32" in one_line_error(load_onnx_weights, big, CONFIG)


def test_external_data_is_refused(tmp_path: Path) -> None:
    nodes, inits = conv("/decoder/decoder/F0_conv", np.ones((1, 1, 3), np.float32))
    inits[0].data_location = TensorProto.EXTERNAL
    entry = inits[0].external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    inits[0].ClearField("raw_data")
    assert "external files" in one_line_error(load_onnx_weights, save(tmp_path, nodes, inits), CONFIG)


def test_dequantize_per_tensor_and_per_axis() -> None:
    q = np.array([[0, 128, 255], [10, 20, 30]], dtype=np.uint8)
    np.testing.assert_array_equal(dequantize(q, np.float32(0.5), np.uint8(128)),
                                  (q.astype(np.float32) - 128) * 0.5)
    scale, zero = np.array([1.0, 0.25], np.float32), np.array([0, 10], np.uint8)
    np.testing.assert_array_equal(dequantize(q, scale, zero, axis=0),
                                  [[0, 128, 255], [0, 2.5, 5]])


# --- The real int8 file ------------------------------------------------------------------------------------

pytestmark_real = pytest.mark.real


@pytest.fixture(scope="module")
def real_path() -> Path:
    return real_onnx_or_skip()


@pytest.fixture(scope="module")
def real_graph(real_path: Path):  # type: ignore[no-untyped-def]
    return onnx.load(str(real_path))


@pytest.fixture(scope="module")
def real(real_path: Path) -> dict[str, np.ndarray]:
    return load_onnx_weights(real_path, CONFIG)


def named(graph, name: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    return numpy_helper.to_array(next(t for t in graph.graph.initializer if t.name == name))


def initializers(graph, *names: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    return [t for t in graph.graph.initializer if t.name in names]


def integer_inputs(graph, node) -> list:  # type: ignore[no-untyped-def,type-arg]
    """An integer node's weight and weight zero point (as the file wires them), and a zero for the input."""
    return [*initializers(graph, node.input[1], node.input[3]), numpy_helper.from_array(np.uint8(0), "zero")]


def node_named(graph, name: str):  # type: ignore[no-untyped-def]
    return next(n for n in graph.graph.node if n.name == name)


def run_ort(nodes: list, inits: list, feeds: dict[str, np.ndarray],  # type: ignore[type-arg]
            out_type: int = TensorProto.INT32) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    types = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.float32): TensorProto.FLOAT}
    inputs = [helper.make_tensor_value_info(k, types[v.dtype], list(v.shape)) for k, v in feeds.items()]
    output = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph(nodes, "t", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def weight_scale(graph, node) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The quantizer names a weight's scale after the weight: ``<w>_quantized`` -> ``<w>_scale``."""
    return named(graph, node.input[1].removesuffix("_quantized") + "_scale")


@pytest.mark.real
def test_real_file_maps_every_tensor(real: dict[str, np.ndarray]) -> None:
    assert list(real) == list(LAYOUT)
    for name, arr in real.items():
        assert arr.shape == LAYOUT[name] and arr.dtype == np.float32 and arr.flags.c_contiguous, name
        assert np.isfinite(arr).all(), name
    absent = absent_from_onnx(CONFIG)
    assert absent == {"bert.pooler.weight", "bert.pooler.bias"}
    assert all(not real[n].any() for n in absent)
    assert all(real[n].any() for n in LAYOUT if n not in absent)


LINEARS = {
    "/encoder/bert_encoder/MatMul_quant": "bert_encoder",
    "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_7/MatMul_quant":
        "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query",
    "/encoder/predictor/duration_proj/linear_layer/MatMul_quant": "predictor.duration_proj.linear_layer",
    "/decoder/decoder/decode.2/norm1/fc/Gemm_MatMul_quant": "decoder.decode.2.norm1.fc",
}


@pytest.mark.real
@pytest.mark.parametrize("node_name", list(LINEARS))
def test_linears_match_onnxruntime(real_graph, real: dict[str, np.ndarray], node_name: str) -> None:  # type: ignore[no-untyped-def]
    node = node_named(real_graph, node_name)
    w = real[f"{LINEARS[node_name]}.weight"]
    a = np.random.default_rng(1).integers(0, 256, (5, w.shape[1]), dtype=np.uint8)
    integer = helper.make_node("MatMulInteger", ["a", node.input[1], "zero", node.input[3]], ["y"])
    product = run_ort([integer], integer_inputs(real_graph, node), {"a": a})
    expected = product.astype(np.float64) * weight_scale(real_graph, node)
    np.testing.assert_allclose(a.astype(np.float64) @ w.T.astype(np.float64), expected,
                               rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    bias = {"bert_encoder": "encoder.bert_encoder.bias"}.get(LINEARS[node_name])
    if bias is not None:
        np.testing.assert_array_equal(real["bert_encoder.bias"], named(real_graph, bias))


CONVS = {
    "/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant": "text_encoder.cnn.0.0",
    "/encoder/F0.1/conv1x1/Conv_quant": "predictor.F0.1.conv1x1",  # zero point shared with cnn.0
    "/encoder/F0.2/conv1/Conv_quant": "predictor.F0.2.conv1",  # 52 of 256 channels all zero
    "/decoder/decoder/generator/noise_convs.0/Conv_quant": "decoder.generator.noise_convs.0",
    "/decoder/decoder/generator/resblocks.2/convs2.2/Conv_quant": "decoder.generator.resblocks.2.convs2.2",
}


def conv1d(x: np.ndarray, w: np.ndarray, dilation: int) -> np.ndarray:
    """Valid (unpadded) conv of x [Cin, L] with w [Cout, Cin, K] in float64."""
    k = w.shape[2]
    span = (k - 1) * dilation + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, span, axis=1)[:, :, ::dilation]  # [Cin, T, K]
    return np.einsum("ctk,ock->ot", windows, w.astype(np.float64))


@pytest.mark.real
@pytest.mark.parametrize("node_name", list(CONVS))
def test_convs_match_onnxruntime(real_graph, real: dict[str, np.ndarray], node_name: str) -> None:  # type: ignore[no-untyped-def]
    node = node_named(real_graph, node_name)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    w = real[f"{CONVS[node_name]}.weight"]
    dilation = attrs["dilations"][0]
    x = np.random.default_rng(2).integers(0, 256, (1, w.shape[1], 40), dtype=np.uint8)
    integer = helper.make_node("ConvInteger", ["x", node.input[1], "zero", node.input[3]], ["y"],
                               dilations=[dilation], group=1, strides=[1], pads=[0, 0])
    product = run_ort([integer], integer_inputs(real_graph, node), {"x": x})[0]
    expected = product.astype(np.float64) * weight_scale(real_graph, node)
    np.testing.assert_allclose(conv1d(x[0].astype(np.float64), w, dilation), expected,
                               rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    if node_name.endswith("F0.2/conv1/Conv_quant"):
        assert int((~w.any(axis=(1, 2))).sum()) == 52
        np.testing.assert_array_equal(real["predictor.F0.2.conv1.bias"],
                                      named(real_graph, "encoder.predictor.F0.2.conv1.bias"))


@pytest.mark.real
def test_embedding_dequantized_by_its_named_scale(real_graph, real: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    stem = "encoder.bert.embeddings.word_embeddings.weight"
    q, scale, zero = (named(real_graph, f"{stem}{s}") for s in ("_quantized", "_scale", "_zero_point"))
    expected = (q.astype(np.float64) - zero.astype(np.float64)) * np.float64(scale)
    np.testing.assert_allclose(real["bert.embeddings.word_embeddings.weight"], expected, rtol=1e-7)


@pytest.mark.real
def test_lstm_gate_order_matches_onnxruntime(real_graph, real: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    node = node_named(real_graph, "/encoder/predictor/lstm/LSTM_quant")
    wq, rq = named(real_graph, node.input[1]), named(real_graph, node.input[2])
    ws, wz, rs, rz = (named(real_graph, node.input[i]) for i in (8, 9, 10, 11))
    bias = named(real_graph, node.input[3])
    t_len, n_in, hidden = 9, wq.shape[1], rq.shape[1]
    x = np.random.default_rng(3).standard_normal((t_len, 1, n_in)).astype(np.float32)
    ours = lstm_bidirectional(x[:, 0], *pack_lstm(real, "predictor.lstm"))

    def both_directions(y: np.ndarray) -> np.ndarray:  # [T, dir, 1, H] -> [T, 2H]
        return np.concatenate([y[:, 0, 0], y[:, 1, 0]], axis=1)

    # A standard float LSTM node (ONNX gate order i, o, f, c) on this test's own dequantization.
    def per_direction(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:  # [dir, in, 4H]
        return ((q.astype(np.float32) - zero.astype(np.float32)[:, None, None]) * scale[:, None, None])

    w_onnx = per_direction(wq, ws, wz).transpose(0, 2, 1)
    r_onnx = per_direction(rq, rs, rz).transpose(0, 2, 1)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w_onnx, "w"), (r_onnx, "r"), (bias, "b"))]
    float_lstm = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], direction="bidirectional",
                                  hidden_size=hidden)
    reference = both_directions(run_ort([float_lstm], inits, {"x": x}, TensorProto.FLOAT))
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5)

    # The file's own DynamicQuantizeLSTM (it quantizes x and h too: a looser match).
    ins = ["x", *node.input[1:4], "", "", "", "", *node.input[8:]]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    dq = helper.make_node("DynamicQuantizeLSTM", ins, ["y"], domain="com.microsoft", **attrs)
    inits = initializers(real_graph, *set(node.input[1:4]) | set(node.input[8:]))
    quantized = both_directions(run_ort([dq], inits, {"x": x}, TensorProto.FLOAT))
    assert np.linalg.norm(ours - quantized) / np.linalg.norm(quantized) < 0.05
    # Read in PyTorch's gate order without the reorder, the same weights are far off.
    w_ih, w_hh, b = pack_lstm(real, "predictor.lstm")
    to_onnx_order = [0, 3, 1, 2]  # i, f, g, o -> i, o, f, g

    def onnx_order(a: np.ndarray) -> np.ndarray:
        blocks = np.split(a, 4, axis=1)
        return np.concatenate([blocks[i] for i in to_onnx_order], axis=1)

    wrong = lstm_bidirectional(x[:, 0], onnx_order(w_ih), onnx_order(w_hh), onnx_order(b))
    assert np.linalg.norm(wrong - quantized) / np.linalg.norm(quantized) > 0.3


@pytest.mark.real
def test_non_finite_weight_is_named(real_graph) -> None:  # type: ignore[no-untyped-def]
    broken = onnx.ModelProto()
    broken.CopyFrom(real_graph)
    target = next(t for t in broken.graph.initializer if t.name == "decoder.decoder.generator.conv_post.bias")
    values = numpy_helper.to_array(target).copy()
    values[3] = np.nan
    target.CopyFrom(numpy_helper.from_array(values, target.name))
    msg = one_line_error(onnx_weights, broken, CONFIG, "broken.onnx")
    assert "decoder.generator.conv_post.bias has non-finite values" in msg


@pytest.mark.real
def test_truncated_real_file(real_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "kokoro-v1.0.int8.onnx"
    with open(real_path, "rb") as src:
        cut.write_bytes(src.read(os.path.getsize(real_path) // 3))
    one_line_error(load_onnx_weights, cut, CONFIG)


# --- float32 and fp16 graphs in the float export's node structure -------------------------------------------


def _float_graph(int8, dtype: type[np.floating]):  # type: ignore[no-untyped-def]
    """The int8 graph with each quantized weight op replaced by the float op the float export has.

    ConvInteger (+ quantized bias, Cast, scale Mul) -> Conv(x, w, b); MatMulInteger -> MatMul(x, w)
    or, for the ``fc/Gemm`` layers, Gemm(x, w.T, b, transB=1) in place of the bias Add;
    DynamicQuantizeLSTM -> LSTM (W [dir, 4H, in]); Gather + DequantizeLinear -> Gather. Weights are
    this test's own dequantization; with ``float16`` every float initializer is stored in fp16 and
    LSTM / Gather read theirs through a Cast, as converted fp16 models do around such ops.
    """
    graph = int8.graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}  # type: ignore[type-arg]
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def after(value: str):  # type: ignore[no-untyped-def]
        return consumers[value][0]

    def weight(node, zero_index: int) -> np.ndarray:  # type: ignore[no-untyped-def]
        q = init[node.input[1]].astype(np.float32)
        scale = init[node.input[1].removesuffix("_quantized") + "_scale"]
        zero = init[node.input[zero_index]].astype(np.float32)
        return ((q - zero.reshape(-1 if zero.ndim else ())) * scale.reshape(-1 if scale.ndim else ())
                if node.op_type == "MatMulInteger" else (q - zero) * scale)

    new_inits: dict[str, np.ndarray] = {}
    replaced: dict[str, list] = {}  # type: ignore[type-arg]  # old node name -> new nodes
    dropped: set[str] = set()
    for node in graph.node:
        name = node.name
        if node.op_type in ("ConvInteger", "MatMulInteger"):
            x = producer[node.input[0]].input[0]  # the DynamicQuantizeLinear's float input
            step, bias = after(node.output[0]), None
            if step.op_type == "Add":  # the quantized bias: Reshape(Cast(Floor(Div(bias, scale))))
                div = producer[next(i for i in step.input if i != node.output[0])]
                while div.op_type != "Div":
                    div = producer[div.input[0]]
                bias, step = div.input[0], after(step.output[0])
            mul = after(step.output[0])
            dropped.add(mul.name)  # the new node writes its output
            w = weight(node, 3)
            new_inits[f"{name}.w"] = w
            if node.op_type == "ConvInteger":
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                inputs = [x, f"{name}.w"] + ([bias] if bias else [])
                replaced[name] = [helper.make_node("Conv", inputs, [mul.output[0]],
                                                   name=name.replace("_quant", ""), **attrs)]
            elif "/fc/Gemm" in name:
                add = after(mul.output[0])
                b = next(i for i in add.input if i != mul.output[0])
                new_inits[f"{name}.w"] = np.ascontiguousarray(w.T)
                replaced[name] = [helper.make_node("Gemm", [x, f"{name}.w", b], [add.output[0]], transB=1,
                                                   name=name.replace("_MatMul_quant", ""))]
                dropped.add(add.name)
            else:
                replaced[name] = [helper.make_node("MatMul", [x, f"{name}.w"], [mul.output[0]],
                                                   name=name.replace("_quant", ""))]
        elif node.op_type == "DynamicQuantizeLSTM":
            per_dir = []
            for q_index, scale_index, zero_index in ((1, 8, 9), (2, 10, 11)):
                q = init[node.input[q_index]].astype(np.float32)
                scale, zero = init[node.input[scale_index]], init[node.input[zero_index]].astype(np.float32)
                per_dir.append(((q - zero[:, None, None]) * scale[:, None, None]).transpose(0, 2, 1))
            new_inits[f"{name}.W"], new_inits[f"{name}.R"] = per_dir
            inputs = [node.input[0], f"{name}.W", f"{name}.R", node.input[3], *node.input[4:7]]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            replaced[name] = [helper.make_node("LSTM", inputs, list(node.output),
                                               name=name.replace("_quant", ""), **attrs)]
        elif node.op_type == "Gather" and node.input[0].endswith("_quantized"):
            dq = after(node.output[0])
            scale, zero = init[dq.input[1]], init[dq.input[2]].astype(np.float32)
            new_inits[f"{name}.table"] = (init[node.input[0]].astype(np.float32) - zero) * scale
            replaced[name] = [helper.make_node("Gather", [f"{name}.table", node.input[1]], [dq.output[0]],
                                               name=name.replace("_quant", ""))]
            dropped.add(dq.name)

    nodes = []
    for node in graph.node:
        if node.name in dropped:
            continue
        nodes.extend(replaced.get(node.name, [node]))
    # Keep what the output still needs (the quantization nodes fall away).
    producer = {o: n for n in nodes for o in n.output}
    needed, stack, keep = set(), [o.name for o in graph.output], set()
    while stack:
        value = stack.pop()
        if value in needed:
            continue
        needed.add(value)
        if value in producer:
            keep.add(id(producer[value]))
            stack.extend(i for i in producer[value].input if i)
    nodes = [n for n in nodes if id(n) in keep]
    arrays = {**{k: v for k, v in init.items() if k in needed}, **{k: v for k, v in new_inits.items()}}
    if dtype == np.float16:
        casts = []
        for node in nodes:
            if node.op_type not in ("LSTM", "Gather"):
                continue
            for i, value in enumerate(node.input):
                if value in arrays and arrays[value].dtype == np.float32:
                    casts.append(helper.make_node("Cast", [value], [f"{value}.f32"], to=TensorProto.FLOAT))
                    node.input[i] = f"{value}.f32"
        nodes = casts + nodes
        arrays = {k: v.astype(np.float16) if v.dtype == np.float32 and v.ndim else v
                  for k, v in arrays.items()}
    tensors = [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in arrays.items()]
    out = helper.make_graph(nodes, "kokoro", list(graph.input), list(graph.output), tensors)
    assert not any(n.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "DequantizeLinear")
                   for n in nodes)
    return helper.make_model(out, opset_imports=list(int8.opset_import))


@pytest.mark.real
def test_float32_and_fp16_graphs_give_the_same_weights(real_graph, real: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    float32 = onnx_weights(_float_graph(real_graph, np.float32), CONFIG, "kokoro-v1.0.onnx")
    assert list(float32) == list(real)
    for name, arr in real.items():
        np.testing.assert_array_equal(float32[name], arr, err_msg=name)
    del float32
    fp16 = onnx_weights(_float_graph(real_graph, np.float16), CONFIG, "kokoro-v1.0.fp16.onnx")
    for name, arr in real.items():
        np.testing.assert_array_equal(fp16[name], arr.astype(np.float16).astype(np.float32), err_msg=name)


# --- Using the real model ----------------------------------------------------------------------------------


@pytest.mark.real
def test_speaks_english_with_jf_alpha_on_the_cpu(real_path: Path) -> None:
    """Real weights give natural durations: 2 - 3 frames per phoneme (random weights: about 3.2 - 4)."""
    from kokoro_gpu.api import KokoroTTS

    tts = KokoroTTS.from_pretrained("kokoro-onnx-int8", device="cpu")
    assert tts.list_voices() == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    with pytest.warns(UserWarning, match="accent"):
        result = tts.synthesize("The quick brown fox jumps over the lazy dog.", voice="jf_alpha", lang="a",
                                seed=0)
    inner = result.durations[1:-1]  # without the boundary tokens
    assert 2.0 <= float(np.median(inner)) <= 3.0, inner
    assert inner[-3:].max() >= 10, inner  # the end of the sentence is drawn out
    assert np.isfinite(result.audio).all() and 0.05 < np.abs(result.audio).max() <= 1.0
    assert 2.5 < result.seconds < 5.0


@pytest.mark.real
def test_kokoro_convert_real_model(real_path: Path, real: dict[str, np.ndarray], tmp_path: Path,
                                   capsys: pytest.CaptureFixture) -> None:
    from kokoro_gpu.checkpoint import load_checkpoint
    from kokoro_gpu.convert import main
    from kokoro_gpu.voices import VoiceStore

    out, voices_out = tmp_path / "kokoro.safetensors", tmp_path / "voices"
    archive = real_path.parent / "voices" / "voices-v1.0.bin"
    assert main([str(real_path), str(out), "--voices", str(archive), "--voices-out", str(voices_out)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 6
    converted = load_checkpoint(out, CONFIG)
    for name, arr in real.items():
        np.testing.assert_allclose(converted[name], arr, rtol=3e-7, atol=0, err_msg=name)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporaries
    np.testing.assert_array_equal(VoiceStore(voices_out, None).load("jm_kumo"),
                                  VoiceStore(archive.parent, None).load("jm_kumo"))
