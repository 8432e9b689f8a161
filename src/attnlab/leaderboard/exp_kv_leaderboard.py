"""``attnlab reproduce kv-leaderboard``: the field's KV policies on RULER-style tasks, in kvpress's regime (compress
the context once) and while decoding (evict as the context streams), at kvpress's compression ratios.

For each task and length, ``n`` items are generated from War and Peace (:mod:`.tasks`); each is answered by
the full cache (the control: a task whose full-cache score does not reach ``premise`` decides no claim) and by
every policy at every ratio in every regime (:mod:`.harness`). The table is the mean score per regime, policy,
ratio and task; the claims (:mod:`.board`, fixed before the first run) compare two of them on the same items
with a paired bootstrap interval. The figure: score against the compression ratio, one line per policy, a
panel per regime, the full cache dotted.

Cost here: each answer is a prefill of the item and up to ``max_new`` greedy tokens, so a cell is
tasks x lengths x n x (1 + regimes x policies x ratios) answers; the default runs the needle tasks at 1,024
tokens and 5 items each. Quick mode: one task, 512 tokens, 2 items, two policies, one ratio.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from attnlab.core.errors import ConfigError
from attnlab.experiments.registry import Result, register
from attnlab.leaderboard.board import NEEDLES, claims, costs, table
from attnlab.leaderboard.regimes import RATIOS, REGIMES, kept_tokens
from attnlab.leaderboard.tasks import TASKS

TALK_ORDER = 0


@dataclass(frozen=True)
class LeaderboardConfig:
    model: str = "smollm2"
    haystack: str = "war-and-peace/warpeace.txt"
    tasks: tuple[str, ...] = NEEDLES
    lengths: tuple[int, ...] = (1024,)
    n: int = 5  # items per task and length
    ratios: tuple[float, ...] = RATIOS
    policies: tuple[str, ...] = ("sinks", "h2o", "tova", "snapkv", "keydiff", "knorm", "pyramidkv", "adakv")
    regimes: tuple[str, ...] = REGIMES
    chunk: int = 32  # context tokens per step in the decode regime
    max_new: int = 32
    seed: int = 0
    premise: float = 0.5  # the full cache's mean score a task needs before its methods are compared

    def __post_init__(self):
        from attnlab.kv.policies import POLICIES

        for t in self.tasks:
            TASKS.get(t)
        for p in self.policies:
            if not POLICIES.get(p).needs_budget:
                raise ConfigError(f"policies: {p} keeps everything; the full cache is every item's control already")
        if unknown := [r for r in self.regimes if r not in REGIMES]:
            raise ConfigError(f"regimes: {unknown[0]!r} is none of {', '.join(REGIMES)}")
        for r in self.ratios:
            kept_tokens(r, 100)  # a ratio outside [0, 1): one line
        if self.n < 1 or self.chunk < 1 or self.max_new < 1 or min(self.lengths, default=0) < 64:
            raise ConfigError("n, chunk and max_new must be >= 1, and every length >= 64 tokens")


def _answers(cfg: LeaderboardConfig, model, tok, items: dict, ctx) -> list[dict]:
    """Every item answered by the full cache, then by each policy at each ratio in each regime. In the prefill
    regime one prefill per item and policy serves all its ratios (``answers_once``): nothing is evicted until
    the context is in, so the ratios differ only from the compression on."""
    from attnlab.leaderboard.harness import answer, answers_once

    per_item = 1 + len(cfg.regimes) * len(cfg.policies) * len(cfg.ratios)
    rows = []
    with ctx.progress(sum(map(len, items.values())) * per_item, "answers") as bar:
        for (task, length), its in items.items():
            for i, item in enumerate(its):
                def add(regime: str, policy: str, ratio: float, a) -> None:
                    rows.append({"task": task, "length": length, "item": i, "regime": regime, "policy": policy,
                                 "ratio": ratio, **asdict(a), "tokens_per_s": a.tokens_per_s,
                                 "answers": list(item.answers)})
                    bar.update(1)

                add("full", "full", 0.0, answer(model, tok, item, "full", 0.0, "prefill", max_new=cfg.max_new))
                for regime in cfg.regimes:
                    for policy in cfg.policies:
                        if regime == "prefill":
                            got = answers_once(model, tok, item, policy, cfg.ratios, max_new=cfg.max_new)
                        else:
                            got = [answer(model, tok, item, policy, r, regime, chunk=cfg.chunk, max_new=cfg.max_new)
                                   for r in cfg.ratios]
                        for r, a in zip(cfg.ratios, got):
                            add(regime, policy, r, a)
    return rows


@register("kv-leaderboard", "the field's KV policies on RULER-style tasks at kvpress's compression ratios, "
          "compressing the context once (kvpress's regime) and while decoding", LeaderboardConfig,
          quick={"tasks": ("niah_single",), "lengths": (512,), "n": 2, "ratios": (0.5,),
                 "policies": ("sinks", "snapkv"), "max_new": 12}, demo=True)
def run_kv_leaderboard(cfg: LeaderboardConfig, ctx) -> Result:
    from attnlab.data.sources import read_corpus
    from attnlab.evals.inputs import load_model
    from attnlab.leaderboard.harness import token_count
    from attnlab.leaderboard.plots import leaderboard_figure
    from attnlab.leaderboard.tasks import haystack_from, make_items

    model, tok = load_model(cfg.model, ctx.device)
    hay = haystack_from(read_corpus(cfg.haystack, "haystack"))
    count = token_count(tok)
    items = {(t, n): make_items(t, hay, count, n, cfg.n, cfg.seed) for t in cfg.tasks for n in cfg.lengths}
    rows = _answers(cfg, model, tok, items, ctx)
    board = table(rows)
    leaderboard_figure(ctx, board)
    found = claims(rows, cfg.premise, cfg.seed)
    spent = costs(rows)
    metrics = {"command": ctx.command, "model": cfg.model, "table": board, "costs": spent, "answers": rows}
    lines = ["Mean score (decode tokens/s, KV MiB when the answer began):", "",
             "| regime | policy | " + " | ".join(f"ratio {r:g}" for r in cfg.ratios) + " |",
             "|---|---|" + "---|" * len(cfg.ratios)]

    def cell(regime: str, policy: str, ratio: str) -> str:
        c = spent[regime][policy][ratio]
        return f"{board[regime][policy][ratio]['average']:.3f} ({c['tokens_per_s']:.1f}, {c['kv_bytes'] / 2**20:.1f})"

    lines.append(f"| full | full | {cell('full', 'full', '0')} |" + " |" * (len(cfg.ratios) - 1))
    for regime in cfg.regimes:
        for policy in cfg.policies:
            lines.append(f"| {regime} | {policy} | " + " | ".join(cell(regime, policy, f"{r:g}") for r in cfg.ratios)
                         + " |")
    figures = {"leaderboard.png": "Mean score over the tasks against the compression ratio (the share of the context "
               "removed), one line per policy; left: compressed once after the context (prefill), right: while "
               "the context streams (decode); the full cache dotted."}
    return Result(found, metrics, figures, "\n".join(lines))
