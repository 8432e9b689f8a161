"""YaRN, the RoPE scaling written as one file (attnlab/rope/scaling_yarn.py): its betas are options that reach
--method, --scalings and their validation, and its frequencies are transformers' at every (factor, betas)."""
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from attnlab.core.errors import UsageError
from attnlab.methods.base import parse
from attnlab.rope.scalings import SCALINGS, rope_inv_freq

L0 = 32


@pytest.mark.parametrize("factor, beta_fast, beta_slow", [(2.0, 32.0, 1.0), (4.0, 8.0, 2.0), (16.0, 64.0, 0.5)])
def test_frequencies_are_transformers_yarn_at_any_betas(factor, beta_fast, beta_slow):
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": L0, "beta_fast": beta_fast,
            "beta_slow": beta_slow}
    ours, att = SCALINGS.get("yarn")(factor=factor, beta_fast=beta_fast, beta_slow=beta_slow).frequencies(
        500.0, 16, L0)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=L0,
                         rope_parameters={"rope_theta": 500.0, **rope})
    theirs, theirs_att = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(ours, theirs.float(), atol=0, rtol=1e-6)
    assert att == pytest.approx(theirs_att, rel=1e-12)


def test_the_betas_move_the_ramp_and_factor_one_is_plain_rope():
    yarn = SCALINGS.get("yarn")
    plain = rope_inv_freq(500.0, 16)
    assert torch.equal(yarn(factor=1.0, beta_fast=4.0).frequencies(500.0, 16, L0)[0], plain)
    wide, narrow = (yarn(factor=4.0, beta_fast=b).frequencies(500.0, 16, L0)[0] for b in (64.0, 2.0))
    assert not torch.equal(wide, narrow)
    # a larger beta_fast keeps only the dims turning that often: more of them interpolated (lower frequencies)
    assert (wide <= narrow + 1e-9).all() and torch.equal(wide[0], plain[0])


def test_the_betas_are_method_options_with_bounds():
    assert parse("yarn:factor=4,beta_fast=16").scaling() == SCALINGS.get("yarn")(factor=4.0, beta_fast=16.0)
    with pytest.raises(UsageError, match="beta_slow"):
        parse("yarn:beta_slow=0")
