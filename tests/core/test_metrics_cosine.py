"""core.metrics.CosineSums: the running residual-stream cosine that sparsity and the probes share."""
import torch
import torch.nn.functional as F

from attnlab.core.metrics import CosineSums


def test_cosine_sums_are_the_mean_cosine_of_every_pair_added():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 10, 8, generator=g), torch.randn(2, 10, 8, generator=g)
    sums = CosineSums(2)
    for half in (slice(0, 4), slice(4, 10)):  # added in two windows
        sums.add(0, a[0, half], b[0, half])
        sums.add(1, a[1, half], b[1, half])
    torch.testing.assert_close(sums.mean(), F.cosine_similarity(a, b, dim=-1).mean(1), atol=1e-6, rtol=0)
    assert torch.isnan(CosineSums(1).mean()).all()  # nothing added: no mean
