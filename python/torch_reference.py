#!/usr/bin/env python3
"""PyTorch reference for one training step of a generated MoE model.

Reads the inputs every rank of `moe-run --dump-inputs` used (parameters,
token ids, labels) and the results of `moe-run --dump` (loss and updated
parameters), recomputes the same step with PyTorch autograd in float64 —
the whole model over all ranks' data at once: replicated weights shared,
each rank's experts concatenated into the global expert set, the loss the
mean over ranks, one SGD step — and compares. Run with Debian's
/usr/bin/python3 (python3-torch).

The model is rebuilt from the generator's preset and overrides, so the
reference does not read the compiler's IR: attention (MHA/GQA, causal,
rotary with its base and layout, Q/K/V/O biases, layer/RMS pre-norm),
residuals, learned absolute positions (--set positions=P), post-norm blocks
(--postnorm), the gate of every token-choice kind (softmax_topk, noisy_topk with the
runtime's noise: fresh per step from --seed, different per sample; sigmoid,
cosine with its τ; optionally renormalised), experts, final norm, LM head,
mean token cross-entropy. --steps N repeats the step N times (the update
between: plain SGD, or torch.optim.AdamW / SGD with momentum,
clip_grad_norm_ and the learning-rate schedule: torch_optim_reference.py,
whose optimizer state is compared too), as moe-run --steps N does from the
same inputs. Token-choice routing must drop no token
(capacity factor of at least E/k), which keeps the reference free of
capacity logic.

expert_choice (Zhou et al. 2022): S = softmax(x·W) over the experts of
each token; every expert takes the C tokens of the rank's B x N with the
largest S[:, e] (ties: the lower token id) and weights its output by
that S; a token gets the sum over the experts that picked it (0 if none
did). The selection runs over the tokens of one gate call, so with
moe-microbatch's R micro-batches it runs per micro-batch (B/R samples,
capacity ceil(f*k*(B/R)*N/E)): pass the step's R as --micro-batches to
reproduce it (R = 2 is not the same model as R = 1 for expert choice).

  torch_reference.py --inputs PREFIX --results PREFIX --ranks 4 --lr 1.0 \
      gpt-moe-2block [--capacity-factor 4.0] [--set seq=16] \
      [--micro-batches R] ...
"""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_dumps  # noqa: E402
import gen_model_mlir as gen  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("error: needs PyTorch (Debian: python3-torch; run with "
             "/usr/bin/python3)")
from reference_check import Tally, add_run_arguments, load_inputs  # noqa: E402
import torch_optim_reference as optim  # noqa: E402


def load_results(path):
    return {name: torch.tensor(data, dtype=torch.float64)
            for name, data in compare_dumps.load_file(path).items()}


def rotary(x, theta=10000.0, layout="rotate_half"):
    # x: B x N x heads x D; lane pair j turns by pos * theta^(-2j/D): pairs
    # (j, j + D/2) (rotate-half) or (2j, 2j + 1) (interleaved).
    b, n, h, d = x.shape
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    freq = theta ** (-2.0 * i / d)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * freq[None, :]
    # Angles in float64, applied in x's precision (the peer runs float32).
    cos = angle.cos()[None, :, None, :].to(x.dtype)
    sin = angle.sin()[None, :, None, :].to(x.dtype)
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin],
                           -1).reshape(b, n, h, d)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def norm(c, x, scale, bias):
    if c.norm == "rms":
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * scale
    return F.layer_norm(x, (x.shape[-1],), scale, bias, 1e-5)


def act(c, x):
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[c.activation](x)


# The runtime's constants for the gate kinds (runtime/include/moe_rt/ops.h:
# MOE_RT_GATE_COSINE_TAU, cosine's τ when moe.gate has no `tau`) and
# moe-run's default --seed, the base of noisy_topk's per-step seeds.
BASE_SEED = 1
COSINE_TAU = 0.07
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
# noisy_topk's seed of the step being computed (set per step in main).
NOISE_SEED = None
SHARED_SAMPLE_NOISE = False


def mix64(z):
    """splitmix64's finaliser, as kernels/Gates.h's mix64."""
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def step_seed(base, step):
    """moe_rt_gate_step_seed: the noise seed of training step `step`."""
    return mix64(mix64(base) ^ step)


def gate_noise(seed, batch, seq, experts):
    """noisy_topk's N(0,1) noise, batch x seq x experts: a function of
    (seed, sample, sequence position, expert) only, bit for bit the
    runtime's noiseFor (sample b's seed is splitmix64's seed + b·gamma)."""
    out = torch.empty(batch, seq, experts, dtype=torch.float64)
    for b in range(batch):
        # --shared-sample-noise: every sample draws sample 0's noise (the
        # runtime's old behaviour), for tests that must then disagree.
        sample_seed = seed if SHARED_SAMPLE_NOISE else \
            (seed + b * GOLDEN) & MASK64
        for pos in range(seq):
            h = mix64(mix64(sample_seed) ^ pos)
            for e in range(experts):
                a = mix64(h ^ (e * 2 + 1))
                u = mix64(a)
                u1 = ((a >> 11) + 1) * 2.0 ** -53
                u2 = (u >> 11) * 2.0 ** -53
                out[b, pos, e] = math.sqrt(-2.0 * math.log(u1)) * \
                    math.cos(6.283185307179586 * u2)
    return out


def route(c, p, pre, x):
    """moe.gate of kind c.gate on x (B x N x M): top-k weights and experts."""
    wg = p[f"{pre}.gate.weight"]
    if c.gate == "softmax_topk":
        scores = (x @ wg).softmax(-1)
    elif c.gate == "noisy_topk":
        noise = gate_noise(NOISE_SEED, x.shape[0], x.shape[1], wg.shape[1])
        h = x @ wg + noise * F.softplus(x @ p[f"{pre}.gate.noise"])
        scores = h.softmax(-1)
    elif c.gate == "sigmoid":
        scores = torch.sigmoid(x @ wg)
    elif c.gate == "cosine":
        hp = F.normalize(x @ p[f"{pre}.gate.proj"], dim=-1, eps=1e-12)
        cos = hp @ F.normalize(wg, dim=0, eps=1e-12)
        scores = (cos / (c.cosine_tau or COSINE_TAU)).softmax(-1)
    else:
        sys.exit(f"error: the reference has no {c.gate} gate")
    w, idx = scores.topk(c.top_k, dim=-1)
    if c.normalize:
        w = w / w.sum(-1, keepdim=True)
    return w, idx


def expert_ffn(c, p, pre, e, x):
    """Expert e's FFN on x (... x M)."""
    up, down = p[f"{pre}.experts.up"][e], p[f"{pre}.experts.down"][e]
    gate = p.get(f"{pre}.experts.gate")
    if gate is not None:
        hid = act(c, x @ gate[e]) * (x @ up)
    else:
        hid = act(c, x @ up)
    return hid @ down


def expert_choice(c, p, pre, x, micro):
    """The expert-choice MoE sublayer on x (B x N x M), its selection made
    per micro-batch of B / micro samples (the runtime's gate calls)."""
    b, n, m = x.shape
    cap = gen.replace(c, batch=b // micro).capacity
    wg = p[f"{pre}.gate.weight"]
    outs = []
    for xm in x.chunk(micro, 0):
        xf = xm.reshape(-1, m)
        scores = (xf @ wg).softmax(-1)  # T x E
        out = torch.zeros_like(xf)
        for e in range(scores.shape[1]):
            # Stable descending sort: equal scores keep the lower token id.
            pick = torch.sort(scores[:, e].detach(), descending=True,
                              stable=True).indices[:cap]
            y = expert_ffn(c, p, pre, e, xf[pick])
            out = out.index_add(0, pick, scores[pick, e][:, None] * y)
        outs.append(out.reshape(xm.shape))
    return torch.cat(outs, 0)


def postnorm(c, p, name, x):
    """A post-norm block's norm `name` (attn_postnorm, ffn_postnorm) of x,
    or x itself in a pre-norm model."""
    if not c.postnorm:
        return x
    return norm(c, x, p[f"{name}.scale"], p.get(f"{name}.bias"))


def attention_sublayer(c, p, pre, h):
    """Block `pre`'s attention with its residual: h + attn(norm(h)), or
    norm(h + attn(h)) post-norm (h: B x N x M). Shared with
    python/torch_moe_peer.py."""
    kv = c.kv_heads or c.heads
    b, n, _ = h.shape
    if c.postnorm:
        xn = h
    else:
        xn = norm(c, h, p[f"{pre}.attn_norm.scale"],
                  p.get(f"{pre}.attn_norm.bias"))
    def proj(w, bias):
        y = xn @ p[f"{pre}.attn.{w}"]
        return y + p[f"{pre}.attn.{bias}"] if c.attn_bias else y
    q = proj("wq", "bq").view(b, n, c.heads, c.head_dim)
    k = proj("wk", "bk").view(b, n, kv, c.head_dim)
    v = proj("wv", "bv").view(b, n, kv, c.head_dim)
    if c.rotary:
        q = rotary(q, c.rope_theta, c.rope_layout)
        k = rotary(k, c.rope_theta, c.rope_layout)
    rep = c.heads // kv
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / c.head_dim ** 0.5
    if c.causal:
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        scores = scores.masked_fill(mask, float("-inf"))
    att = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v)
    out = att.reshape(b, n, -1) @ p[f"{pre}.attn.wo"]
    out = out + p[f"{pre}.attn.bo"] if c.attn_bias else out
    return postnorm(c, p, f"{pre}.attn_postnorm", h + out)


def lm_loss(c, p, h, labels):
    """Final norm (none post-norm), LM head and the mean token
    cross-entropy."""
    hf = h if c.postnorm else norm(c, h, p["final_norm.scale"],
                                   p.get("final_norm.bias"))
    logits = hf @ p["lm_head.weight"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           labels.reshape(-1))


# When a list, step_loss appends (block, indices B x N x k) of every
# token-choice gate: --routing-trace compares them with a recorded trace.
ROUTES = None


def read_trace_records(path):
    """The records of a routing trace (docs/routing-trace-format.md) as
    {(step, micro, block): rows of counts}."""
    records, lines = {}, open(path).read().split("\n")
    i = 0
    while i < len(lines):
        words = lines[i].split()
        i += 1
        if words[:1] == ["record"]:
            key = (int(words[3]), int(words[5]), int(words[7]))
            i += 1  # sample-ranks: the data loader's, as the reference's
            rows = []
            while i < len(lines) and lines[i].split() and \
                    lines[i].split()[0].isdigit():
                rows.append([int(v) for v in lines[i].split()])
                i += 1
            records[key] = rows
    return records


def check_routing_trace(path, routes, experts, micro_batches):
    """Step 1's per-sample expert counts of every block and micro-batch,
    from the reference's own top-k, against the trace: exact equality.
    Trace sample j*(B/R) + b of micro-batch r is sample r*(B/R) + b of
    rank j."""
    records = read_trace_records(path)
    matched = 0
    for (step, micro, block), rows in sorted(records.items()):
        if step != 1:
            continue
        want = []
        for rank_routes in routes:
            idx = dict(rank_routes)[block]
            per = idx.shape[0] // micro_batches
            for b in range(micro * per, (micro + 1) * per):
                counts = torch.bincount(idx[b].reshape(-1),
                                        minlength=experts)
                want.append([int(v) for v in counts])
        if want != rows:
            print(f"routing trace: record (step 1, micro {micro}, block "
                  f"{block}) differs from the reference's routing")
            return 1
        matched += 1
    print(f"routing trace: {matched} records of step 1 match the "
          f"reference's routing")
    return 0 if matched else 1


def step_loss(c, p, tokens, labels, micro=1):
    h = p["embed.table"][tokens]
    if c.positions:  # row n of the table to token n of every sample
        h = h + p["embed.positions"][:tokens.shape[1]]
    for l in range(c.layers):
        pre = f"block{l}"
        h1 = attention_sublayer(c, p, pre, h)
        x = h1 if c.postnorm else norm(c, h1, p[f"{pre}.moe_norm.scale"],
                                       p.get(f"{pre}.moe_norm.bias"))
        if c.gate == "expert_choice":
            h = postnorm(c, p, f"{pre}.ffn_postnorm",
                         h1 + expert_choice(c, p, pre, x, micro))
            continue
        w, idx = route(c, p, pre, x)
        if ROUTES is not None:
            ROUTES.append((l, idx.detach()))
        up, down = p[f"{pre}.experts.up"], p[f"{pre}.experts.down"]
        gate = p.get(f"{pre}.experts.gate")
        out = torch.zeros_like(x)
        for j in range(c.top_k):
            e = idx[..., j]
            hid = torch.einsum("bnm,bnmh->bnh", x, up[e])
            if gate is not None:
                hid = act(c, torch.einsum("bnm,bnmh->bnh", x, gate[e])) * hid
            else:
                hid = act(c, hid)
            out = out + w[..., j:j + 1] * torch.einsum("bnh,bnhm->bnm", hid,
                                                        down[e])
        h = postnorm(c, p, f"{pre}.ffn_postnorm", h1 + out)
    return lm_loss(c, p, h, labels)


def main():
    global NOISE_SEED, SHARED_SAMPLE_NOISE, ROUTES
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("preset")
    add_run_arguments(ap)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--capacity-factor")
    ap.add_argument("--grid")
    ap.add_argument("--experts-per-rank", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--gate", choices=gen.GATE_KINDS)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--postnorm", action="store_true",
                    help="post-norm blocks (gen_model_mlir.py --postnorm)")
    ap.add_argument("--seed", type=int, default=BASE_SEED,
                    help="moe-run's --seed: step s's noisy_topk noise seed "
                         "is mix64(mix64(seed) ^ s) (default %(default)s)")
    ap.add_argument("--noise-seed", type=int,
                    help="noisy_topk's noise seed for every step instead "
                         "of the per-step seeds of --seed")
    ap.add_argument("--shared-sample-noise", action="store_true",
                    help="draw sample 0's noise for every sample (not the "
                         "runtime's noise: for tests that must fail)")
    ap.add_argument("--steps", type=int, default=1,
                    help="training steps from the dumped inputs (the same "
                         "token ids every step, as moe-run without --data); "
                         "the last step's loss and parameters are compared")
    optim.add_arguments(ap)
    ap.add_argument("--cosine-tau", type=float,
                    help="cosine's τ (gen_model_mlir.py --cosine-tau)")
    ap.add_argument("--micro-batches", type=int, default=1, metavar="R",
                    help="the step's micro-batch count (moe-microbatch's "
                         "degree): expert_choice then picks its top-C tokens "
                         "within each micro-batch (token choice without "
                         "drops does not depend on it)")
    ap.add_argument("--routing-trace", metavar="FILE",
                    help="also check that moe-run --routing-trace's step 1 "
                         "records equal the reference's per-sample expert "
                         "counts")
    gen.add_attention_arguments(ap)
    args = ap.parse_args()
    c = gen.apply_attention_arguments(ap, args, gen.PRESETS[args.preset])
    overrides = {k: int(v) for k, v in (s.split("=") for s in args.set)}
    if args.layers:
        overrides["layers"] = args.layers
    if args.experts_per_rank:
        overrides["experts_per_rank"] = args.experts_per_rank
    if args.gate:
        overrides["gate"] = args.gate
    if args.normalize:
        overrides["normalize"] = True
    if args.postnorm:
        overrides["postnorm"] = True
    if args.grid:
        # expert_choice's capacity counts the experts of the whole grid.
        overrides["grid"] = tuple(int(v) for v in args.grid.lower().split("x"))
    if args.capacity_factor is not None:
        overrides["capacity_factor"] = (
            None if args.capacity_factor == "dropless"
            else float(args.capacity_factor))
    if args.cosine_tau is not None:
        overrides["cosine_tau"] = args.cosine_tau
    c = gen.replace(c, **overrides)
    if args.steps < 1:
        ap.error("--steps must be positive")
    SHARED_SAMPLE_NOISE = args.shared_sample_noise
    if args.micro_batches < 1 or c.batch % args.micro_batches:
        ap.error(f"--micro-batches {args.micro_batches} must divide the "
                 f"batch {c.batch}")
    if c.gate == "expert_choice" and c.capacity_factor is None:
        ap.error("expert_choice needs --capacity-factor (its capacity C)")

    inputs = [load_inputs(f"{args.inputs}.rank{r}") for r in range(args.ranks)]
    results = [load_results(f"{args.results}.rank{r}") for r in range(args.ranks)]
    expert_keys = [k for k in inputs[0] if ".experts." in k]
    params = {}
    for k, v in inputs[0].items():
        if k.startswith("arg") or optim.is_step_state(k):
            continue
        params[k] = (torch.cat([inp[k] for inp in inputs], 0)
                     if k in expert_keys else v.clone())
        params[k].requires_grad_(True)
    ups = [k for k in params if k.endswith(".experts.up")]
    if c.gate == "expert_choice" and ups and \
            params[ups[0]].shape[0] != c.experts:
        sys.exit(f"error: the dumps hold {params[ups[0]].shape[0]} experts, "
                 f"the configuration {c.experts} (--grid, "
                 f"--experts-per-rank): expert_choice's capacity needs E")
    optimizer = optim.Optimizer(args, params)
    for step in range(1, args.steps + 1):
        if step > 1:  # the update, then the next step from its parameters
            optimizer.step()
        NOISE_SEED = (args.noise_seed if args.noise_seed is not None
                      else step_seed(args.seed, step))
        losses, routes = [], []
        for inp in inputs:
            ROUTES = [] if step == 1 else None
            losses.append(step_loss(c, params, inp["arg0"].long(),
                                    inp["arg1"].long(), args.micro_batches))
            routes.append(ROUTES)
        ROUTES = None
        if step == 1 and args.routing_trace and check_routing_trace(
                args.routing_trace, routes, c.experts, args.micro_batches):
            return 1
        loss = torch.stack(losses).mean()
        loss.backward()

    ours_loss = sum(float(r["loss"][0]) for r in results) / args.ranks
    tally = Tally(args.rtol, args.atol)
    check = tally.check
    check("loss", torch.tensor([float(loss)]), torch.tensor([ours_loss]))
    optimizer.step()
    with torch.no_grad():
        for k, updated in optimizer.updated_values().items():
            for r in range(args.ranks):
                if k.split(":")[0] in expert_keys:
                    per = updated.shape[0] // args.ranks
                    check(k, updated[r * per:(r + 1) * per],
                          results[r][optim.result_name(k)])
                else:
                    check(k, updated, results[r][optim.result_name(k)])
    print(f"pytorch reference: loss {float(loss):.6f} vs ours {ours_loss:.6f}; "
          f"{tally.summary()}")
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
