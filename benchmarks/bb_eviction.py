"""Why evicting the sink barely hurts the Bigram-Backcopy model: where its dormant attention goes without BOS.

`sink-backcopy` trains a one-layer, one-head Llama on BB until its head parks non-trigger queries on BOS, then
streams it through a window cache with no sink (0+W): the BB loss rises by a fraction of a percent, where the
talk's LLM table rises many-fold. This trains the same model (the experiment's setup, --steps of it), then
renormalises each dormant query's attention without BOS and reports where the mass lands: the query itself, the
token before, the rest; and how even it is (entropy against an even spread over the same keys).

    python benchmarks/bb_eviction.py --out benchmarks/results/sink-backcopy-eviction
"""
from __future__ import annotations

import torch

from attnlab.data.sources import read_corpus
from attnlab.experiments.registry import get
from attnlab.sinks import backcopy
from attnlab.sinks.bb_train import train_bb

from host import add_out, machine, parser, positive_int, recorded  # benchmarks/host.py


@torch.no_grad()
def without_bos(attn: torch.Tensor, dormant: torch.Tensor) -> dict:
    """attn (B, L, L) one head's weights; dormant (B, L) bool -> the shares and entropy of those rows without BOS."""
    b, length, _ = attn.shape
    rest = attn.clone()
    rest[..., 0] = 0
    rest = rest / rest.sum(-1, keepdim=True).clamp_min(1e-30)  # (B, L, L): renormalised over keys 1..t
    t = torch.arange(length)
    own = rest[:, t, t]  # (B, L)
    before = torch.cat([torch.zeros(b, 1), rest[:, t[1:], t[:-1]]], 1)  # (B, L)
    entropy = -(rest.clamp_min(1e-30).log() * rest).sum(-1)  # (B, L)
    even = torch.log(t.clamp_min(1).float()).expand(b, -1)  # an even spread over the t keys 1..t
    return {"self": float(own[dormant].mean()), "before": float(before[dormant].mean()),
            "rest": float((1 - own - before)[dormant].mean()), "entropy": float(entropy[dormant].mean()),
            "even_entropy": float(even[dormant].mean())}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=positive_int, default=2000, help="training steps (the experiment's setup "
                    "otherwise)")
    add_out(ap)
    args = ap.parse_args(argv)
    cfg = get("sink-backcopy").config_cls(steps=args.steps, track_every=args.steps)  # the experiment's setup
    task = backcopy.from_text("\n".join(read_corpus(cfg.text, "text")), cfg.k)
    with recorded(args.out, figures := {}):
        run = train_bb(task, cfg, "1-layer", 1)
        x = backcopy.sample(task, cfg.probe_batch, cfg.length, torch.Generator().manual_seed(cfg.seed + 9))
        _, maps = run.model(x, attentions=True)
        dormant = ~task.is_trigger(x)
        dormant[:, :2] = False  # BOS's query, and the first token's (its only other key is itself)
        shares = without_bos(maps[0][:, 0].float(), dormant)
        figures.update(dormant_to_bos=run.track[-1]["layers"][0]["dormant"], **shares)
        print(f"# {machine()}; sink-backcopy's 1-layer setup, {args.steps} steps\n")
        print(f"dormant attention to BOS at the end: {figures['dormant_to_bos']:.3f}\n")
        print("Without BOS (renormalised over the other keys), the dormant queries' attention:\n")
        print("| on the query itself | on the token before | on the rest | entropy (nats) | an even spread's |")
        print("|---|---|---|---|---|")
        print(f"| {shares['self']:.3f} | {shares['before']:.3f} | {shares['rest']:.3f} | {shares['entropy']:.2f} | "
              f"{shares['even_entropy']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
