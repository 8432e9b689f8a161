"""What eviction forgets: StreamEval, retrieval through every KV policy, H2O's XSum check."""
