"""``attnlab view``: one self-contained HTML page of a model's attention over a text, for a person to look at:
the layers x heads grid, one head's map, the text with each token's attention row, H2O's heavy hitters,
and an eviction replay of the KV-cache policies (their kept sets computed by the policy code itself)."""
