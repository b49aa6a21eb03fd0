#!/usr/bin/python3
"""Check a trained model exported by moe-export-onnx against the run that
trained it, with two independent references.

moe-run resumed from the exported checkpoint for one step and wrote what
each rank started from (--dump-inputs: tokens, labels and the trained
parameters) and that step's loss (--dump). On each rank's tokens this
script checks:
  1. weights: every parameter read from the exported file as the importer
     maps it (the step's moe.source, --ir) equals the trained value moe-run
     started from (every expert of every rank);
  2. ONNX Runtime on the exported file: its loss (from its logits when the
     file outputs logits) equals moe-run's loss on that rank;
  3. PyTorch: the original module (torch_models.py <style>, or
     hf_models.py for hf-<family>) with its state_dict loaded from the
     exported initializers by name: its loss equals moe-run's, and its
     logits equal ONNX Runtime's, value by value.

  check_export.py gshard --onnx trained.onnx --ir imported.mlir \\
      --inputs IN --results OUT --ranks 2

Prints "PASS export (...)" or "FAIL export (...)" with what differs; exit
status 0 / 1. Run with /usr/bin/python3 (Debian's torch, onnx); .pydeps/
supplies onnxruntime and transformers.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

import compare_dumps  # noqa: E402
from check_import_numerics import apply, parse_sources  # noqa: E402
from reference_check import Tally, load_inputs  # noqa: E402
from validate_import import OrtModel, cross_entropy, ort  # noqa: E402


def build_module(style, theta):
    """(module, logits(tokens) function) of the original PyTorch model."""
    if style.startswith("hf-"):
        import hf_models
        model = hf_models.build(style[3:], theta)[0]
        return model, lambda t: model.lm(input_ids=t).logits
    import torch_models
    model = torch_models.build(style, True)[0].eval()

    def logits(t):
        model.loss = False
        try:
            return model(t)
        finally:
            model.loss = True
    return model, logits


def load_initializers(model, inits):
    """Copies every parameter and buffer the file has (by state_dict name)
    into `model`; returns the parameters the file lacks."""
    state = model.state_dict()
    for name in state:
        if name in inits:
            if tuple(inits[name].shape) != tuple(state[name].shape):
                sys.exit(f"FAIL export: initializer '{name}' is "
                         f"{list(inits[name].shape)}, the module's "
                         f"{list(state[name].shape)}")
            state[name] = inits[name].to(state[name].dtype)
    model.load_state_dict(state)
    return [n for n, _ in model.named_parameters() if n not in inits]


class OrtLogits(OrtModel):
    """The exported file under ONNX Runtime, with its logits as an output
    (a file that outputs the loss gets the input of its
    SoftmaxCrossEntropyLoss added as one)."""

    def __init__(self, path):
        super().__init__(path)
        self.logits_name = self.output.name
        ce = [n for n in self.model.graph.node
              if n.op_type == "SoftmaxCrossEntropyLoss"]
        if ce:
            self.logits_name = ce[0].input[0]
            self.model.graph.output.append(helper.make_tensor_value_info(
                self.logits_name, TensorProto.FLOAT, None))
            self.session = ort.InferenceSession(
                self.model.SerializeToString(),
                providers=["CPUExecutionProvider"])

    def run(self, tokens, labels):
        """(loss, logits [tokens, vocab])."""
        feeds = {}
        for i in self.inputs:
            dtype = np.int32 if "int32" in i.type else np.int64
            feeds[i.name] = (tokens if not feeds else labels).astype(dtype)
        out, logits = self.session.run(
            [self.output.name, self.logits_name], feeds)
        logits = logits.reshape(-1, logits.shape[-1])
        if out.size == 1:
            return float(out.reshape(-1)[0]), logits
        return cross_entropy(logits, labels.astype(np.int64)), logits


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("style")
    ap.add_argument("--onnx", required=True, help="the exported file")
    ap.add_argument("--ir", required=True,
                    help="the imported IR, for its moe.source attributes")
    ap.add_argument("--inputs", required=True,
                    help="moe-run --dump-inputs prefix (<p>.rank<r>)")
    ap.add_argument("--results", required=True,
                    help="moe-run --dump prefix (its loss)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--theta", type=float, default=10000.0,
                    help="hf-* styles: the rope_theta of the export")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-6)
    args = ap.parse_args()

    with open(args.ir) as f:
        sources = parse_sources(f.read())
    inputs = [load_inputs(f"{args.inputs}.rank{r}") for r in range(args.ranks)]
    losses = [compare_dumps.load_file(f"{args.results}.rank{r}")["loss"][0]
              for r in range(args.ranks)]
    ref = OrtLogits(args.onnx)
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in ref.model.graph.initializer}

    # 1. The trained values, read back as the importer maps them: exact
    # (the dumps' %.9g round-trips float32).
    exact = Tally(0.0, 1e-30, explain=True)
    params = [k for k in inputs[0] if k in sources]
    if not params:
        sys.exit(f"FAIL export: no parameter of {args.inputs}.rank0 has a "
                 f"moe.source in {args.ir}")
    for k in params:
        whole = apply(sources[k], inits)
        for r in range(args.ranks):
            local = inputs[r][k].shape[0]
            mine = whole
            if ".experts." in k and whole.shape[0] != local:
                mine = whole[r * local:(r + 1) * local]
            exact.check(f"weight {k} (rank {r})", mine.float(),
                        inputs[r][k].float())

    # 2 and 3: ONNX Runtime and PyTorch on each rank's tokens.
    model, logits_of = build_module(args.style, args.theta)
    missing = load_initializers(model, inits)
    tally = Tally(args.rtol, args.atol, explain=True)
    # Logits are sums of M products, accumulated in another order by ONNX
    # Runtime than by PyTorch: fp32 rounding of ~1e-6 absolute on values
    # near 0, so atol 1e-5 for them (rtol stays 1e-5).
    logit_tally = Tally(args.rtol, max(args.atol, 1e-5), explain=True)
    worst = 0.0
    with torch.no_grad():
        for r in range(args.ranks):
            tokens = inputs[r]["arg0"].long()
            labels = inputs[r]["arg1"].long()
            ort_loss, ort_logits = ref.run(tokens.numpy(), labels.numpy())
            torch_logits = logits_of(tokens).reshape(ort_logits.shape)
            torch_loss = float(torch.nn.functional.cross_entropy(
                torch_logits, labels.reshape(-1)))
            tally.check(f"ONNX Runtime loss (rank {r})",
                        torch.tensor([losses[r]]), [ort_loss])
            tally.check(f"PyTorch loss (rank {r})",
                        torch.tensor([losses[r]]), [torch_loss])
            logit_tally.check(f"PyTorch logits vs ONNX Runtime's (rank {r})",
                        torch.from_numpy(ort_logits), torch_logits)
            worst = max(worst, abs(ort_loss - losses[r]),
                        abs(torch_loss - losses[r]))
    bad = exact.bad or tally.bad or logit_tally.bad or missing
    verdict = "FAIL" if bad else "PASS"
    print(f"{verdict} export ({args.style}, {args.ranks} ranks): weights "
          f"{exact.summary()}; losses {tally.summary()}; logits "
          f"{logit_tally.summary()}; loss max|Δ| vs moe-run {worst:.3g}"
          + (f"; parameters not in the file: {missing}" if missing else ""))
    for r in range(args.ranks):
        print(f"  rank {r}: moe-run loss {losses[r]:.7f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
