"""``--quant``, the one flag every command that runs a model takes to quantize its weights: built from the
scheme registry (torch-free: the registry is imported only when help is printed or a name is checked)."""
from __future__ import annotations

from attnlab.experiments.command import option


def scheme_choices() -> list[str]:
    from attnlab.quant.schemes import SCHEMES

    return SCHEMES.names()


def quant_option():
    """A config field for ``--quant`` (default "": float weights)."""
    return option("", "quantize the weights while it runs: {choices} (default: none, float weights)",
                  choices=scheme_choices)


def check_quant(name: str) -> None:
    """An unknown scheme: one line with a did-you-mean (UsageError); "" (none) passes."""
    if name:
        from attnlab.quant.schemes import SCHEMES

        SCHEMES.get(name)
