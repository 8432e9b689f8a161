"""The configs of the RoPE commands, torch-free: ``attnlab passkey`` and ``attnlab longppl`` build their
flags from them (:mod:`attnlab.experiments.command`), and a run's config.json is one of them.

``PasskeyConfig`` is the ``passkey`` experiment's (its claims' thresholds are set with ``--set``, not
flags) and ``rope-zero-shot`` extends it; ``LongPPLRun`` is ``longppl``'s, whose knobs
``rope-zero-shot``'s perplexity half shares (:func:`check_ppl_windows`)."""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.configured import configured, methods_option


def _scaling_names() -> list[str]:
    from attnlab.rope.scalings import SCALINGS  # the registry: a scaling's file is all a new one needs

    return SCALINGS.names()


@dataclass(frozen=True)
class ScaledModel:
    """A RoPE model and the scalings it is evaluated under, each at ``factor`` (none at 1)."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    scalings: tuple[str, ...] = option(("all",), "comma-separated RoPE scalings, or all (the default): {choices} "
                                       "(`attnlab methods` says what each does)", choices=_scaling_names)
    factor: float = option(2.0, "s = target context / trained context: 16k for SmolLM2's 8k")
    methods: tuple[str, ...] = methods_option()
    rope_method = True  # a RoPE --method replaces --scalings (False: the experiment compares every one with none)

    def __post_init__(self):
        if not self.scalings:
            raise UsageError("--scalings is empty: name at least one, e.g. none,ntk")
        if self.scalings == ("all",):  # every registered scaling, named in config.json
            object.__setattr__(self, "scalings", tuple(_scaling_names()))
        self.scalings_applied()  # unknown names and factors < 1 refused with the config
        self.methods_applied()

    def methods_applied(self) -> list:
        """The methods entered around every scaling's evaluation (weights, MLP; no KV cache: these evaluations
        prefill without one)."""
        kinds = ("weights", "rope", "mlp") if self.rope_method else ("weights", "mlp")
        why = ("these evaluations run without an evicting cache, so KV methods do not apply" if self.rope_method else
               "it compares each of --scalings with none: name the scalings there")
        return [m for m in configured(self, kinds, why) if m.kind != "rope"]

    def scalings_applied(self) -> list:
        """The RoPE scalings evaluated in turn: a RoPE --method's alone, else --scalings at --factor."""
        from attnlab.rope.compare import load_scalings

        rope = [m for m in configured(self) if m.kind == "rope"]
        return [rope[0].scaling()] if rope else load_scalings(self.scalings, self.factor)


def _check_lengths(lengths: tuple[int, ...], flag: str) -> None:
    if not lengths or min(lengths) < 1:
        raise UsageError(f"{flag} {','.join(map(str, lengths))}: give positive token counts, e.g. 4096,8192")


@dataclass(frozen=True)
class PasskeyConfig(ScaledModel):
    """The passkey grid lengths x depths x samples (keys drawn from ``seed``) under each scaling."""

    lengths: tuple[int, ...] = option((4096, 8192, 16384), "prompt lengths in tokens")
    depths: tuple[float, ...] = option((0.0, 0.5, 1.0), "key depths in [0, 1]")
    samples: int = option(2, "prompts per (length, depth), each its own key")
    seed: int = option(0, "draws the keys")
    min_accuracy: float = 0.8  # "keeps passkey": accuracy at the longest length
    max_accuracy_unscaled: float = 0.2  # "fails passkey": accuracy of no scaling at the longest length

    def __post_init__(self):
        from attnlab.evals.passkey import check_grid

        super().__post_init__()
        check_grid(self.lengths, self.depths, self.samples)
        _check_lengths(self.lengths, "--lengths")


def check_ppl_windows(lengths: tuple[int, ...], stride: int, windows: int, tokens: int | None,
                      lengths_flag: str = "--lengths") -> None:
    """Refuse sliding-window perplexity settings that cannot be scored (longppl and rope-zero-shot alike)."""
    _check_lengths(lengths, lengths_flag)
    if stride < 1:
        raise UsageError(f"--stride {stride}: score at least 1 token per window")
    if windows < 0:
        raise UsageError(f"--windows {windows}: give 0 (every stride) or a positive number of windows")
    if min(lengths) <= stride:  # a window scores its last `stride` tokens, each from the tokens before it
        raise UsageError(f"{lengths_flag} {min(lengths)}: need every length > the stride ({stride}), so that every "
                         "scored token has a token before it in its window")
    if tokens is not None and tokens < max(lengths):
        raise UsageError(f"--tokens {tokens} is shorter than the longest length {max(lengths)}")


@dataclass(frozen=True)
class LongPPLRun(ScaledModel):
    """One ``attnlab longppl`` run: sliding-window perplexity at several context lengths."""

    text: str = option("war-and-peace", "a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    lengths: tuple[int, ...] = option((2048, 4096, 8192, 16384), "context lengths in tokens")
    stride: int = option(256, "window stride = tokens scored per window")
    tokens: int | None = option(None, "tokens of the text the windows slide over (default: twice the longest "
                                "length)")
    windows: int = option(2, "scored blocks, evenly spaced, each scored at every length (0: every stride, the full "
                          "protocol)")

    def __post_init__(self):
        super().__post_init__()
        check_ppl_windows(self.lengths, self.stride, self.windows, self.tokens)
