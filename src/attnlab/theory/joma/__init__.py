"""JoMA (Tian et al., ICLR 2024): joint dynamics of self-attention and the MLP below it.

- :mod:`.model` — the JoMA layer: fixed orthonormal embeddings, attention b (softmax/exp/linear),
  residual query, K hidden nodes; Theorem 1's invariants.
- :mod:`.ode` — the "modified MLP" ODEs of Theorems 2-4 and their integrator.
- :mod:`.ode_checks` — Theorems 2-4 measured on those ODEs beside their closed forms.
- :mod:`.invariants` — Theorem 1's prediction ẑ(t) from V(t), the authors' verification setup and its runs.
- :mod:`.hierarchy` — the latent-tree data of Theorem 5 (two variants) behind one interface.
- :mod:`.transformer` — a small post-LN transformer that exposes its FFN activations, and its Adam training.
- :mod:`.alignment` — Theorem 5 measured: co-occurrence vs 1 − H/L, the alignment score over training.
- :mod:`.plots` — the experiments' figures.
- ``exp_*`` modules — the registered experiments (config, run, claims, figure calls).
"""
