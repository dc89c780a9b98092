"""An independent PyTorch implementation of lmcore's Llama-style model, written from the architecture
(Hugging Face LlamaForCausalLM: RMSNorm, RoPE with rotate_half, grouped-query attention, SwiGLU), for the
equivalence tests and as the peer of `lmcore bench train`. It shares no code with lmcore: weights come in
through a minimal safetensors reader written here with json + numpy.

    cfg = json.load(open("run/config.json"))
    model = LlamaReference(cfg)
    model.load_state_dict(read_safetensors("run/model.safetensors"), strict=False)
    loss = model.loss(tokens, targets)        # mean cross-entropy (+ z-loss), as lmcore's head
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """{name: torch tensor} of a safetensors file (F32/F64/F16/BF16), read with json + numpy only."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    base = 8 + n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b: base + e]
        if info["dtype"] == "BF16":
            u16 = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.copy()).reshape(info["shape"])
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq, head_dim, theta, dtype):
    # As transformers computes them: f32 inverse frequencies, f32 angles.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(seq, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def attention_mask(cfg, tokens):
    """(B, 1, T, T) bool: which keys each query may attend to."""
    B, T = tokens.shape
    q = torch.arange(T).view(T, 1)
    k = torch.arange(T).view(1, T)
    mask = (k <= q).expand(B, 1, T, T).clone()
    kind = cfg.get("lmcore_attention_mask", "causal")
    if kind == "sliding_window":
        mask &= (q - k <= cfg["sliding_window"])
    elif kind == "document":
        doc = torch.cumsum((tokens == cfg["eos_token_id"]).long(), dim=1)  # a document starts at each eos
        mask &= (doc.view(B, 1, T, 1) == doc.view(B, 1, 1, T))
    return mask


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.h = cfg["num_attention_heads"]
        self.kv = cfg.get("num_key_value_heads") or self.h
        self.hd = d // self.h
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.h // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        y = (p @ v).transpose(1, 2).reshape(B, T, self.h * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-5)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Trunk(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-5))


class LlamaReference(nn.Module):
    """Parameter names are those of a Hugging Face Llama checkpoint (model.*, lm_head.weight)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Trunk(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def load_lmcore_folder(self, folder):
        state = read_safetensors(f"{folder}/model.safetensors")
        missing, unexpected = self.load_state_dict(state, strict=False)
        allowed_missing = {"lm_head.weight"} if self.cfg.get("tie_word_embeddings", False) else set()
        assert set(missing) <= allowed_missing and not unexpected, (missing, unexpected)

    def logits(self, tokens):
        B, T = tokens.shape
        dtype = self.model.embed_tokens.weight.dtype
        cos, sin = rope_tables(T, self.cfg["hidden_size"] // self.cfg["num_attention_heads"],
                               self.cfg.get("rope_theta", 10000.0), dtype)
        mask = attention_mask(self.cfg, tokens)
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        z = self.lm_head(self.model.norm(x))
        cap = self.cfg.get("lmcore_logit_softcap", 0.0)
        if cap:
            z = cap * torch.tanh(z / cap)
        return z

    def loss(self, tokens, targets):
        z = self.logits(tokens).reshape(-1, self.cfg["vocab_size"])
        if z.dtype == torch.bfloat16:  # under autocast: the loss in f32, as lmcore's head computes it
            z = z.float()
        ce = F.cross_entropy(z, targets.reshape(-1), label_smoothing=self.cfg.get("lmcore_label_smoothing", 0.0))
        zl = self.cfg.get("lmcore_z_loss", 0.0)
        if zl:
            ce = ce + zl * torch.logsumexp(z, dim=-1).pow(2).mean()
        return ce

    def param_groups(self, weight_decay):
        """AdamW groups as lmcore forms them: no decay on norms and the embedding."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            (no_decay if name.endswith("norm.weight") or name == "model.embed_tokens.weight" else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
