#!/usr/bin/python3
"""One rank of the plain PyTorch baseline of bench/vs_pytorch.py: the example
trainer's model (examples/trainer/make_model.py build_model, the same
weights as its ONNX file) trained data-parallel over torch.distributed
(gloo) the way a user without an MoE library writes it: every rank holds
the whole model, all experts local (HF Mixtral's dropless loop over
experts); loss.backward(), one all_reduce of the flattened gradients
(DDP's bucket), SGD. Data: moe-run --data's byte windows
(python/torch_moe_peer.py text_batch), so step 1's loss equals moe-run's.

Launched by mpirun; prints "step S loss L" and "step S us T" (the step's
wall time on rank 0, forward to update, in microseconds).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "trainer"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from make_model import build_model  # noqa: E402
from torch_moe_peer import text_batch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--h", type=int, required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = build_model(args.m, args.h)
    params = list(model.parameters())
    text = open(args.data, "rb").read()
    for step in range(1, args.steps + 1):
        tokens, labels = text_batch(text, step - 1, world, rank, args.batch,
                                    args.seq)
        start = time.perf_counter()
        loss = model(tokens, labels)
        (loss / world).backward()
        flat = torch._utils._flatten_dense_tensors([p.grad for p in params])
        dist.all_reduce(flat)
        with torch.no_grad():
            for p, g in zip(params, torch._utils._unflatten_dense_tensors(
                    flat, [p.grad for p in params])):
                p -= args.lr * g
                p.grad = None
        elapsed = time.perf_counter() - start
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {float(total) / world:.6f}")
            print(f"step {step} us {elapsed * 1e6:.0f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
