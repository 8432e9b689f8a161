"""``--quant NAME``, the older spelling of ``--method NAME`` for a weight scheme, kept one release as an alias on
the commands that had it (``stream``, ``eval``, ``sparsity``): built from the scheme registry (torch-free: the
registry is imported only when help is printed or a name is checked)."""
from __future__ import annotations

from attnlab.experiments.command import Alias


def scheme_choices() -> list[str]:
    from attnlab.quant.schemes import SCHEMES

    return SCHEMES.names()


# a config lists it in its ALIASES: ``--quant int8`` and ``--set quant=int8`` are read as ``--method int8``
QUANT = Alias(lambda name: name, "quantize the weights while it runs: {choices}", "SCHEME", scheme_choices)
