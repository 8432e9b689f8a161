"""JoMA (Tian et al., ICLR 2024): joint dynamics of self-attention and the MLP below it.

- :mod:`.model` — the JoMA layer: fixed orthonormal embeddings, attention b (softmax/exp/linear),
  residual query, K hidden nodes; Theorem 1's invariants.
- :mod:`.ode` — the "modified MLP" ODEs of Theorems 2-4 and their integrator.
- :mod:`.invariants` — Theorem 1's prediction ẑ(t) from V(t) and the authors' verification setup.
- :mod:`.hierarchy` — the latent-tree data of Theorem 5 (two variants) and the alignment score.
- :mod:`.transformer` — a small post-LN transformer that exposes its FFN activations.
- ``exp_*`` modules — the registered experiments.
"""
