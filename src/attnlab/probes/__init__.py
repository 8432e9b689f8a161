"""Probes: measure what a pretrained model does — sinks, heavy hitters, massive activations, sparsity, superposition."""
