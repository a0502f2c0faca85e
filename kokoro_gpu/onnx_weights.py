"""kokoro-onnx model files (``kokoro-v1.0.onnx``, ``.fp16.onnx``, ``.int8.onnx``) -> folded float32 weights.

The file is parsed with the ``onnx`` package (protobuf only: nothing in it is
executed) and the weights are found by following the graph's edges from the
nodes that consume them back to the initializers:

- Conv / ConvTranspose / Gemm / MatMul / LSTM / Gather / LayerNormalization
  with float32 or float16 weights, possibly behind Cast, Transpose, Identity or
  DequantizeLinear (QDQ);
- onnxruntime's dynamic quantization (the int8 file): ConvInteger (uint8, one
  scale and zero point per tensor, zero-point initializers shared between
  tensors), MatMulInteger (int8 ``[in, out]``, one scale per column reaching
  the graph through a ``<node>_scales_mul`` Mul with the input's dynamic
  scale), DynamicQuantizeLSTM (int8 ``[dir, in, 4H]``, one scale per
  direction), Gather + DequantizeLinear for the embeddings.

The module a node belongs to comes from its name (``/encoder/F0.0/conv1/Conv_quant``
is ``predictor.F0.0.conv1``); the scales, zero points and biases only from the
edges. The result is the folded layout of :mod:`kokoro_gpu.layout` (the ONNX
holds weight norm already folded), checked by name, shape and finiteness.
The ALBERT pooler is not in the graph (inference does not use it): it is
filled with zeros, which no backend reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import checkpoint_byte_limit, name_listing, value_problem
from .config import ModelConfig
from .errors import CheckpointError
from .layout import TOP_LEVEL, folded_layout

ONNX_SUFFIX = ".onnx"
PIP_ONNX = 'pip install "kokoro-gpu[onnx]"'
# ONNX LSTM gate blocks i, o, f, c -> PyTorch's i, f, g (= c), o.
_GATES_TO_TORCH = (0, 2, 3, 1)
Array = np.ndarray
_CALL_SUFFIX = re.compile(r"_\d+$")
# Nodes that only move or re-type a tensor on its way from an initializer to its consumer.
_PASS_THROUGH = frozenset({"Identity", "Cast", "Transpose"})


def absent_from_onnx(config: ModelConfig) -> frozenset[str]:
    """Folded names a kokoro-onnx export does not hold: the ALBERT pooler, unused by inference."""
    return frozenset(name for name in folded_layout(config) if name.startswith("bert.pooler."))


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise CheckpointError(f"reading .onnx model files needs the onnx package; run: {PIP_ONNX}") from None
    return onnx


def read_onnx_model(path: str | Path, config: ModelConfig) -> Any:
    """Parse an ``.onnx`` file (no external data, size bounded by the layout) into an ``onnx.ModelProto``."""
    onnx = _import_onnx()
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"ONNX model file not found: {p}")
    # Float32 weights and the graph's own constants fit; more is not a Kokoro export.
    limit = checkpoint_byte_limit(config)
    size = p.stat().st_size
    if size > limit:
        raise CheckpointError(f"{p}: {size} bytes is more than a Kokoro model in float32 ({limit} bytes at "
                              "most); pass kokoro-onnx's kokoro-v1.0(.fp16|.int8).onnx")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError and friends: any parse failure is a bad file
        raise CheckpointError(f"{p}: not a readable ONNX file ({type(e).__name__}); "
                              "re-download it or pass kokoro-onnx's model file") from None
    external = [t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise CheckpointError(f"{p}: initializers stored in external files ({name_listing(external)}); "
                              "kokoro-onnx's model files are self-contained, pass one of those")
    return model


class _Graph:
    """An ONNX graph's initializers and edges, and how weights travel along them."""

    def __init__(self, model: Any, source: str, max_elements: int) -> None:
        from onnx import numpy_helper

        self._to_array = numpy_helper.to_array
        self.source = source
        self.max_elements = max_elements
        graph = model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.nodes = list(graph.node)
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {}
        for node in self.nodes:
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray:
        """An initializer as a NumPy array, refusing one larger than any tensor of the layout."""
        arr = self._arrays.get(name)
        if arr is None:
            tensor = self.initializers[name]
            count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
            if count > self.max_elements:
                raise CheckpointError(f"{self.source}: initializer {name!r} has {count} elements, more than "
                                      "any Kokoro tensor; pass kokoro-onnx's model file")
            try:
                arr = np.asarray(self._to_array(tensor))
            except Exception as e:  # a raw_data length that does not match dims, an unknown type
                raise CheckpointError(f"{self.source}: initializer {name!r} is corrupt ({e}); "
                                      "re-download the model file") from None
            self._arrays[name] = arr
        return arr

    def trace(self, value: str) -> np.ndarray | None:
        """The constant behind ``value`` (an initializer, maybe cast, transposed, dequantized) or None."""
        if value in self.initializers:
            return self.array(value)
        node = self.producer.get(value)
        if node is None:
            return None
        if node.op_type in _PASS_THROUGH:
            arr = self.trace(node.input[0])
            if arr is None or node.op_type != "Transpose":
                return arr
            perm = _attr(node, "perm")
            return np.transpose(arr, perm if perm else None)
        if node.op_type == "DequantizeLinear":
            return self._dequantize_linear(node)
        return None

    def _dequantize_linear(self, node: Any) -> np.ndarray | None:
        q = self.trace(node.input[0])
        scale = self.trace(node.input[1])
        if q is None or scale is None:
            return None
        zero = self.trace(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        return dequantize(q, scale, zero, axis=_attr(node, "axis", 1))

    def only_consumer(self, value: str) -> Any | None:
        nodes = self.consumers.get(value, [])
        return nodes[0] if len(nodes) == 1 else None

    def constant_input(self, node: Any, index: int) -> np.ndarray | None:
        if len(node.input) <= index or not node.input[index]:
            return None
        return self.trace(node.input[index])


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int = 0) -> np.ndarray:
    """``(q - zero) * scale`` in float32; a 1-element scale is per tensor, else per index along ``axis``."""
    values = q.astype(np.float32)
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    if zero is not None:
        values = values - zero.astype(np.float32).reshape(shape if zero.size > 1 else ())
    return values * scale.astype(np.float32).reshape(shape if scale.size > 1 else ())


def _modules(layout: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for name in layout:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(out)


def _from_initializer_name(name: str) -> str:
    """kokoro-onnx's initializer names wrap the model: ``encoder.bert.x`` -> ``bert.x``.

    (``decoder.decoder.x`` -> ``decoder.x``; a ``_quantized`` suffix is dropped.)
    """
    name = name.removesuffix("_quantized")
    head, _, rest = name.partition(".")
    if head in ("encoder", "decoder") and rest.partition(".")[0] in TOP_LEVEL:
        return rest
    return name


class _Collector:
    """Folded name -> float32 array, with the conflicts and the nodes it could not read."""

    def __init__(self, graph: _Graph, layout: dict[str, tuple[int, ...]]) -> None:
        self.graph = graph
        self.layout = layout
        self.modules = _modules(layout)
        self.found: dict[str, np.ndarray] = {}
        self.conflicts: list[str] = []
        self.unreadable: list[str] = []

    def module_of(self, node: Any) -> str | None:
        """``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` -> ``text_encoder.cnn.0.0``, or None."""
        if not node.name.startswith("/"):
            return None
        parts = [_CALL_SUFFIX.sub("", p) for p in node.name.split("/")[1:-1]]
        # The exporter repeats a parent in its child's name: cnn.0/cnn.0.0, asr_res/asr_res.0.
        children = [*parts[1:], ""] if parts else []
        path = [p for p, child in zip(parts, children, strict=True) if not child.startswith(p + ".")]
        for candidate in (path[1:], ["predictor", *path[1:]], path):
            name = ".".join(candidate)
            if name in self.modules:
                return name
        return None

    def put(self, name: str, arr: np.ndarray | None) -> None:
        if arr is None or name not in self.layout:
            return
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if name in self.found:
            if not np.array_equal(self.found[name], arr, equal_nan=True):
                self.conflicts.append(name)
            return
        self.found[name] = arr

    def put_linear_bias(self, module: str, value: str) -> None:
        """The bias added to a linear layer's output ``value``: an Add, or FastGelu's bias input."""
        node = self.graph.only_consumer(value)
        if node is None or node.op_type not in ("Add", "FastGelu", "BiasGelu"):
            return
        others = [i for i in node.input if i != value]
        if node.op_type != "Add":
            others = others[:1]
        for other in others:
            bias = self.graph.trace(other)
            if bias is not None and bias.ndim == 1:
                self.put(f"{module}.bias", bias)
                return


def _integer_output_scale(graph: _Graph, node: Any) -> tuple[Array | None, str | None, Array | None]:
    """For a ConvInteger / MatMulInteger: (weight scale, scaled output, float bias) from its outputs.

    Follows out -> [Add (quantized bias)] -> Cast -> Mul(scales_mul), where scales_mul multiplies the
    input's DynamicQuantizeLinear scale by the weight's scale initializer.
    """
    value = node.output[0]
    bias = None
    for _ in range(4):
        nxt = graph.only_consumer(value)
        if nxt is None:
            return None, None, bias
        if nxt.op_type == "Add":
            other = next(i for i in nxt.input if i != value)
            bias = _quantized_bias(graph, other)
        elif nxt.op_type == "Mul":
            other = next(i for i in nxt.input if i != value)
            return _weight_scale(graph, node, other), nxt.output[0], bias
        elif nxt.op_type != "Cast":
            return None, None, bias
        value = nxt.output[0]
    return None, None, bias


def _weight_scale(graph: _Graph, node: Any, scale_value: str) -> np.ndarray | None:
    """The weight's own scale in ``x_scale * w_scale``, checking x_scale is the node's input's scale."""
    direct = graph.trace(scale_value)
    if direct is not None:
        return direct
    mul = graph.producer.get(scale_value)
    quantize_input = graph.producer.get(node.input[0])
    if mul is None or mul.op_type != "Mul" or quantize_input is None:
        return None
    dynamic_scale = quantize_input.output[1] if len(quantize_input.output) > 1 else None
    if dynamic_scale not in mul.input:
        return None
    other = next(i for i in mul.input if i != dynamic_scale)
    return graph.trace(other)


def _quantized_bias(graph: _Graph, value: str) -> np.ndarray | None:
    """The float bias behind Reshape(Cast(Floor(Div(bias, scale)))), the quantizer's bias path."""
    node = graph.producer.get(value)
    for _ in range(5):
        if node is None:
            return None
        if node.op_type == "Div":
            return graph.trace(node.input[0])
        if node.op_type not in ("Reshape", "Cast", "Floor", "Round"):
            return None
        node = graph.producer.get(node.input[0])
    return None


def _read_conv(c: _Collector, node: Any, module: str) -> None:
    g = c.graph
    if node.op_type == "ConvInteger":
        q, zero = g.constant_input(node, 1), g.constant_input(node, 3)
        scale, _, bias = _integer_output_scale(g, node)
        if q is None or scale is None:
            c.unreadable.append(node.name)
            return
        c.put(f"{module}.weight", dequantize(q, scale, zero, axis=0))
        c.put(f"{module}.bias", bias)
    else:
        c.put(f"{module}.weight", g.constant_input(node, 1))
        c.put(f"{module}.bias", g.constant_input(node, 2))


def _read_linear(c: _Collector, node: Any, module: str) -> None:
    g = c.graph
    if node.op_type == "MatMulInteger":
        q, zero = g.constant_input(node, 1), g.constant_input(node, 3)
        scale, out, _ = _integer_output_scale(g, node)
        if q is None or scale is None or out is None:
            c.unreadable.append(node.name)
            return
        c.put(f"{module}.weight", dequantize(q, scale, zero, axis=1).T)
        c.put_linear_bias(module, out)
    elif node.op_type == "MatMul":
        w = g.constant_input(node, 1)
        if w is None or w.ndim != 2:
            return  # an activation product (attention, alignment), not a layer
        c.put(f"{module}.weight", w.T)
        c.put_linear_bias(module, node.output[0])
    else:  # Gemm
        w = g.constant_input(node, 1)
        if w is None:
            return
        c.put(f"{module}.weight", w if _attr(node, "transB", 0) else w.T)
        c.put(f"{module}.bias", g.constant_input(node, 2))


def _torch_gates(w: np.ndarray) -> np.ndarray:
    blocks = np.split(w, 4, axis=0)
    return np.concatenate([blocks[i] for i in _GATES_TO_TORCH], axis=0)


def _read_lstm(c: _Collector, node: Any, module: str) -> None:
    g = c.graph
    w, r, b = (g.constant_input(node, i) for i in (1, 2, 3))
    if w is None or r is None:
        c.unreadable.append(node.name)
        return
    if node.op_type == "DynamicQuantizeLSTM":
        scales = [g.constant_input(node, i) for i in (8, 9, 10, 11)]
        if any(s is None for s in scales):
            c.unreadable.append(node.name)
            return
        w_scale, w_zero, r_scale, r_zero = scales
        # [dir, in, 4H] with one scale per direction -> ONNX LSTM's [dir, 4H, in].
        w = dequantize(w, w_scale, w_zero, axis=0).transpose(0, 2, 1)
        r = dequantize(r, r_scale, r_zero, axis=0).transpose(0, 2, 1)
    hidden = r.shape[-1]
    suffixes = ["", "_reverse"] if w.shape[0] == 2 else [""]
    for d, suffix in enumerate(suffixes):
        c.put(f"{module}.weight_ih_l0{suffix}", _torch_gates(w[d]))
        c.put(f"{module}.weight_hh_l0{suffix}", _torch_gates(r[d]))
        if b is not None:
            c.put(f"{module}.bias_ih_l0{suffix}", _torch_gates(b[d, : 4 * hidden]))
            c.put(f"{module}.bias_hh_l0{suffix}", _torch_gates(b[d, 4 * hidden :]))


def _read_embedding(c: _Collector, node: Any, module: str) -> None:
    g = c.graph
    table = g.constant_input(node, 0)
    if table is None or table.ndim != 2:
        return
    if table.dtype.kind in "iu":
        dq = g.only_consumer(node.output[0])
        if dq is None or dq.op_type != "DequantizeLinear":
            c.unreadable.append(node.name)
            return
        scale, zero = g.constant_input(dq, 1), g.constant_input(dq, 2)
        if scale is None or scale.size != 1:
            c.unreadable.append(node.name)
            return
        table = dequantize(table, scale, zero)
    c.put(f"{module}.weight", table)


def _read_layer_norm(c: _Collector, node: Any, module: str | None) -> None:
    g = c.graph
    first = 2 if node.op_type == "SkipLayerNormalization" else 1
    if module is None:
        # Fused nodes lose the module path in their name; their parameters keep it.
        param = node.input[first] if len(node.input) > first else ""
        module = _from_initializer_name(param).rpartition(".")[0] if param in g.initializers else None
        if module is None:
            return
    weight, bias = ("gamma", "beta") if f"{module}.gamma" in c.layout else ("weight", "bias")
    c.put(f"{module}.{weight}", g.constant_input(node, first))
    c.put(f"{module}.{bias}", g.constant_input(node, first + 1))


_READERS = {
    "Conv": _read_conv, "ConvInteger": _read_conv, "ConvTranspose": _read_conv,
    "MatMul": _read_linear, "MatMulInteger": _read_linear, "Gemm": _read_linear,
    "LSTM": _read_lstm, "DynamicQuantizeLSTM": _read_lstm,
    "Gather": _read_embedding,
}


def _collect(graph: _Graph, layout: dict[str, tuple[int, ...]]) -> _Collector:
    c = _Collector(graph, layout)
    for node in graph.nodes:
        if node.op_type in ("LayerNormalization", "SkipLayerNormalization"):
            _read_layer_norm(c, node, c.module_of(node))
            continue
        reader = _READERS.get(node.op_type)
        module = c.module_of(node) if reader is not None else None
        if reader is not None and module is not None:
            reader(c, node, module)
    # What no weight-consuming node reached (Snake alphas, used by Mul/Div): initializers that feed a
    # node and carry their module path in their name.
    for name in graph.initializers:
        target = _from_initializer_name(name)
        if target in layout and target not in c.found and name in graph.consumers:
            c.put(target, graph.array(name))
    return c


def onnx_weights(model: Any, config: ModelConfig, source: str = "ONNX model") -> dict[str, np.ndarray]:
    """A parsed kokoro-onnx ``ModelProto`` -> folded float32 weights, validated against the layout."""
    layout = folded_layout(config)
    absent = absent_from_onnx(config)
    graph = _Graph(model, source, max_elements=4 * max(int(np.prod(s)) for s in layout.values()))
    c = _collect(graph, layout)
    missing = [n for n in layout if n not in c.found and n not in absent]
    if len(missing) == len(layout) - len(absent):
        raise CheckpointError(f"{source} is not a Kokoro ONNX graph (none of the {len(layout)} tensors, e.g. "
                              f"{name_listing(missing)}); pass kokoro-onnx's kokoro-v1.0(.fp16|.int8).onnx")
    misshaped = [f"{n} {tuple(a.shape)} (expected {layout[n]})" for n, a in c.found.items()
                 if a.shape != layout[n]]
    problems = [f"{len(items)} {what} ({name_listing(items)})" for what, items in
                (("missing", missing), ("mis-shaped", misshaped),
                 ("with conflicting values", c.conflicts), ("unreadable nodes", c.unreadable)) if items]
    if problems:
        raise CheckpointError(f"{source} does not match the Kokoro layout: {'; '.join(problems)}; "
                              "pass kokoro-onnx's kokoro-v1.0(.fp16|.int8).onnx with a matching config.json")
    # The same bound on values as the other checkpoint formats: non-finite or absurd means corrupt.
    bad = [f"{n} has {problem}" for n, a in c.found.items() if (problem := value_problem(a)) is not None]
    if bad:
        raise CheckpointError(f"{source}: {name_listing(bad)}; the model file is corrupt, re-download it")
    return {name: c.found[name] if name in c.found else np.zeros(shape, dtype=np.float32)
            for name, shape in layout.items()}


def load_onnx_weights(path: str | Path, config: ModelConfig) -> dict[str, np.ndarray]:
    """Read a kokoro-onnx ``.onnx`` file (float32, fp16 or int8) into folded float32 weights."""
    return onnx_weights(read_onnx_model(path, config), config, source=str(path))
