"""The checkpoint layout: every tensor the model needs, by name and shape.

Derived from the config, so it holds for the real v1.0 model (548 tensors,
checked against the official manifest in the tests) and for reduced test
configs alike.

Two views of the same layout:
- the *official* one, as stored in ``kokoro-v1_0.pth``: five top-level state
  dicts, keys prefixed with ``module.``, weight-normalised layers as
  ``weight_g`` / ``weight_v``;
- the *folded* one the backends consume: flat ``top.key`` names without the
  ``module.`` prefix, weight norm folded into a plain ``weight``.
"""

from __future__ import annotations

from .config import DECODER_OUT_CHANNELS, ModelConfig

Shape = tuple[int, ...]

TOP_LEVEL = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


class _Layout:
    """Collects (folded name -> shape) and which names are weight-normalised."""

    def __init__(self) -> None:
        self.shapes: dict[str, Shape] = {}
        self.weight_norm: set[str] = set()

    def add(self, name: str, *shape: int) -> None:
        self.shapes[name] = tuple(shape)

    def linear(self, name: str, n_in: int, n_out: int, bias: bool = True) -> None:
        self.add(f"{name}.weight", n_out, n_in)
        if bias:
            self.add(f"{name}.bias", n_out)

    def conv(
        self,
        name: str,
        c_in: int,
        c_out: int,
        k: int,
        *,
        groups: int = 1,
        bias: bool = True,
        wn: bool = True,
        transposed: bool = False,
    ) -> None:
        shape = (c_in, c_out // groups, k) if transposed else (c_out, c_in // groups, k)
        self.add(f"{name}.weight", *shape)
        if wn:
            self.weight_norm.add(f"{name}.weight")
        if bias:
            self.add(f"{name}.bias", c_out)

    def layer_norm(self, name: str, dim: int, weight: str = "weight", bias: str = "bias") -> None:
        self.add(f"{name}.{weight}", dim)
        self.add(f"{name}.{bias}", dim)

    def lstm(self, name: str, n_in: int, hidden: int) -> None:
        for suffix in ("", "_reverse"):
            self.add(f"{name}.weight_ih_l0{suffix}", 4 * hidden, n_in)
            self.add(f"{name}.weight_hh_l0{suffix}", 4 * hidden, hidden)
            self.add(f"{name}.bias_ih_l0{suffix}", 4 * hidden)
            self.add(f"{name}.bias_hh_l0{suffix}", 4 * hidden)

    def adain_res_blk(self, name: str, c_in: int, c_out: int, style: int, upsample: bool) -> None:
        self.conv(f"{name}.conv1", c_in, c_out, 3)
        self.conv(f"{name}.conv2", c_out, c_out, 3)
        self.linear(f"{name}.norm1.fc", style, 2 * c_in)
        self.linear(f"{name}.norm2.fc", style, 2 * c_out)
        if c_in != c_out:
            self.conv(f"{name}.conv1x1", c_in, c_out, 1, bias=False)
        if upsample:
            self.conv(f"{name}.pool", c_in, c_in, 3, groups=c_in, transposed=True)

    def adain_res_block1(self, name: str, channels: int, k: int, style: int) -> None:
        for j in range(3):
            self.conv(f"{name}.convs1.{j}", channels, channels, k)
            self.conv(f"{name}.convs2.{j}", channels, channels, k)
            self.linear(f"{name}.adain1.{j}.fc", style, 2 * channels)
            self.linear(f"{name}.adain2.{j}.fc", style, 2 * channels)
            self.add(f"{name}.alpha1.{j}", 1, channels, 1)
            self.add(f"{name}.alpha2.{j}", 1, channels, 1)


def _build(cfg: ModelConfig) -> _Layout:
    L = _Layout()
    pb = cfg.plbert
    emb, hid, inter = 128, int(pb["hidden_size"]), int(pb["intermediate_size"])
    style, d_hid = cfg.style_dim, cfg.hidden_dim

    # ALBERT (transformers.AlbertModel); embedding size 128 is ALBERT's default.
    b = "bert"
    L.add(f"{b}.embeddings.word_embeddings.weight", cfg.n_token, emb)
    L.add(f"{b}.embeddings.position_embeddings.weight", int(pb["max_position_embeddings"]), emb)
    L.add(f"{b}.embeddings.token_type_embeddings.weight", 2, emb)
    L.layer_norm(f"{b}.embeddings.LayerNorm", emb)
    L.linear(f"{b}.encoder.embedding_hidden_mapping_in", emb, hid)
    layer = f"{b}.encoder.albert_layer_groups.0.albert_layers.0"
    for proj in ("query", "key", "value", "dense"):
        L.linear(f"{layer}.attention.{proj}", hid, hid)
    L.layer_norm(f"{layer}.attention.LayerNorm", hid)
    L.linear(f"{layer}.ffn", hid, inter)
    L.linear(f"{layer}.ffn_output", inter, hid)
    L.layer_norm(f"{layer}.full_layer_layer_norm", hid)
    L.linear(f"{b}.pooler", hid, hid)

    L.linear("bert_encoder", hid, d_hid)

    # Prosody predictor.
    p = "predictor"
    for i in range(cfg.n_layer):
        L.lstm(f"{p}.text_encoder.lstms.{2 * i}", d_hid + style, d_hid // 2)
        L.linear(f"{p}.text_encoder.lstms.{2 * i + 1}.fc", style, 2 * d_hid)
    L.lstm(f"{p}.lstm", d_hid + style, d_hid // 2)
    L.linear(f"{p}.duration_proj.linear_layer", d_hid, cfg.max_dur)
    L.lstm(f"{p}.shared", d_hid + style, d_hid // 2)
    for stack in ("F0", "N"):
        L.adain_res_blk(f"{p}.{stack}.0", d_hid, d_hid, style, upsample=False)
        L.adain_res_blk(f"{p}.{stack}.1", d_hid, d_hid // 2, style, upsample=True)
        L.adain_res_blk(f"{p}.{stack}.2", d_hid // 2, d_hid // 2, style, upsample=False)
        L.conv(f"{p}.{stack}_proj", d_hid // 2, 1, 1, wn=False)

    # Text encoder.
    t = "text_encoder"
    L.add(f"{t}.embedding.weight", cfg.n_token, d_hid)
    for i in range(cfg.n_layer):
        L.conv(f"{t}.cnn.{i}.0", d_hid, d_hid, cfg.text_encoder_kernel_size)
        L.layer_norm(f"{t}.cnn.{i}.1", d_hid, weight="gamma", bias="beta")
    L.lstm(f"{t}.lstm", d_hid, d_hid // 2)

    # Decoder and its iSTFTNet generator.
    d = "decoder"
    ist = cfg.istftnet
    asr_res = 64
    L.adain_res_blk(f"{d}.encode", d_hid + 2, 1024, style, upsample=False)
    for i in range(4):
        last = i == 3
        width = DECODER_OUT_CHANNELS if last else 1024
        L.adain_res_blk(f"{d}.decode.{i}", 1024 + 2 + asr_res, width, style, upsample=last)
    L.conv(f"{d}.F0_conv", 1, 1, 3)
    L.conv(f"{d}.N_conv", 1, 1, 3)
    L.conv(f"{d}.asr_res.0", d_hid, asr_res, 1)
    g = f"{d}.generator"
    n_fft = int(ist["gen_istft_n_fft"])
    L.linear(f"{g}.m_source.l_linear", 9, 1)
    ch0 = int(ist["upsample_initial_channel"])
    rates, kernels = ist["upsample_rates"], ist["upsample_kernel_sizes"]
    res_kernels = ist["resblock_kernel_sizes"]
    ch = ch0
    for i, k in enumerate(kernels):
        ch = ch0 // 2 ** (i + 1)
        L.conv(f"{g}.ups.{i}", ch0 // 2**i, ch, int(k), transposed=True)
        for j, rk in enumerate(res_kernels):
            L.adain_res_block1(f"{g}.resblocks.{i * len(res_kernels) + j}", ch, int(rk), style)
        if i + 1 < len(rates):
            stride_f0 = 1
            for r in rates[i + 1 :]:
                stride_f0 *= int(r)
            L.conv(f"{g}.noise_convs.{i}", n_fft + 2, ch, 2 * stride_f0, wn=False)
            L.adain_res_block1(f"{g}.noise_res.{i}", ch, 7, style)
        else:
            L.conv(f"{g}.noise_convs.{i}", n_fft + 2, ch, 1, wn=False)
            L.adain_res_block1(f"{g}.noise_res.{i}", ch, 11, style)
    L.conv(f"{g}.conv_post", ch, n_fft + 2, 7)
    return L


def folded_layout(cfg: ModelConfig) -> dict[str, Shape]:
    """Folded name -> shape: what a loaded checkpoint holds, weight norm folded."""
    return dict(_build(cfg).shapes)


def weight_norm_names(cfg: ModelConfig) -> frozenset[str]:
    """Folded names of the weights stored as weight norm (g, v) pairs."""
    return frozenset(_build(cfg).weight_norm)


def split_folded_name(name: str) -> tuple[str, str]:
    """``'decoder.encode.conv1.weight'`` -> ``('decoder', 'encode.conv1.weight')``.

    ``bert_encoder`` is a single Linear, so its keys are ``bert_encoder.weight``.
    """
    top, _, rest = name.partition(".")
    return top, rest


def official_layout(cfg: ModelConfig) -> dict[str, Shape]:
    """Official ``top.module.key`` name -> shape, with weight norm as g/v pairs."""
    L = _build(cfg)
    out: dict[str, Shape] = {}
    for name, shape in L.shapes.items():
        top, rest = split_folded_name(name)
        if name in L.weight_norm:
            stem = rest[: -len(".weight")]
            out[f"{top}.module.{stem}.weight_g"] = (shape[0],) + (1,) * (len(shape) - 1)
            out[f"{top}.module.{stem}.weight_v"] = shape
        else:
            out[f"{top}.module.{rest}"] = shape
    return out
