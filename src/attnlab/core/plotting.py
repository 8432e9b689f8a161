"""Matplotlib without a display: every figure is written to a PNG file."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt"]
