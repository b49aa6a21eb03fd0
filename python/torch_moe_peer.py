#!/usr/bin/python3
"""A plain PyTorch peer of moe-run: the same MoE model trained with a
data-parallel + expert-parallel step over torch.distributed (gloo), written
the way a PyTorch user writes one (DeepSpeed-MoE / fairseq style):

- every rank holds the replicated weights (embedding, attention, norms,
  gate, LM head) and its E/P experts;
- the router picks top-k experts per token; tokens are sorted by expert
  and sent to the experts' ranks with one variable-count
  all_to_all_single (no capacity padding), each rank runs its local
  experts on what it received, and a second all-to-all brings the outputs
  back, weighted and summed per token; autograd runs the reverse
  all-to-alls in backward;
- the loss is the mean over ranks (each rank backpropagates its own mean
  token loss / P), the replicated gradients are summed by one all_reduce
  of a flattened bucket, and SGD updates every parameter.

No overlap of communication with computation beyond what gloo does
itself: this is the baseline a user gets without a scheduler. Numerics
are those of python/torch_reference.py (whose attention, norms and gates
it reuses), in float32.

Launched by mpirun (ranks from OMPI_COMM_WORLD_RANK / _SIZE, or RANK /
WORLD_SIZE), the rendezvous at MASTER_ADDR:MASTER_PORT (default
127.0.0.1:29500; scripts/emulated-cluster.sh mpirun sets MASTER_ADDR to
the first node and GLOO_SOCKET_IFNAME to the nodes' NIC):

  mpirun -np 4 /usr/bin/python3 python/torch_moe_peer.py mixtral-style-2block \\
      --set vocab=256 --set batch=4 --set seq=64 \\
      --inputs DUMP --data examples/data/moe-notes.txt --steps 10 --lr 0.01

--inputs PREFIX reads each rank's parameters (and, without --data, token
ids and labels) from `moe-run --dump-inputs PREFIX`, so the peer starts
from moe-run's weights; --data TEXT reads byte windows exactly as
`moe-run --data` does (runtime/include/moe_rt/text_data.h), so both print
the same loss lines ("step s loss L", the mean over ranks) for the same
step, weights, data and learning rate. Token-choice routing without drops
only (dropless models, or a capacity no expert reaches): the peer has no
capacity logic, like python/torch_reference.py.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_model_mlir as gen  # noqa: E402
import torch_reference as ref  # noqa: E402  (exits without torch)
from reference_check import load_inputs  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


class AllToAll(torch.autograd.Function):
    """Variable-count all-to-all of rows; backward sends the gradients back
    along the same routes."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits):
        ctx.splits = (out_splits, in_splits)
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None


def exchange_counts(send):
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    return recv


def moe_sublayer(c, p, pre, x, rank, world):
    """Expert-parallel MoE layer on this rank's x (B x N x M)."""
    b, n, m = x.shape
    xf = x.reshape(-1, m)
    w, idx = ref.route(c, p, pre, x)
    experts_local = c.experts_per_rank
    e = idx.reshape(-1)
    tok = torch.arange(xf.shape[0]).repeat_interleave(c.top_k)
    order = torch.argsort(e, stable=True)  # grouped by expert, so by rank
    e_sorted, tok_sorted = e[order], tok[order]
    if c.capacity_factor is not None:
        load = torch.bincount(e, minlength=c.experts)
        if int(load.max()) > c.capacity:
            sys.exit(f"error: {pre}: expert {int(load.argmax())} gets "
                     f"{int(load.max())} tokens on rank {rank}, over its "
                     f"capacity {c.capacity}: moe-run drops tokens the peer "
                     f"keeps (use a larger --capacity-factor)")
    send = torch.bincount(e_sorted // experts_local, minlength=world)
    recv = exchange_counts(send)
    send_l, recv_l = send.tolist(), recv.tolist()
    x_in = AllToAll.apply(xf[tok_sorted], recv_l, send_l)
    e_in = torch.empty(sum(recv_l), dtype=e_sorted.dtype)
    dist.all_to_all_single(e_in, e_sorted, recv_l, send_l)
    y = torch.zeros_like(x_in)
    for j in range(experts_local):
        sel = (e_in == rank * experts_local + j).nonzero().squeeze(1)
        if sel.numel():
            y = y.index_add(0, sel, ref.expert_ffn(c, p, pre, j, x_in[sel]))
    y_back = AllToAll.apply(y, send_l, recv_l)
    out = torch.zeros_like(xf).index_add(
        0, tok_sorted, y_back * w.reshape(-1)[order, None])
    return out.reshape(b, n, m)


def local_loss(c, p, tokens, labels, rank, world):
    h = p["embed.table"][tokens]
    for l in range(c.layers):
        pre = f"block{l}"
        h1 = ref.attention_sublayer(c, p, pre, h)
        x = ref.norm(c, h1, p[f"{pre}.moe_norm.scale"],
                     p.get(f"{pre}.moe_norm.bias"))
        h = h1 + moe_sublayer(c, p, pre, x, rank, world)
    return ref.lm_loss(c, p, h, labels)


def text_batch(text, step, world, rank, samples, seq):
    """moe_rt/text_data.h's windows: token ids and labels of `rank` at
    `step` (0 for the first)."""
    windows = (len(text) - 1) // seq
    if windows < 1:
        sys.exit(f"error: the text is shorter than one sequence ({seq + 1} bytes)")
    rows = [((step * world + rank) * samples + i) % windows
            for i in range(samples)]
    ids = torch.tensor([list(text[w * seq:w * seq + seq + 1]) for w in rows])
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def sgd_step(params, expert_keys, lr, world):
    """Sums the replicated gradients over ranks (one flattened bucket, as
    DDP's), then p -= lr * grad for every parameter."""
    dense = [v for k, v in params.items() if k not in expert_keys]
    flat = torch._utils._flatten_dense_tensors([v.grad for v in dense])
    dist.all_reduce(flat)
    for v, g in zip(dense, torch._utils._unflatten_dense_tensors(
            flat, [v.grad for v in dense])):
        v.grad.copy_(g)
    with torch.no_grad():
        for v in params.values():
            v -= lr * v.grad
            v.grad = None


def config(args):
    """The model from gen_model_mlir's preset and its own override options
    (the bench passes the peer what it passed the generator)."""
    c = gen.PRESETS[args.preset]
    overrides = {k: int(v) for k, v in (s.split("=") for s in args.set)}
    if args.grid:
        overrides["grid"] = tuple(int(v) for v in args.grid.lower().split("x"))
    if args.layers:
        overrides["layers"] = args.layers
    if args.experts_per_rank:
        overrides["experts_per_rank"] = args.experts_per_rank
    if args.capacity_factor is not None:
        overrides["capacity_factor"] = (
            None if args.capacity_factor == "dropless"
            else float(args.capacity_factor))
    c = gen.replace(c, **overrides)
    if c.gate not in ("softmax_topk", "noisy_topk", "sigmoid", "cosine"):
        sys.exit(f"error: the peer routes token-choice gates, not {c.gate}")
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("preset", choices=sorted(gen.PRESETS))
    ap.add_argument("--set", action="append", default=[],
                    help="a preset field override, e.g. vocab=256")
    ap.add_argument("--grid", help="nodes x ranks per node (default: the "
                    "preset's)")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--experts-per-rank", type=int)
    ap.add_argument("--capacity-factor",
                    help="f (a number, or 'dropless'): the peer keeps every "
                         "token and stops if an expert gets more than its "
                         "capacity, which the runtime would drop")
    ap.add_argument("--inputs", required=True,
                    help="moe-run --dump-inputs PREFIX: parameters (and tokens)")
    ap.add_argument("--data", help="a text file: byte windows as moe-run --data")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--seed", type=int, default=ref.BASE_SEED,
                    help="moe-run's --seed (noisy_topk noise)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads per rank (default 1: the "
                         "ranks are the parallelism, as OPENBLAS_NUM_THREADS=1 "
                         "for moe-run)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be positive")
    c = config(args)
    torch.set_num_threads(args.threads)

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE",
                               os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if world != c.ranks:
        sys.exit(f"error: {world} ranks, but the model's grid "
                 f"{c.grid[0]}x{c.grid[1]} has {c.ranks} (--set or the preset)")
    path = f"{args.inputs}.rank{rank}"
    try:
        inputs = load_inputs(path)
    except OSError as e:
        sys.exit(f"error: cannot read --inputs '{path}': {e.strerror}")
    dist.init_process_group("gloo", rank=rank, world_size=world)

    params = {k: v.float().requires_grad_(True)
              for k, v in inputs.items() if not k.startswith("arg")}
    expert_keys = {k for k in params if ".experts." in k}
    for k in expert_keys:
        if params[k].shape[0] != c.experts_per_rank:
            sys.exit(f"error: {path} holds {params[k].shape[0]} experts in {k}, "
                     f"the configuration {c.experts_per_rank} per rank")
    text = open(args.data, "rb").read() if args.data else None
    if text is None:
        tokens, labels = inputs["arg0"].long(), inputs["arg1"].long()
    for step in range(1, args.steps + 1):
        if text is not None:
            tokens, labels = text_batch(text, step - 1, world, rank,
                                        c.batch, c.seq)
        ref.NOISE_SEED = ref.step_seed(args.seed, step)
        loss = local_loss(c, params, tokens, labels, rank, world)
        (loss / world).backward()
        sgd_step(params, expert_keys, args.lr, world)
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {float(total) / world:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
