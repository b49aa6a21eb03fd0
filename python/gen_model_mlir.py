#!/usr/bin/env python3
"""Write a GPT-style MoE transformer as `moe` dialect IR.

The shipped examples (examples/*.mlir) are this script's output; a lit test
regenerates them and fails if they drift. Presets follow FlowMoE Table 2
(L, B, N, M, H, E/P, k, f on Cluster 1: 2 nodes x 8 GPUs), plus small models
for tests. Only the Python standard library is used.

  python3 python/gen_model_mlir.py --list
  python3 python/gen_model_mlir.py gpt2-tiny-moe > examples/gpt2-tiny-moe.mlir
"""
import argparse
import math
import sys
from dataclasses import dataclass, field, replace

CLUSTER1 = (2, 8)  # FlowMoE Cluster 1: 2 nodes x 8 RTX3090


@dataclass(frozen=True)
class Config:
    name: str
    layers: int            # L
    batch: int             # B, samples per GPU
    seq: int               # N, tokens per sample
    embed: int             # M
    hidden: int            # H, expert FFN hidden size
    experts_per_rank: int  # E/P
    top_k: int             # k
    capacity_factor: float | None  # f; None = dropless
    grid: tuple = CLUSTER1  # nodes x GPUs per node
    vocab: int = 50257
    head_dim: int = 64
    kv_heads: int | None = None  # None = same as heads (MHA)
    causal: bool = True
    rotary: bool = False
    rope_theta: float = 10000.0  # rotary base (moe.attention's theta)
    rope_layout: str = "rotate_half"  # rotate_half | interleaved
    attn_bias: bool = False  # Q/K/V and output biases (block<i>.attn.b*)
    norm: str = "layer"     # layer | rms
    activation: str = "gelu"
    gated: bool = False     # SwiGLU-style experts
    gate: str = "softmax_topk"  # moe.gate kind (--gate)
    gate_dim: int | None = None  # cosine's projection width d (None = M)
    normalize: bool = False  # renormalise top-k weights (Mixtral)
    cosine_tau: float | None = None  # cosine's τ (None: the dialect's 0.07)
    positions: int = 0      # learned absolute positions (GPT-2's wpe); 0: none
    postnorm: bool = False  # BERT: x = norm(x + f(x)), no pre-/final norms
    note: str = ""

    @property
    def ranks(self):
        return self.grid[0] * self.grid[1]

    @property
    def experts(self):
        return self.experts_per_rank * self.ranks

    @property
    def heads(self):
        return self.embed // self.head_dim

    @property
    def capacity(self):
        f = self.capacity_factor
        tokens = self.batch * self.seq
        # ceil(f*k*B*N/E), FlowMoE §2.2; round f*10^6 to avoid binary noise.
        num = round(f * 1_000_000) * self.top_k * tokens
        return -(-num // (1_000_000 * self.experts))


def table2(name, L, B, N, M, H, epr, k, f, **kw):
    return Config(name, L, B, N, M, H, epr, k, f,
                  note="FlowMoE Table 2", **kw)


PRESETS = {c.name: c for c in [
    table2("gpt2-tiny-moe", 12, 4, 256, 256, 512, 1, 2, 1.0, positions=256),
    table2("bert-large-moe", 24, 4, 512, 512, 1024, 2, 1, 1.0,
           vocab=30522, causal=False, positions=512, postnorm=True),
    table2("llama2-moe", 32, 4, 512, 1024, 4096, 1, 1, 1.0, vocab=32000,
           norm="rms", rotary=True, activation="silu"),
    table2("llama2-moe-l", 64, 4, 512, 1024, 4096, 1, 1, 1.0, vocab=32000,
           norm="rms", rotary=True, activation="silu"),
    table2("deepseek-v2-s", 4, 4, 256, 5120, 1536, 2, 8, 1.0,
           vocab=102400, norm="rms", rotary=True, activation="silu",
           head_dim=128),
    table2("deepseek-v2-m", 7, 4, 256, 5120, 1536, 2, 1, 1.0,
           vocab=102400, norm="rms", rotary=True, activation="silu",
           head_dim=128),
    Config("gpt-moe-2block", 2, 4, 64, 128, 256, 2, 2, 1.2, grid=(2, 2),
           vocab=1024, head_dim=32,
           note="2-block GPT-style MoE: LayerNorm, GELU experts, top-2, f=1.2"),
    Config("mixtral-style-2block", 2, 2, 32, 64, 128, 2, 2, None,
           grid=(1, 4), vocab=512, head_dim=16, kv_heads=2, rotary=True,
           norm="rms", activation="silu", gated=True, normalize=True,
           note="2-block Mixtral-style MoE: RMSNorm, rotary, GQA, SwiGLU, "
                "dropless renormalised top-2"),
]}


GATE_KINDS = ["softmax_topk", "noisy_topk", "sigmoid", "cosine",
              "expert_choice"]


def tensor(shape, elem="f32"):
    return "tensor<" + "x".join(str(d) for d in shape) + "x" + elem + ">"


class Writer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.args = []  # (ssa name, type, param name or None)
        self.body = []
        self.tmp = 0

    def arg(self, name, shape, elem="f32", param=True):
        ssa = "%" + name.replace(".", "_")
        self.args.append((ssa, tensor(shape, elem), name if param else None))
        return ssa

    def fresh(self, hint):
        self.tmp += 1
        return f"%{hint}{self.tmp}"

    def emit(self, line, indent=2):
        self.body.append(" " * indent + line)


def write(cfg):
    c = cfg
    B, N, M, H, E, k = c.batch, c.seq, c.embed, c.hidden, c.experts, c.top_k
    kv = c.kv_heads or c.heads
    El = c.experts_per_rank
    act = tensor([B, N, M])
    w = Writer(c)
    tokens = w.arg("tokens", [B, N], "i64", param=False)
    labels = w.arg("labels", [B, N], "i64", param=False)
    wte = w.arg("embed.table", [c.vocab, M])
    axes = "[0, 1]"
    dropless = c.capacity_factor is None
    slots = "?" if dropless else c.ranks * c.capacity
    cap = "" if dropless else f" capacity = {c.capacity}"
    cap_gate = "" if dropless else \
        f" capacity_factor = {c.capacity_factor!r} capacity = {c.capacity}"
    norm_params = (lambda p: [w.arg(p + ".scale", [M])] +
                   ([w.arg(p + ".bias", [M])] if c.norm == "layer" else []))

    wpe = w.arg("embed.positions", [c.positions, M]) if c.positions else None
    h = w.fresh("h")
    w.emit(f"{h} = moe.embedding {tokens}, {wte} : "
           f"({tensor([B, N], 'i64')}, {tensor([c.vocab, M])}) -> {act}")
    if wpe:
        h0, h = h, w.fresh("h")
        w.emit(f"{h} = moe.position_embedding {h0}, {wpe} : "
               f"({act}, {tensor([c.positions, M])}) -> {act}")

    def emit_norm(x, params, indent):
        out = w.fresh("norm")
        w.emit(f"{out} = moe.norm {c.norm} {x}, {', '.join(params)} : "
               f"({', '.join([act] + [tensor([M])] * len(params))}) -> {act}",
               indent)
        return out
    for l in range(c.layers):
        p = f"block{l}"
        wq = w.arg(p + ".attn.wq", [M, c.heads * c.head_dim])
        wk = w.arg(p + ".attn.wk", [M, kv * c.head_dim])
        wv = w.arg(p + ".attn.wv", [M, kv * c.head_dim])
        wo = w.arg(p + ".attn.wo", [c.heads * c.head_dim, M])
        biases = ([w.arg(p + ".attn.bq", [c.heads * c.head_dim]),
                   w.arg(p + ".attn.bk", [kv * c.head_dim]),
                   w.arg(p + ".attn.bv", [kv * c.head_dim]),
                   w.arg(p + ".attn.bo", [M])] if c.attn_bias else [])
        # Pre-norm: attn_norm, moe_norm; post-norm (BERT): a norm after
        # each residual add instead, each after its sublayer's parameters
        # (the builder's order, and the ONNX route's: data order).
        ln1 = [] if c.postnorm else norm_params(p + ".attn_norm")
        ln2 = [] if c.postnorm else norm_params(p + ".moe_norm")
        post1 = norm_params(p + ".attn_postnorm") if c.postnorm else []
        # The kind's extra operand goes after the weight, as the dialect's
        # aux(...): noisy_topk's W_noise (M x E), cosine's W_proj (M x d)
        # with the weight d x E.
        gd = c.gate_dim or M
        wg_shape = [gd, E] if c.gate == "cosine" else [M, E]
        wg = w.arg(p + ".gate.weight", wg_shape)
        aux = aux_shape = None
        if c.gate == "noisy_topk":
            aux_shape = [M, E]
            aux = w.arg(p + ".gate.noise", aux_shape)
        elif c.gate == "cosine":
            aux_shape = [M, gd]
            aux = w.arg(p + ".gate.proj", aux_shape)
        up = w.arg(p + ".experts.up", [El, M, H])
        gp = w.arg(p + ".experts.gate", [El, M, H]) if c.gated else None
        down = w.arg(p + ".experts.down", [El, H, M])
        post2 = norm_params(p + ".ffn_postnorm") if c.postnorm else []
        out = w.fresh("h")
        x = f"%x{l}"
        w.emit(f"{out} = moe.block {l} ({x} = {h} : {act}) -> {act} {{")
        flags = (" causal" if c.causal else "") + (" rotary" if c.rotary else "")
        if c.rotary and c.rope_layout != "rotate_half":
            flags += f" layout = {c.rope_layout}"
        if c.rotary and c.rope_theta != 10000.0:
            flags += f" theta = {c.rope_theta!r}"
        bias_txt = (f" qkv_bias({', '.join(biases[:3])}) out_bias({biases[3]})"
                    if biases else "")
        bias_types = ([tensor([c.heads * c.head_dim]),
                       tensor([kv * c.head_dim]), tensor([kv * c.head_dim]),
                       tensor([M])] if biases else [])
        attn_types = ", ".join([act, tensor([M, c.heads * c.head_dim]),
                                tensor([M, kv * c.head_dim]),
                                tensor([M, kv * c.head_dim]),
                                tensor([c.heads * c.head_dim, M])] +
                               [tensor([M])] * len(ln1) + bias_types)
        a = w.fresh("attn")
        prenorm = f" prenorm {c.norm}({', '.join(ln1)})" if ln1 else ""
        w.emit(f"{a} = moe.attention {x} weights({wq}, {wk}, {wv}, {wo}) "
               f"heads = {c.heads} kv_heads = {kv} head_dim = {c.head_dim}"
               f"{flags}{prenorm}{bias_txt} : ({attn_types}) -> {act}", 4)
        r1 = w.fresh("res")
        w.emit(f"{r1} = arith.addf {x}, {a} : {act}", 4)
        if post1:
            r1 = emit_norm(r1, post1, 4)
        n = emit_norm(r1, ln2, 4) if ln2 else r1
        t = l
        # Token choice routes B x N x k; expert choice E x C (each expert's
        # C picks, token ids flattened over B x N).
        ec = c.gate == "expert_choice"
        route_shape = [E, c.capacity] if ec else [B, N, k]
        route = tensor(route_shape, "i32")
        aux_txt = f" aux({aux})" if aux else ""
        gate_types = ", ".join([act, tensor(wg_shape)] +
                               ([tensor(aux_shape)] if aux else []))
        w.emit(f"%idx{t}, %wts{t}, %cnt{t} = moe.gate {c.gate} {n}, {wg}"
               f"{aux_txt} experts = {E} top_k = {k}{cap_gate}"
               f"{' normalize' if c.normalize else ''}"
               f"{f' tau = {c.cosine_tau!r}' if c.cosine_tau else ''} : "
               f"({gate_types}) -> ({route}, "
               f"{tensor(route_shape)}, {tensor([E], 'i32')})", 4)
        exp_in = tensor([El, slots, M])
        d = w.fresh("disp")
        w.emit(f"{d} = moe.dispatch {n}, %idx{t}, %cnt{t} on @cluster axes = "
               f"{axes} experts = {E}{cap} : ({act}, {route}, "
               f"{tensor([E], 'i32')}) -> {exp_in}", 4)
        e = w.fresh("exp")
        ffn_w = [up] + ([gp] if gp else []) + [down]
        ffn_t = [tensor([El, M, H])] * (2 if gp else 1) + [tensor([El, H, M])]
        gate_txt = f" gate({gp})" if gp else ""
        w.emit(f"{e} = moe.expert {c.activation} {d} up({up}){gate_txt} "
               f"down({down}) : ({', '.join([exp_in] + ffn_t)}) -> {exp_in}",
               4)
        cmb = w.fresh("comb")
        w.emit(f"{cmb} = moe.combine {e}, %idx{t}, %wts{t}, %cnt{t} on @cluster "
               f"axes = {axes} experts = {E}{cap} : ({exp_in}, {route}, "
               f"{tensor(route_shape)}, {tensor([E], 'i32')}) -> {act}", 4)
        r2 = w.fresh("res")
        w.emit(f"{r2} = arith.addf {r1}, {cmb} : {act}", 4)
        if post2:
            r2 = emit_norm(r2, post2, 4)
        w.emit(f"moe.yield {r2} : {act}", 4)
        w.emit("}")
        h = out
    lnf = [] if c.postnorm else norm_params("final_norm")
    head = w.arg("lm_head.weight", [M, c.vocab])
    hf = emit_norm(h, lnf, 2) if lnf else h
    logits = w.fresh("logits")
    w.emit(f"{logits} = moe.linear {hf}, {head} : ({act}, "
           f"{tensor([M, c.vocab])}) -> {tensor([B, N, c.vocab])}")
    w.emit(f"%loss = moe.cross_entropy {logits}, {labels} : "
           f"({tensor([B, N, c.vocab])}, {tensor([B, N], 'i64')}) -> "
           f"tensor<f32>")
    w.emit("return %loss : tensor<f32>")

    f = "dropless" if dropless else f"capacity_factor = {c.capacity_factor!r}"
    model = (f"#moe.model<layers = {c.layers}, batch = {B}, seq = {N}, "
             f"embed = {M}, hidden = {H}, experts = {E}, top_k = {k}, {f}, "
             f"grid = @cluster, ep_axes = {axes}, dp_axes = {axes}, "
             f"intra_axes = [1]>")
    lines = [f"// {c.name}: {c.note}",
             f"// Generated by python/gen_model_mlir.py {c.name}; "
             "do not edit by hand.",
             f"// {c.grid[0]} nodes x {c.grid[1]} GPUs per node, "
             f"E/P = {c.experts_per_rank}.",
             f"shard.grid @cluster(shape = {c.grid[0]}x{c.grid[1]})",
             f"func.func @{c.name.replace('-', '_')}("]
    for i, (ssa, ty, param) in enumerate(w.args):
        attr = f' {{moe.param = "{param}"}}' if param else ""
        sep = "," if i + 1 < len(w.args) else ""
        lines.append(f"    {ssa}: {ty}{attr}{sep}")
    lines.append(f"  ) -> tensor<f32> attributes {{moe.model = {model}}} {{")
    lines += w.body
    lines.append("}")
    return "\n".join(lines) + "\n"


def add_attention_arguments(ap):
    """The attention variants (shared with torch_reference.py)."""
    ap.add_argument("--rope-theta", type=float,
                    help="rotary base theta (default 10000; HF Mixtral 1e6)")
    ap.add_argument("--rope-layout", choices=["rotate_half", "interleaved"],
                    help="rotary lane pairing (default rotate_half)")
    ap.add_argument("--attn-bias", action="store_true",
                    help="biases on the Q, K, V and output projections")


def apply_attention_arguments(ap, args, cfg):
    if args.rope_theta is not None:
        if not args.rope_theta > 0:
            ap.error("--rope-theta must be positive")
        cfg = replace(cfg, rope_theta=args.rope_theta)
    if args.rope_layout:
        cfg = replace(cfg, rope_layout=args.rope_layout)
    if args.attn_bias:
        cfg = replace(cfg, attn_bias=True)
    if (args.rope_theta is not None or args.rope_layout) and not cfg.rotary:
        ap.error("--rope-theta / --rope-layout need a preset with rotary")
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("preset", nargs="?", help="model preset (see --list)")
    ap.add_argument("--list", action="store_true", help="list presets")
    ap.add_argument("--layers", type=int, help="override L")
    ap.add_argument("--experts-per-rank", type=int, help="override E/P")
    ap.add_argument("--grid", help="override the grid, NODESxGPUS (e.g. 1x4)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=N",
                    help="override an integer field: batch, seq, embed, "
                         "hidden, top_k, head_dim, vocab, kv_heads, "
                         "positions (learned position table rows)")
    ap.add_argument("--capacity-factor",
                    help="override f (a number, or 'dropless')")
    ap.add_argument("--gate", choices=GATE_KINDS,
                    help="override the moe.gate kind (noisy_topk adds "
                         "block<i>.gate.noise, cosine block<i>.gate.proj; "
                         "--set gate_dim=D sets cosine's d, default M)")
    ap.add_argument("--cosine-tau", type=float,
                    help="cosine's temperature τ > 0 (moe.gate's tau; "
                         "default: none written, the dialect's 0.07)")
    ap.add_argument("--normalize", action="store_true",
                    help="renormalise the kept top-k weights")
    ap.add_argument("--postnorm", action="store_true",
                    help="post-norm blocks (BERT): x = norm(x + f(x)) after "
                         "each sublayer, no pre-norms, no final norm")
    add_attention_arguments(ap)
    ap.add_argument("-o", "--output", help="output file (default stdout)")
    args = ap.parse_args(argv)
    if args.list:
        for c in PRESETS.values():
            print(f"{c.name:22s} L={c.layers} B={c.batch} N={c.seq} "
                  f"M={c.embed} H={c.hidden} E/P={c.experts_per_rank} "
                  f"k={c.top_k} f={c.capacity_factor or 'dropless'}  {c.note}")
        return 0
    if args.preset not in PRESETS:
        ap.error(f"unknown preset {args.preset!r}; --list shows the presets")
    cfg = PRESETS[args.preset]
    if args.layers is not None:
        if args.layers < 1:
            ap.error("--layers must be >= 1")
        cfg = replace(cfg, layers=args.layers)
    if args.experts_per_rank is not None:
        if args.experts_per_rank < 1:
            ap.error("--experts-per-rank must be >= 1")
        cfg = replace(cfg, experts_per_rank=args.experts_per_rank)
    if args.grid:
        try:
            nodes, gpus = (int(v) for v in args.grid.lower().split("x"))
            assert nodes > 0 and gpus > 0
        except (ValueError, AssertionError):
            ap.error(f"--grid must be NODESxGPUS with positive sizes, "
                     f"got {args.grid!r}")
        cfg = replace(cfg, grid=(nodes, gpus))
    settable = {"batch", "seq", "embed", "hidden", "top_k", "head_dim",
                "vocab", "kv_heads", "gate_dim", "positions"}
    for item in args.set:
        field_name, _, value = item.partition("=")
        if field_name not in settable or not value.isdigit() or int(value) < 1:
            ap.error(f"--set {item!r}: expected FIELD=N with N >= 1 and "
                     f"FIELD one of {', '.join(sorted(settable))}")
        cfg = replace(cfg, **{field_name: int(value)})
    if args.capacity_factor is not None:
        if args.capacity_factor == "dropless":
            cfg = replace(cfg, capacity_factor=None)
        else:
            try:
                f = float(args.capacity_factor)
                assert f > 0
            except (ValueError, AssertionError):
                ap.error("--capacity-factor must be a positive number or "
                         "'dropless'")
            cfg = replace(cfg, capacity_factor=f)
    cfg = apply_attention_arguments(ap, args, cfg)
    if args.gate:
        cfg = replace(cfg, gate=args.gate)
    if args.normalize:
        cfg = replace(cfg, normalize=True)
    if args.postnorm:
        cfg = replace(cfg, postnorm=True)
    explicit = {item.partition("=")[0] for item in args.set}
    if cfg.positions and cfg.positions < cfg.seq and \
            "positions" not in explicit:
        # A preset's table grows with --set seq (a longer-context variant);
        # an explicit --set positions must cover the sequence itself.
        cfg = replace(cfg, positions=cfg.seq)
    if cfg.positions and cfg.positions < cfg.seq:
        ap.error(f"positions {cfg.positions} must cover the sequence length "
                 f"{cfg.seq}")
    if cfg.normalize and cfg.gate not in ("softmax_topk", "noisy_topk"):
        ap.error(f"--normalize applies to softmax_topk and noisy_topk gates "
                 f"only (the dialect's rule), not {cfg.gate}")
    if args.cosine_tau is not None:
        if cfg.gate != "cosine":
            ap.error("--cosine-tau applies to the cosine gate only (the "
                     "dialect's rule)")
        if not args.cosine_tau > 0:
            ap.error(f"--cosine-tau must be positive, got {args.cosine_tau}")
        cfg = replace(cfg, cosine_tau=args.cosine_tau)
    if cfg.gate == "expert_choice":
        # Each expert picks C = ceil(f*k*B*N/E) of the B*N tokens.
        if cfg.capacity_factor is None:
            ap.error("--gate expert_choice needs a capacity factor (each "
                     "expert picks C tokens; it is never dropless)")
        if cfg.capacity > cfg.batch * cfg.seq:
            ap.error(f"--gate expert_choice: capacity C = {cfg.capacity} "
                     f"exceeds the {cfg.batch * cfg.seq} tokens an expert "
                     f"can pick (lower --capacity-factor)")
    if cfg.embed % cfg.head_dim:
        ap.error(f"embed {cfg.embed} is not a multiple of head_dim "
                 f"{cfg.head_dim}")
    if cfg.top_k > cfg.experts:
        ap.error(f"top_k {cfg.top_k} exceeds {cfg.experts} experts")
    text = write(cfg)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
