"""Scan&Snap (Tian et al., NeurIPS 2023): 1-layer attention training dynamics.

- :mod:`.data` — the sequence-class distribution and its two samplers.
- :mod:`.model` — the reparameterised Y/Z model and the original (U, W_Q, W_K, W_V) one.
- :mod:`.train` — SGD over many runs at once (configs x seeds batched into one tensor program).
- :mod:`.population` — the T -> ∞ gradient flow and its integrator.
- :mod:`.theorems` — Theorems 2-4 as measured-vs-predicted checks on the flow.
- :mod:`.measure` — what the experiments measure on SGD runs (Fig. 4, Fig. 6, SGD ≡ ODE).
- :mod:`.plots` — the experiments' figures.
- :mod:`.experiments` — the registered experiments (fig4, fig6, theorems): config, run, claims, figure calls.
"""
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution

__all__ = ["SeqClassConfig", "SeqClassDistribution"]
