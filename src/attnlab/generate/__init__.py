"""``attnlab generate``: continue a prompt with any model attnlab loads, under any stack of methods (a weight
scheme, a RoPE scaling, a sparsity rule, a KV-cache policy), eager or through the compiled decode step."""
