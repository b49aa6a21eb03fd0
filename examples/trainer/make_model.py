#!/usr/bin/python3
"""The example trainer's model: a byte-level Mixtral-style MoE language
model (2 blocks, 8 experts, top-2, SwiGLU experts, RMSNorm, rotary GQA
attention, vocab 256 = bytes) written in PyTorch and exported to ONNX with
its loss. Its weights are the ONNX file's initializers; moe-run starts from
them. Deterministic (seed 0). Run with Debian's /usr/bin/python3.

  make_model.py -o byte-moe.onnx [--batch 4] [--seq 64] [--m 64] [--h 128]

build_model() is the same model in PyTorch (bench/vs_pytorch.py trains it
as a plain PyTorch step from the same weights).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python", "onnx_models"))
import torch  # noqa: E402
from torch_models import Block, HandAttention, MixtralMoe, Model  # noqa: E402

VOCAB, M, H, E, K, HEADS, KV_HEADS, BLOCKS = 256, 64, 128, 8, 2, 4, 2, 2


def build_model(m=M, h=H):
    """The model with its weights (seed 0): what main() exports."""
    torch.manual_seed(0)
    # KV heads repeated as HF's repeat_kv does (expand + reshape): torch
    # 1.13 exports repeat_interleave as a Reshape that computes something
    # else (ONNX Runtime rejects the file; the importer refuses it).
    blocks = [Block("rms", m, HandAttention(m, HEADS, KV_HEADS, rotary=True,
                                            repeat="expand"),
                    MixtralMoe(m, h, E, K)) for _ in range(BLOCKS)]
    return Model(VOCAB, m, "rms", blocks, loss=True).eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--batch", type=int, default=4, help="samples per rank")
    ap.add_argument("--seq", type=int, default=64, help="bytes per sample")
    ap.add_argument("--m", type=int, default=M, help="model width")
    ap.add_argument("--h", type=int, default=H, help="expert hidden width")
    args = ap.parse_args()
    model = build_model(args.m, args.h)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq))
    labels = torch.randint(0, VOCAB, (args.batch, args.seq))
    with torch.no_grad():
        torch.onnx.export(model, (tokens, labels), args.output,
                          input_names=["tokens", "labels"],
                          output_names=["loss"], opset_version=17,
                          do_constant_folding=False)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: {BLOCKS} blocks, {E} experts, top-{K}, M {args.m}, H {args.h}, "
          f"vocab {VOCAB}, {params} parameters")


if __name__ == "__main__":
    main()
