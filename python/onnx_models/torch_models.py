#!/usr/bin/python3
"""Tiny PyTorch MoE transformers exported to ONNX, for the importer's tests.

Each style writes its sublayers the way a well-known code base does, so the
ONNX matchers (lib/Frontend/Onnx/Torch*.cpp) see the node patterns that
torch.onnx.export (torch 1.13, opset 17) really produces:

  mixtral   HF Mixtral: router Linear -> softmax -> topk (renormalised), a
            loop over experts with one_hot / torch.where / index_add_,
            SwiGLU experts (w1, w3, w2), RMSNorm, rotary, grouped KV heads
  gshard    GShard / Tutel: top-2 one-hot dispatch masks with capacity
            (cumsum positions, tokens >= C dropped), einsum dispatch and
            combine, GELU experts stacked as [E, M, H] parameters, LayerNorm,
            nn.MultiheadAttention
  switch    Switch: top-1 (argmax) with capacity and token dropping, matmul
            dispatch / combine, ReLU experts as one nn.Linear pair per expert,
            hand-written LayerNorm
  deepseek  DeepSeek(-V2): a first dense block, then shared experts beside
            fine-grained routed top-k experts (SwiGLU), RMSNorm;
            deepseek-v3: sigmoid affinities, kept ones renormalised
  mixtral-reversed  mixtral with the expert loop running last to first
  attn-*    attention variants on a Mixtral-style MoE: mha (nn.MHA), hand
            (plain Q/K/V), rotary, gqa (repeat_interleave), gqa-expand,
            noncausal (no mask), einsum (einsum scores and P·V, q·d^-0.5)
  biased    a model whose Linears have biases (the importer must refuse it)
  err-*     exported, then edited to be unsupported: padmask (a graph-input
            mask added to the scores), scale (scores / 2), expertop (a
            Softsign activation), capacity (capacity from a graph input);
            err-seqcapacity: Switch counting positions per sequence;
            err-posoffset: gpt2-pos with position ids 1..N;
            err-embnorm / err-tokentype: bert-postnorm with BERT's
            embedding LayerNorm / token-type embeddings; err-qbias:
            qwen-bias with a bias on Q only; err-gelutanh: gpt2-pos with
            GELU's tanh approximation; gpt2-nobias: gpt2-pos's
            LayerNorms without bias (torch 2.1's bias=False);
            err-partialrotary: rotary over 8 of 16 head dims

  torch_models.py <style> -o out.onnx [--expect out.json] [--loss] [--fold]
                  [--hf-config config.json]

--expect writes what the importer must find; --hf-config (gpt2-pos,
bert-postnorm) the Hugging Face config.json of the same model, for
--import-hf-config. --loss exports the mean
cross-entropy against a `labels` input instead of the logits. --fold exports
with constant folding (torch then renames transposed weights onnx::MatMul_*).
"""
import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- norms ----
class RMSNorm(nn.Module):
    def __init__(self, m, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(m) + 0.01 * torch.randn(m))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class LayerNormHand(nn.Module):
    """LayerNorm written out (exports ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add
    rather than one LayerNormalization node)."""

    def __init__(self, m, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(m) + 0.01 * torch.randn(m))
        self.bias = nn.Parameter(0.01 * torch.randn(m))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias


class RMSNormWeightFirst(nn.Module):
    """RMSNorm as many PyTorch users write it: the gain first,
    `w * x * rsqrt(mean(x^2) + eps)` (= (w*x)*rsqrt(..) in Python's order).
    Gains far from 1, so that dropping the norm changes every logit."""

    def __init__(self, m, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(0.25 + 2.0 * torch.rand(m))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(
            x.pow(2).mean(-1, keepdim=True) + self.eps)


class RMSNormWeightLast(RMSNormWeightFirst):
    """The same gains applied after the normalisation,
    `(x * rsqrt(mean(x^2) + eps)) * w`: the same function as weight-first
    (onnx-norm-placement.test checks it under ONNX Runtime)."""

    def forward(self, x):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) \
            * self.weight


class RMSNormWeightInside(RMSNormWeightFirst):
    """The gains inside the statistic, `w*x * rsqrt(mean((w*x)^2) + eps)`:
    a different function (the negative case of onnx-norm-placement.test)."""

    def forward(self, x):
        y = self.weight * x
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)


class PostNormBlock(nn.Module):
    """BERT-style: the norm after the residual Add (x = norm(x + f(x)))."""

    def __init__(self, m, attn, ffn):
        super().__init__()
        self.attn, self.attn_norm = attn, make_norm("layer", m)
        self.ffn, self.ffn_norm = ffn, make_norm("layer", m)
        # The negative checks' variant: the same norms moved before the
        # sublayers (pre-norm), a different model.
        self.as_prenorm = False

    def forward(self, x):
        if self.as_prenorm:
            x = x + self.attn(self.attn_norm(x))
            return x + self.ffn(self.ffn_norm(x))
        x = self.attn_norm(x + self.attn(x))
        return self.ffn_norm(x + self.ffn(x))


def make_norm(kind, m):
    if kind == "rms":
        return RMSNorm(m)
    if kind == "rms-wfirst":
        return RMSNormWeightFirst(m)
    if kind == "rms-wlast":
        return RMSNormWeightLast(m)
    if kind == "rms-winside":
        return RMSNormWeightInside(m)
    if kind == "layer-hand":
        return LayerNormHand(m)
    norm = nn.LayerNorm(m, eps=1e-5)
    # Distinct values, as after training: torch.onnx.export merges equal
    # initializers (all-ones scales) into one plus Identity nodes.
    with torch.no_grad():
        norm.weight.add_(0.01 * torch.randn(m))
        norm.bias.add_(0.01 * torch.randn(m))
    return norm


# ------------------------------------------------------------ attention ----
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_interleaved(x, cos, sin):
    """Rotary on (even, odd) lane pairs, as GPT-J / Meta's LLaMA write it
    with real arithmetic: x1*cos - x2*sin, x1*sin + x2*cos (no Neg).
    cos, sin: [N, d/2]."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x1 * sin + x2 * cos
    return torch.stack((o1, o2), dim=-1).flatten(-2)


class HandAttention(nn.Module):
    """HF-LLaMA-style attention: separate q/k/v/o Linears, optional rotary
    (rotate_half) and grouped KV heads (repeat_interleave or expand)."""

    def __init__(self, m, heads, kv_heads, rotary, repeat="interleave",
                 base=10000.0, bias=False, causal=True, einsum=False,
                 rotary_dims=None, o_bias=None):
        super().__init__()
        self.causal, self.einsum = causal, einsum
        self.h, self.kvh, self.d = heads, kv_heads, m // heads
        # GPT-NeoX rotary_pct: rotate only the first rotary_dims of a head.
        self.rd = rotary_dims or self.d
        self.q_proj = nn.Linear(m, heads * self.d, bias=bias)
        self.k_proj = nn.Linear(m, kv_heads * self.d, bias=bias)
        self.v_proj = nn.Linear(m, kv_heads * self.d, bias=bias)
        self.o_proj = nn.Linear(heads * self.d, m,
                                bias=bias if o_bias is None else o_bias)
        self.rotary, self.repeat = rotary, repeat
        inv = 1.0 / (base ** (torch.arange(0, self.rd, 2).float() / self.rd))
        self.register_buffer("inv_freq", inv)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kvh, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kvh, self.d).transpose(1, 2)
        if self.rotary == "interleaved":
            t = torch.arange(n, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq)
            q = rope_interleaved(q, freqs.cos(), freqs.sin())
            k = rope_interleaved(k, freqs.cos(), freqs.sin())
        elif self.rotary:
            t = torch.arange(n, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[None, None], emb.sin()[None, None]
            rd = self.rd
            q = torch.cat((q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin,
                           q[..., rd:]), dim=-1) if rd < self.d else \
                q * cos + rotate_half(q) * sin
            k = torch.cat((k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin,
                           k[..., rd:]), dim=-1) if rd < self.d else \
                k * cos + rotate_half(k) * sin
        if self.kvh != self.h:
            r = self.h // self.kvh
            if self.repeat == "interleave":
                k = k.repeat_interleave(r, dim=1)
                v = v.repeat_interleave(r, dim=1)
            else:  # HF repeat_kv: expand + reshape
                k = k[:, :, None].expand(b, self.kvh, r, n, self.d).reshape(
                    b, self.h, n, self.d)
                v = v[:, :, None].expand(b, self.kvh, r, n, self.d).reshape(
                    b, self.h, n, self.d)
        if self.einsum:
            s = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.d ** -0.5
        else:
            s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        if self.causal:
            s = s + torch.full((n, n), float("-inf")).triu(1)
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("bhqk,bhkd->bhqd", p, v) if self.einsum else \
            torch.matmul(p, v)
        o = o.transpose(1, 2).reshape(b, n, self.h * self.d)
        return self.o_proj(o)


class TorchMHA(nn.Module):
    """nn.MultiheadAttention (packed in_proj_weight), causal bool mask."""

    def __init__(self, m, heads, bias=False, need_weights=False):
        super().__init__()
        self.mha = nn.MultiheadAttention(m, heads, bias=bias, batch_first=True)
        # need_weights=True (torch's default) also exports the head-averaged
        # probabilities, unused: dead nodes beside the sublayer.
        self.need_weights = need_weights

    def forward(self, x):
        n = x.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        return self.mha(x, x, x, attn_mask=mask,
                        need_weights=self.need_weights)[0]


# -------------------------------------------------------------- experts ----
class SwiGLU(nn.Module):
    def __init__(self, m, h, bias=False):
        super().__init__()
        self.w1 = nn.Linear(m, h, bias=bias)  # gate (activated)
        self.w3 = nn.Linear(m, h, bias=bias)  # up
        self.w2 = nn.Linear(h, m, bias=bias)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MLP(nn.Module):
    def __init__(self, m, h, act, bias=False):
        super().__init__()
        self.fc1 = nn.Linear(m, h, bias=bias)
        self.fc2 = nn.Linear(h, m, bias=bias)
        self.act = act

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


ACTS = {"relu": F.relu, "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


# ---------------------------------------------------------------- MoEs -----
class MixtralMoe(nn.Module):
    """HF MixtralSparseMoeBlock (dropless)."""

    def __init__(self, m, h, e, k, normalize=True, bias=False,
                 reverse=False, act=None):
        super().__init__()
        self.gate = nn.Linear(m, e, bias=False)
        # act: plain MLP experts with that activation (GPT-2 / BERT's
        # GELU), else SwiGLU.
        self.experts = nn.ModuleList(
            (MLP(m, h, ACTS[act], bias) if act else SwiGLU(m, h, bias))
            for _ in range(e))
        self.e, self.k, self.normalize = e, k, normalize
        # Visiting experts last to first puts them in the graph in reverse:
        # the importer must order them by index, not by graph position.
        self.order = list(range(e))[::-1] if reverse else list(range(e))

    def forward(self, x):
        b, n, m = x.shape
        hs = x.view(-1, m)
        logits = self.gate(hs)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.k, dim=-1)
        if self.normalize:
            w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(hs)
        mask = F.one_hot(sel, num_classes=self.e).permute(2, 1, 0)
        for i in self.order:
            idx, top = torch.where(mask[i])
            cur = hs[top]
            y = self.experts[i](cur) * w[top, idx, None]
            out.index_add_(0, top, y)
        return out.view(b, n, m)


def capacity(f, k, tokens, e):
    return int(math.ceil(f * k * tokens / e))


class GShardMoe(nn.Module):
    """GShard / Tutel: top-k one-hot masks in priority order, positions by
    cumsum, tokens past capacity C dropped, einsum dispatch / combine over
    stacked [E, M, H] / [E, H, M] expert weights."""

    def __init__(self, m, h, e, k, f, tokens, act="gelu"):
        super().__init__()
        self.wg = nn.Linear(m, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, m, h) / math.sqrt(m))
        self.w2 = nn.Parameter(torch.randn(e, h, m) / math.sqrt(h))
        self.e, self.k, self.act = e, k, ACTS[act]
        self.c = capacity(f, k, tokens, e)

    def forward(self, x):
        b, n, m = x.shape
        s = x.reshape(-1, m)
        probs = F.softmax(self.wg(s), dim=-1)
        w, sel = torch.topk(probs, self.k, dim=-1)
        combine = torch.zeros(s.shape[0], self.e, self.c)
        prev = torch.zeros(1, self.e)
        for j in range(self.k):
            mask = F.one_hot(sel[:, j], self.e).float()  # S x E
            pos = torch.cumsum(mask, dim=0) - 1 + prev
            prev = prev + mask.sum(dim=0, keepdim=True)
            mask = mask * torch.lt(pos, self.c).float()
            slot = F.one_hot((pos * mask).sum(-1).long(), self.c).float()
            combine = combine + (w[:, j:j + 1] * mask)[:, :, None] * slot[:, None, :]
        dispatch = (combine > 0).float()
        xin = torch.einsum("sec,sm->ecm", dispatch, s)
        hid = self.act(torch.einsum("ecm,emh->ech", xin, self.w1))
        out = torch.einsum("ech,ehm->ecm", hid, self.w2)
        y = torch.einsum("sec,ecm->sm", combine, out)
        return y.reshape(b, n, m)


class SwitchMoe(nn.Module):
    """Switch Transformer: top-1 by argmax, capacity with token dropping,
    matmul dispatch / combine, one nn.Linear pair per expert."""

    def __init__(self, m, h, e, f, tokens, per_sequence=False):
        super().__init__()
        self.router = nn.Linear(m, e, bias=False)
        self.experts = nn.ModuleList(MLP(m, h, F.relu) for _ in range(e))
        self.e = e
        self.c = capacity(f, 1, tokens, e)
        # HF SwitchTransformers counts positions per sequence (cumsum over
        # N of [B, N, E]): a different limit than moe's over all tokens.
        self.per_sequence = per_sequence

    def forward(self, x):
        b, n, m = x.shape
        s = x.reshape(-1, m)
        probs = torch.softmax(self.router(s), dim=-1)
        gate, idx = torch.max(probs, dim=-1)
        mask = F.one_hot(idx, self.e).float()            # S x E
        if self.per_sequence:
            m3 = mask.view(b, n, self.e)
            pos = (torch.cumsum(m3, dim=1) * m3 - 1).view(-1, self.e)
        else:
            pos = torch.cumsum(mask, dim=0) * mask - 1   # S x E
        keep = mask * (pos < self.c).float()
        slot = F.one_hot(pos.clamp(0, self.c - 1).long(), self.c).float()
        disp = keep[:, :, None] * slot                   # S x E x C
        xin = torch.matmul(disp.permute(1, 2, 0), s)     # E x C x M
        outs = torch.stack([self.experts[i](xin[i]) for i in range(self.e)])
        comb = disp * gate[:, None, None]
        y = torch.matmul(comb.reshape(s.shape[0], -1), outs.reshape(-1, m))
        return y.reshape(b, n, m)


class DeepSeekMoe(nn.Module):
    """DeepSeek-V2 MoE: fine-grained routed SwiGLU experts (softmax top-k,
    not renormalised, dropless) plus always-on shared experts (one SwiGLU of
    hidden n_shared * h)."""

    def __init__(self, m, h, e, k, n_shared, sigmoid=False):
        super().__init__()
        self.gate = nn.Linear(m, e, bias=False)
        self.experts = nn.ModuleList(SwiGLU(m, h) for _ in range(e))
        self.shared_experts = SwiGLU(m, h * n_shared)
        self.e, self.k = e, k
        # DeepSeek-V3: sigmoid affinities, the kept ones renormalised.
        self.sigmoid = sigmoid

    def forward(self, x):
        b, n, m = x.shape
        hs = x.view(-1, m)
        logits = self.gate(hs)
        scores = logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)
        w, sel = torch.topk(scores, self.k, dim=-1)
        if self.sigmoid:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        out = torch.zeros_like(hs)
        for i in range(self.e):
            tok, slot = torch.where(sel == i)
            y = self.experts[i](hs[tok]) * w[tok, slot, None]
            out = out.index_add(0, tok, y)
        out = out + self.shared_experts(hs)
        return out.view(b, n, m)


class DenseFfn(nn.Module):
    def __init__(self, m, h):
        super().__init__()
        self.mlp = SwiGLU(m, h)

    def forward(self, x):
        return self.mlp(x)


# ---------------------------------------------------------------- model ----
class Block(nn.Module):
    def __init__(self, norm, m, attn, ffn):
        super().__init__()
        self.attn_norm, self.attn = make_norm(norm, m), attn
        self.ffn_norm, self.ffn = make_norm(norm, m), ffn

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class Model(nn.Module):
    def __init__(self, vocab, m, norm, blocks, loss, positions=0):
        super().__init__()
        self.embed = nn.Embedding(vocab, m)
        # GPT-2 / BERT: learned absolute position embeddings added to the
        # token embeddings (wpe); 0: none.
        self.wpe = nn.Embedding(positions, m) if positions else None
        # BERT's token-type embeddings and embedding LayerNorm, for the
        # models the importer must refuse (derive): None here.
        self.token_type = self.emb_norm = None
        # The negative checks' variant: the table kept, its Add dropped.
        self.drop_positions = False
        self.blocks = nn.ModuleList(blocks)
        self.norm = make_norm(norm, m) if norm else nn.Identity()
        self.lm_head = nn.Linear(m, vocab, bias=False)
        self.loss = loss

    def forward(self, tokens, labels=None):
        x = self.embed(tokens)
        if self.wpe is not None and not self.drop_positions:
            x = x + self.wpe(torch.arange(tokens.shape[1]))[None]
        if self.token_type is not None:
            x = x + self.token_type(torch.zeros_like(tokens))
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.norm(x))
        if not self.loss:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               labels.reshape(-1))


def build(style, loss):
    """Returns (model, B, N, expect dict)."""
    if style in DERIVED:
        return derive(style, loss)
    torch.manual_seed(0)
    B, N = 2, 16
    ex = {"style": style, "B": B, "N": N, "blocks": 2}
    if style in ("mixtral", "mixtral-reversed", "biased",
                 "err-partialrotary") or style.startswith("attn-"):
        M, H, E, K, V, heads = 64, 96, 4, 2, 96, 4
        variant = style[5:] if style.startswith("attn-") else "gqa"
        causal = variant != "noncausal"
        kvh = 2 if variant.startswith("gqa") else heads
        norm = "rms" if variant != "mha" else "layer"
        bias = style == "biased"

        def attn():
            if variant == "mha":
                return TorchMHA(M, heads, bias=bias, need_weights=True)
            return HandAttention(M, heads, kvh, rotary=variant in (
                "gqa", "rotary", "gqa-expand"),
                # torch 1.13 exports repeat_interleave over KV heads as a
                # Reshape(2, -1, 0, 0) that ONNX Runtime itself rejects
                # (the file does not compute what the module does): only
                # attn-gqa keeps it, as a model the importer must refuse.
                repeat="interleave" if style == "attn-gqa" else "expand",
                bias=bias, causal=causal, einsum=variant == "einsum",
                rotary_dims=8 if style == "err-partialrotary" else None)
        blocks = [Block(norm, M, attn(), MixtralMoe(
            M, H, E, K, bias=bias, reverse=style == "mixtral-reversed"))
            for _ in range(2)]
        ex.update(M=M, H=H, experts=E, k=K, dropless=True, activation="silu",
                  gated=True, normalize=True, heads=heads, kv_heads=kvh,
                  head_dim=M // heads, causal=causal,
                  rotary=variant in ("gqa", "rotary", "gqa-expand"),
                  norm=norm, shared_hidden=0, vocab=V, dense_blocks=[])
    elif style == "gshard":
        M, H, E, K, V, heads, f = 32, 64, 4, 2, 64, 4, 1.0
        C = capacity(f, K, B * N, E)
        blocks = [Block("layer", M, TorchMHA(M, heads),
                        GShardMoe(M, H, E, K, f, B * N)) for _ in range(2)]
        ex.update(M=M, H=H, experts=E, k=K, dropless=False, capacity=C,
                  capacity_factor=C * E / (K * B * N), activation="gelu",
                  gated=False, normalize=False, heads=heads, kv_heads=heads,
                  head_dim=M // heads, causal=True, rotary=False, norm="layer",
                  shared_hidden=0, vocab=V, dense_blocks=[])
    elif style in ("switch", "err-seqcapacity"):
        M, H, E, V, heads, f = 32, 64, 8, 64, 2, 1.25
        C = capacity(f, 1, B * N, E)
        blocks = [Block("layer-hand", M, HandAttention(M, heads, heads, False),
                        SwitchMoe(M, H, E, f, B * N,
                                  per_sequence=style != "switch"))
                  for _ in range(2)]
        ex.update(M=M, H=H, experts=E, k=1, dropless=False, capacity=C,
                  capacity_factor=C * E / (1 * B * N), activation="relu",
                  gated=False, normalize=False, heads=heads, kv_heads=heads,
                  head_dim=M // heads, causal=True, rotary=False, norm="layer",
                  norm_module="layer-hand", shared_hidden=0, vocab=V,
                  dense_blocks=[])
    elif style in ("deepseek", "deepseek-v3"):
        M, H, E, K, V, heads, S = 64, 32, 8, 2, 128, 4, 2
        v3 = style == "deepseek-v3"
        blocks = [Block("rms", M, HandAttention(M, heads, heads, True),
                        DenseFfn(M, 4 * M)),
                  Block("rms", M, HandAttention(M, heads, heads, True),
                        DeepSeekMoe(M, H, E, K, S, sigmoid=v3))]
        ex.update(M=M, H=H, experts=E, k=K, dropless=True, activation="silu",
                  gated=True, normalize=v3, gate="sigmoid" if v3 else
                  "softmax_topk", heads=heads, kv_heads=heads,
                  head_dim=M // heads, causal=True, rotary=True, norm="rms",
                  shared_hidden=S * H, dense_hidden=4 * M, vocab=V,
                  dense_blocks=[0])
    elif style in ISSUE_STYLES:
        # The issue-10 models: written as PyTorch users write them, with
        # gains far from 1 (RMSNormWeightFirst) so every op matters.
        M, H, E, K, V, heads, kvh = 64, 96, 4, 2, 96, 4, 2
        rope = "interleaved" if "interleaved" in style or style.endswith(
            "-issue") else True
        if style.startswith("deepseek"):
            S = 2
            blocks = [Block("rms-wfirst", M, HandAttention(
                M, heads, heads, rope), DenseFfn(M, 4 * M)),
                Block("rms-wfirst", M, HandAttention(M, heads, heads, rope),
                      DeepSeekMoe(M, H // 2, 8, K, S))]
            ex.update(experts=8, H=H // 2, shared_hidden=S * H // 2,
                      dense_hidden=4 * M, dense_blocks=[0], normalize=False,
                      kv_heads=heads)
        elif style == "mha-bias":
            blocks = [Block("layer", M, TorchMHA(M, heads, bias=True),
                            MixtralMoe(M, H, E, K)) for _ in range(2)]
            with torch.no_grad():  # torch initialises them to 0
                for b in blocks:
                    b.attn.mha.in_proj_bias.normal_(0.0, 0.5)
                    b.attn.mha.out_proj.bias.normal_(0.0, 0.5)
        elif style == "qwen-bias":
            # Qwen2-style: q/k/v biases (not o), rotate-half rotary with
            # base 1e6; biases large enough to matter.
            blocks = [Block("rms", M, HandAttention(
                M, heads, kvh, True, repeat="expand", base=1e6, bias=True,
                o_bias=False), MixtralMoe(M, H, E, K)) for _ in range(2)]
            with torch.no_grad():
                for b in blocks:
                    for lin in (b.attn.q_proj, b.attn.k_proj, b.attn.v_proj):
                        lin.bias.normal_(0.0, 0.5)
            ex.update(rope_theta=1e6)
        elif style in ("gpt2-pos", "bert-postnorm"):
            # FlowMoE Table 2's GPT-2 / BERT: LayerNorm, GELU experts;
            # BERT bidirectional and post-norm, without a final norm.
            def attn():
                return HandAttention(M, heads, heads, False,
                                     causal=style == "gpt2-pos")
            def moe():
                return MixtralMoe(M, H, E, K, act="gelu")
            if style == "bert-postnorm":
                blocks = [PostNormBlock(M, attn(), moe()) for _ in range(2)]
            else:
                blocks = [Block("layer", M, attn(), moe()) for _ in range(2)]
            ex.update(activation="gelu", gated=False,
                      causal=style == "gpt2-pos")
        else:  # llama-*: GQA attention, Mixtral MoE
            norm = {"llama-interleaved": "rms", "llama-wlast": "rms-wlast",
                    "llama-winside": "rms-winside"}.get(style, "rms-wfirst")
            blocks = [Block(norm, M, HandAttention(M, heads, kvh, rope,
                                                   repeat="expand"),
                            MixtralMoe(M, H, E, K)) for _ in range(2)]
        ex.setdefault("dense_blocks", [])
        ex.setdefault("shared_hidden", 0)
        ex.setdefault("kv_heads", kvh)
        ex.setdefault("normalize", True)
        ex.setdefault("experts", E)
        ex.setdefault("H", H)
        ex.setdefault("activation", "silu")
        ex.setdefault("gated", True)
        ex.setdefault("causal", True)
        ex.update(M=M, k=K, dropless=True,
                  heads=heads, head_dim=M // heads,
                  rotary=style != "mha-bias" and not style.startswith(
                      ("gpt2", "bert")),
                  rotary_layout="interleaved" if rope == "interleaved"
                  else "half",
                  norm="layer" if style in ("mha-bias", "gpt2-pos",
                                            "bert-postnorm") else "rms",
                  vocab=V)
        if style == "bert-postnorm":
            ex["norm_module"] = None
            ex["postnorm"] = True
        if style in ("gpt2-pos", "bert-postnorm"):
            ex["positions"] = 2 * N  # more rows than tokens: N.. unused
    else:
        raise SystemExit(f"torch_models.py: unknown style '{style}'")
    model = Model(ex["vocab"], ex["M"], ex.pop("norm_module", ex["norm"]),
                  blocks, loss, positions=ex.get("positions", 0))
    if style in ("gpt2-pos", "bert-postnorm"):
        # Gains far from 1 and sizeable biases: every LayerNorm matters.
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, nn.LayerNorm):
                    mod.weight.copy_(0.25 + 2.0 * torch.rand(ex["M"]))
                    mod.bias.copy_(0.3 * torch.randn(ex["M"]))
    ex.setdefault("gate", "softmax_topk")
    ex["loss"] = loss
    return model.eval(), B, N, ex


def derive(style, loss):
    """A model of another style with one thing changed (DERIVED)."""
    model, B, N, ex = build(DERIVED[style], loss)
    ex["style"] = style
    M = ex["M"]
    if style == "gpt2-nobias":
        # torch >= 2.1's nn.LayerNorm(bias=False) (DBRX's norms): the bias
        # None, exported as LayerNormalization with an empty bias input.
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.bias = None
    elif style == "err-embnorm":  # BERT's LayerNorm of the embeddings
        model.emb_norm = make_norm("layer", M)
    elif style == "err-tokentype":  # BERT's token-type embeddings (ids 0)
        model.token_type = nn.Embedding(2, M)
    elif style == "err-qbias":  # a bias on Q only
        for blk in model.blocks:
            blk.attn.k_proj.bias = blk.attn.v_proj.bias = None
    elif style == "err-gelutanh":  # GELU's tanh approximation
        for blk in model.blocks:
            for mlp in blk.ffn.experts:
                mlp.act = ACTS["gelu_tanh"]
    return model, B, N, ex


# Models of another style with one thing changed: what the importer must
# represent (gpt2-nobias) or refuse by name (err-*).
DERIVED = {"gpt2-nobias": "gpt2-pos", "err-embnorm": "bert-postnorm",
           "err-tokentype": "bert-postnorm", "err-qbias": "qwen-bias",
           "err-gelutanh": "gpt2-pos"}

# Issue 10's models: llama-issue (weight-first RMSNorm + interleaved
# rotary), llama-wfirst (weight-first RMSNorm, rotate-half rotary),
# llama-wlast (llama-wfirst's gains after the normalisation: the same
# function), llama-winside (the gains inside the statistic: a different
# one), llama-interleaved (interleaved rotary alone), deepseek-issue /
# deepseek-wfirst (the same with shared experts), mha-bias
# (nn.MultiheadAttention with bias), gpt2-pos (learned positions),
# bert-postnorm (post-norm blocks), qwen-bias (Qwen2-style q/k/v biases,
# rotary base 1e6).
ISSUE_STYLES = ["llama-issue", "llama-wfirst", "llama-wlast",
                "llama-winside", "llama-interleaved",
                "deepseek-issue", "deepseek-wfirst", "mha-bias", "gpt2-pos",
                "bert-postnorm", "qwen-bias"]

STYLES = ISSUE_STYLES + ["mixtral", "mixtral-reversed", "gshard", "switch", "deepseek",
          "deepseek-v3",
          "attn-mha", "attn-hand", "attn-rotary", "attn-gqa",
          "attn-gqa-expand", "attn-noncausal", "attn-einsum", "biased",
          "err-seqcapacity", "err-partialrotary"]

# Broken models for the error tests: a style exported, then edited.
EDITS = {"err-padmask": "attn-hand", "err-scale": "attn-hand",
         "err-expertop": "mixtral", "err-capacity": "switch",
         "err-posoffset": "gpt2-pos"}


def edit(style, path):
    """Applies an err-* edit to the exported model at `path` in place."""
    import onnx
    import onnx.numpy_helper
    from onnx import TensorProto, helper
    model = onnx.load(path)
    g = model.graph
    nodes = list(g.node)
    consts = {o: n for n in nodes if n.op_type == "Constant"
              for o in n.output}

    def first(op, scope):
        return next(n for n in nodes if n.op_type == op and scope in n.name)
    if style == "err-padmask":
        # Adds a graph-input mask (as for padding) to block 0's scores.
        sm = first("Softmax", "/blocks.0/attn/")
        g.input.append(helper.make_tensor_value_info(
            "pad_mask", TensorProto.FLOAT, [2, 1, 16, 16]))
        add = helper.make_node("Add", [sm.input[0], "pad_mask"],
                               ["pad_scores"], name="/blocks.0/attn/PadAdd")
        sm.input[0] = "pad_scores"
        g.node.insert(list(g.node).index(sm), add)
    elif style == "err-scale":
        # Divides the scores by 2 instead of sqrt(16) = 4.
        div = first("Div", "/blocks.0/attn/")
        c = consts[div.input[1]]
        c.attribute[0].t.CopyFrom(helper.make_tensor(
            c.output[0], TensorProto.FLOAT, [], [2.0]))
    elif style == "err-expertop":
        # An activation the moe dialect does not have.
        first("Sigmoid", "/blocks.0/ffn/experts.0").op_type = "Softsign"
    elif style == "err-posoffset":
        # Position ids 1..N instead of 0..N-1 (a valid file: the table has
        # 2N rows), which moe.position_embedding cannot represent.
        ids = consts[first("Gather", "/wpe/").input[1]]
        t = onnx.numpy_helper.to_array(ids.attribute[0].t) + 1
        ids.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(
            t, ids.output[0]))
    elif style == "err-capacity":
        # The capacity comes from a graph input instead of a constant.
        less = first("Less", "/blocks.0/ffn/")
        g.input.append(helper.make_tensor_value_info(
            "capacity", TensorProto.FLOAT, []))
        less.input[1] = "capacity"
    onnx.save(model, path)


def hf_config(style, ex):
    """The Hugging Face config.json describing a GPT-2 / BERT-style model
    (gpt2-pos, bert-postnorm) for --import-hf-config: its sizes, eps 1e-5
    (torch's LayerNorm default), an untied LM head, and the routing of
    MixtralMoe (renormalised top-k, dropless)."""
    if style not in ("gpt2-pos", "bert-postnorm"):
        raise SystemExit(f"torch_models.py: --hf-config: no config for "
                         f"'{style}' (gpt2-pos, bert-postnorm)")
    cfg = {"vocab_size": ex["vocab"], "num_experts": ex["experts"],
           "num_experts_per_tok": ex["k"], "norm_topk_prob": True,
           "capacity_factor": "dropless", "tie_word_embeddings": False}
    if style == "gpt2-pos":
        cfg.update(model_type="gpt2", n_layer=ex["blocks"], n_embd=ex["M"],
                   n_head=ex["heads"], n_inner=ex["H"],
                   n_positions=ex["positions"], activation_function="gelu",
                   layer_norm_epsilon=1e-5)
    else:
        cfg.update(model_type="bert", num_hidden_layers=ex["blocks"],
                   hidden_size=ex["M"], num_attention_heads=ex["heads"],
                   intermediate_size=ex["H"],
                   max_position_embeddings=ex["positions"], hidden_act="gelu",
                   layer_norm_eps=1e-5, is_decoder=False)
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("style", choices=STYLES + list(EDITS) + list(DERIVED))
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--expect")
    ap.add_argument("--hf-config", help="write the model's Hugging Face "
                    "config.json (gpt2-pos, bert-postnorm)")
    ap.add_argument("--loss", action="store_true",
                    help="export the cross-entropy loss (labels input)")
    ap.add_argument("--fold", action="store_true",
                    help="export with constant folding (weights renamed)")
    args = ap.parse_args()
    model, B, N, ex = build(EDITS.get(args.style, args.style), args.loss)
    tokens = torch.randint(0, ex["vocab"], (B, N))
    inputs, names = (tokens,), ["tokens"]
    if args.loss:
        inputs, names = (tokens, torch.randint(0, ex["vocab"], (B, N))), [
            "tokens", "labels"]
    with torch.no_grad():
        # No constant folding: weights keep their parameter names (the
        # Transpose of a Linear weight stays a node), as the importer's
        # moe.source attributes name them.
        torch.onnx.export(model, inputs, args.output, opset_version=17,
                          input_names=names,
                          output_names=["loss" if args.loss else "logits"],
                          do_constant_folding=args.fold)
    if args.style in EDITS:
        edit(args.style, args.output)
    if args.expect:
        with open(args.expect, "w") as f:
            json.dump(ex, f, indent=1, sort_keys=True)
    if args.hf_config:
        with open(args.hf_config, "w") as f:
            json.dump(hf_config(args.style, ex), f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
