"""SparsityRecord: what sparse forwards kept, per kind of unit and layer (kept fraction, magnitude mass, zeros)."""
from __future__ import annotations

from collections import defaultdict

import torch


class SparsityRecord:
    """What sparse forwards kept, per kind of unit (``what``: "h" neurons, "x" input channels, "heads")
    and layer, summed over every token seen: the kept fraction (units kept / units seen), the magnitude
    mass captured (sum |v| kept / sum |v|, where v is |h|, |x| or a head's output norm) and the share of
    entries of v that are exactly zero before the rule's mask (a ReLU-gated MLP's natural sparsity)."""

    def __init__(self):
        # kept, seen, |v| kept, |v| total, exact zeros, entries whose values were seen
        self._sums: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0] * 6)

    def add(self, what: str, layer: int, mask: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """mask bool, broadcastable to values (..., n); values None: the mass is not known (gather mode)."""
        if values is not None:
            mask = mask.expand(values.shape)
        s = self._sums[(what, layer)]
        s[0] += float(mask.sum())
        s[1] += mask.numel()
        if values is not None:
            a = values.detach().abs().float()  # (..., n)
            s[2] += float((a * mask).sum())
            s[3] += float(a.sum())
            s[4] += float((a == 0).sum())  # counted where |v| is already at hand: one comparison more
            s[5] += a.numel()

    def layers(self, what: str = "h") -> list[int]:
        return sorted(i for w, i in self._sums if w == what)

    def _total(self, layer: int | None, what: str) -> list[float]:
        rows = [s for (w, i), s in self._sums.items() if w == what and layer in (None, i)]
        if not rows:
            raise KeyError(f"nothing recorded for {what!r} at layer {layer} (recorded: {sorted(self._sums)})")
        return [sum(col) for col in zip(*rows)]

    def kept_fraction(self, layer: int | None = None, what: str = "h") -> float:
        """Units kept / units seen, at one layer or (None) over all."""
        kept, seen, *_ = self._total(layer, what)
        return kept / seen

    def mass(self, layer: int | None = None, what: str = "h") -> float:
        """sum |v| kept / sum |v| (NaN where no values were recorded)."""
        _, _, kept, total, *_ = self._total(layer, what)
        return kept / total if total > 0 else float("nan")

    def zero_share(self, layer: int | None = None, what: str = "h") -> float:
        """Entries of v exactly zero / entries of v seen (NaN where no values were recorded). For h under
        the oracle, CATS and static rules in mask mode this is the dense h's; under TEAL, h of the
        thresholded x."""
        *_, zeros, valued = self._total(layer, what)
        return zeros / valued if valued > 0 else float("nan")

    def as_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        """{what: {layer: {"kept": fraction, "mass": share, "zero": share}}} (JSON-ready; layer keys are strings)."""
        return {w: {str(i): {"kept": self.kept_fraction(i, w), "mass": self.mass(i, w), "zero": self.zero_share(i, w)}
                    for i in self.layers(w)} for w in sorted({w for w, _ in self._sums})}

    def clear(self) -> None:
        self._sums.clear()
