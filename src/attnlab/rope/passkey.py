"""One passkey run under RoPE scalings — its settings and the run itself — shared by ``attnlab passkey``
and the ``passkey`` experiment (whose config ``rope-zero-shot`` extends). Light at import: the CLI
builds its flags from :class:`PasskeyGrid`; models and evaluations are imported when a run starts."""
from __future__ import annotations

from dataclasses import dataclass

ALL_SCALINGS = ("none", "pi", "ntk", "dynamic-ntk", "yarn")
FIGURE = {"passkey.png": "passkey accuracy per (prompt length, key depth), one panel per scaling"}


@dataclass(frozen=True)
class PasskeyGrid:
    """The model, the scalings and the grid lengths × depths × samples (keys drawn from ``seed``)."""

    model: str = "smollm2"
    scalings: tuple[str, ...] = ALL_SCALINGS
    factor: float = 2.0  # target context / trained context: 16k for SmolLM2's 8k
    lengths: tuple[int, ...] = (4096, 8192, 16384)
    depths: tuple[float, ...] = (0.0, 0.5, 1.0)
    samples: int = 2
    seed: int = 0

    def __post_init__(self):
        from attnlab.evals.passkey import check_grid
        from attnlab.rope.compare import load_scalings

        load_scalings(self.scalings, self.factor)  # unknown names and factors < 1 refused with the config
        check_grid(self.lengths, self.depths, self.samples)


def run_grid(cfg: PasskeyGrid, scalings: list, ctx) -> tuple[int, dict]:
    """Load ``cfg.model``, answer every prompt of the grid under each scaling and draw passkey.png
    -> (the model's trained context, {scaling label: [PasskeyResult]})."""
    from attnlab.evals.inputs import load_model
    from attnlab.evals.passkey import passkey_cases
    from attnlab.rope.compare import passkey_by_scaling
    from attnlab.rope.plots import passkey_figure

    model, tok = load_model(cfg.model, ctx.device)
    trained = model.config.max_position_embeddings
    results = passkey_by_scaling(model, tok, scalings, passkey_cases(cfg.lengths, cfg.depths, cfg.samples, cfg.seed),
                                 ctx)
    passkey_figure(ctx, results, trained)
    return trained, results
