"""ALBERT encoder (transformers.AlbertModel's last hidden state, inference only)."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from ..ops import attention, gelu_new, layer_norm
from ..ops.linear import PreparedLinear
from .blocks import FloatType, Params, Weights


class Albert:
    """Embeddings, projection to the hidden size, then one shared transformer layer applied N times."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: FloatType) -> None:
        pb = config.plbert
        self.heads = int(pb["num_attention_heads"])
        self.n_layers = int(pb["num_hidden_layers"])
        # AlbertConfig's default; Kokoro's config does not override it.
        self.eps = float(pb.get("layer_norm_eps", 1e-12))
        p = Params(weights, dtype, "bert")
        e = p.sub("embeddings")
        self.word = e("word_embeddings.weight")
        self.pos = e("position_embeddings.weight")
        self.type0 = e("token_type_embeddings.weight")[0]
        self.emb_ln = (e("LayerNorm.weight"), e("LayerNorm.bias"))
        self.map_in = PreparedLinear(p("encoder.embedding_hidden_mapping_in.weight"),
                                     p("encoder.embedding_hidden_mapping_in.bias"))
        lay = p.sub("encoder.albert_layer_groups.0.albert_layers.0")
        # Query, key and value as one GEMM.
        self.qkv = PreparedLinear(
            np.concatenate([lay(f"attention.{n}.weight") for n in ("query", "key", "value")]),
            np.concatenate([lay(f"attention.{n}.bias") for n in ("query", "key", "value")]))
        self.dense = PreparedLinear(lay("attention.dense.weight"), lay("attention.dense.bias"))
        self.attn_ln = (lay("attention.LayerNorm.weight"), lay("attention.LayerNorm.bias"))
        self.ffn = PreparedLinear(lay("ffn.weight"), lay("ffn.bias"))
        self.ffn_out = PreparedLinear(lay("ffn_output.weight"), lay("ffn_output.bias"))
        self.ffn_ln = (lay("full_layer_layer_norm.weight"), lay("full_layer_layer_norm.bias"))

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        """Token ids [T] (no padding: every position attends to all) -> hidden states [T, hidden]."""
        t_len = input_ids.shape[0]
        x = self.word[input_ids] + self.type0 + self.pos[:t_len]
        x = self.map_in(layer_norm(x, -1, *self.emb_ln, eps=self.eps))
        for _ in range(self.n_layers):
            q, k, v = np.split(self.qkv(x), 3, axis=-1)
            ctx = attention(q, k, v, self.heads, valid_len=t_len)
            x = layer_norm(x + self.dense(ctx), -1, *self.attn_ln, eps=self.eps)
            h = self.ffn_out(gelu_new(self.ffn(x)))
            x = layer_norm(h + x, -1, *self.ffn_ln, eps=self.eps)
        return x
