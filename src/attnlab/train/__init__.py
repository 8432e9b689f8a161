"""The training lab: the tutorial transformer, the tracking trainer, batching, attnlab train, real-text experiments."""
