"""The update of the PyTorch references (python/torch_reference.py): the
optimizer a step was built with (moe-build-train-step's options,
docs/optimizers.md), run by torch itself — torch.optim.SGD or
torch.optim.AdamW, torch.nn.utils.clip_grad_norm_ and the learning-rate
schedule through torch.optim.lr_scheduler.LambdaLR — on the float64
parameters of the whole model (every rank's experts concatenated)."""
import math

import torch

# The optimizer state moe-build-train-step adds ("<param>.<slot>", torch's
# slot names) and the step inputs: not parameters.
STATE_SLOTS = ("exp_avg", "exp_avg_sq", "momentum_buffer")
STEP_INPUTS = ("lr", "step")


def is_step_state(name):
    return name in STEP_INPUTS or name.rsplit(".", 1)[-1] in STATE_SLOTS


def add_arguments(ap):
    """moe-build-train-step's optimizer options (--lr is the run's)."""
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip-norm", type=float, default=0.0)
    ap.add_argument("--lr-schedule", choices=("constant", "cosine"),
                    default="constant")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--total-steps", type=int, default=0)
    ap.add_argument("--min-lr", type=float, default=0.0)


def lr_at(args, t):
    """The rate of update t (1-based), written from the definition in
    docs/optimizers.md (not from the runtime's code)."""
    if args.lr_schedule == "constant":
        return args.lr
    if t <= args.warmup:
        return args.lr * t / args.warmup
    p = min(1.0, (t - args.warmup) / (args.total_steps - args.warmup))
    return args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(
        math.pi * p))


def result_name(key):
    """'name' -> 'name'; 'name:slot' -> the dump's 'name.slot'."""
    return key.replace(":", ".")


class Optimizer:
    """torch's optimizer over `params` ({name: leaf tensor with .grad})."""

    def __init__(self, args, params):
        self.args, self.params = args, params
        values = list(params.values())
        if args.optimizer == "adamw":
            self.opt = torch.optim.AdamW(values, lr=args.lr,
                                         betas=(args.beta1, args.beta2),
                                         eps=args.eps,
                                         weight_decay=args.weight_decay)
        else:
            self.opt = torch.optim.SGD(values, lr=args.lr,
                                       momentum=args.momentum,
                                       weight_decay=args.weight_decay)
        # LambdaLR's epoch e (0 before the first update) drives update e+1.
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda e: lr_at(args, e + 1) / args.lr)

    def step(self):
        if self.args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(self.params.values()),
                                           self.args.clip_norm)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)

    def updated_values(self):
        """{name: value} of the parameters, and {name:slot: value} of the
        state the step carries (momentum_buffer only with momentum)."""
        out = {}
        for k, p in self.params.items():
            out[k] = p.detach()
            state = self.opt.state.get(p, {})
            for slot in STATE_SLOTS:
                if slot in state and state[slot] is not None:
                    out[f"{k}:{slot}"] = state[slot]
        return out
