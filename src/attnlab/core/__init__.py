"""Shared pieces every capability uses: errors, the cache folder, staged writes, plots, metrics, registries."""
