"""Sweeps: a registered experiment over a grid of settings and seeds, each cell an ordinary run, on Ray."""
