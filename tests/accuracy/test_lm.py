"""The eviction-aware LM scores as lm-eval's own hf model does, and a KV budget really evicts."""
import logging

import pytest

pytest.importorskip("lm_eval")

from lm_eval import evaluator  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from attnlab.accuracy.lm import EvictingLM  # noqa: E402
from attnlab.accuracy.tasks import TASKS, task_config  # noqa: E402
from attnlab.kv.policies import make_policy  # noqa: E402
from task_files import write_tasks  # noqa: E402
from tiny_models import byte_tokenizer, tiny  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    model = tiny("llama", 0, vocab_size=300, max_position_embeddings=512, tie_word_embeddings=True,
                 bos_token_id=256, eos_token_id=256)
    tok = byte_tokenizer()
    tok.add_special_tokens({"eos_token": "<|endoftext|>"})  # id 256, the tiny llama's end of text
    return model, tok, write_tasks(tmp_path_factory.mktemp("tasks"))


def scores(lm, folder, shots=2, names=("copa", "winogrande", "lambada")):
    """lm-eval's per-request (log-likelihood, is_greedy) and accuracies, through its own evaluator."""
    out = evaluator.simple_evaluate(model=lm, tasks=[task_config(TASKS.get(n), folder, shots) for n in names],
                                    task_manager=TaskManager(include_defaults=False), log_samples=True,
                                    bootstrap_iters=0, random_seed=0, fewshot_random_seed=0)
    per_request = {t: [r[0] for s in out["samples"][t] for r in s["resps"]] for t in out["samples"]}
    return per_request, {t: out["results"][t]["acc,none"] for t in out["results"]}


def assert_same(a, b, atol=1e-4):
    for task in a:
        assert len(a[task]) == len(b[task]) > 0
        for (la, ga), (lb, gb) in zip(a[task], b[task]):
            assert abs(la - lb) <= atol and ga == gb, task


def test_no_method_scores_equal_lm_eval_hf(setup):
    model, tok, folder = setup
    ours, acc = scores(EvictingLM(model, tok), folder)
    theirs, acc_hf = scores(HFLM(pretrained=model, tokenizer=tok, batch_size=4), folder)
    assert_same(ours, theirs)
    assert acc == acc_hf


def test_left_truncation_is_lm_eval_s(setup):
    """A model window shorter than the 2-shot prompts: both truncate from the left, per request."""
    _, tok, folder = setup
    short = tiny("llama", 1, vocab_size=300, max_position_embeddings=48, tie_word_embeddings=True,
                 bos_token_id=256, eos_token_id=256)
    ours, _ = scores(EvictingLM(short, tok), folder, names=("copa",))
    theirs, _ = scores(HFLM(pretrained=short, tokenizer=tok, batch_size=4), folder, names=("copa",))
    assert_same(ours, theirs)


@pytest.mark.parametrize("policy", ["sinks", "h2o", "sinks+h2o", "window"])
def test_a_budget_above_the_prompt_scores_as_dense(setup, policy):
    model, tok, folder = setup
    dense, _ = scores(EvictingLM(model, tok), folder)
    lm = EvictingLM(model, tok, make_policy(policy, 100_000), chunk=7)
    evicting, _ = scores(lm, folder)
    assert_same(dense, evicting)
    assert lm.evicted and all(share == 0 for shares in lm.evicted.values() for share in shares)


def test_a_small_budget_evicts_while_the_context_streams(setup):
    model, tok, folder = setup
    dense, _ = scores(EvictingLM(model, tok), folder)
    lm = EvictingLM(model, tok, make_policy("h2o", 0.2), chunk=8)
    evicting, _ = scores(lm, folder)
    shares = [s for v in lm.evicted.values() for s in v]
    assert min(shares) > 0.5  # 20% kept of a context streamed in chunks of 8
    changed = sum(abs(a[0] - b[0]) > 1e-3 for t in dense for a, b in zip(dense[t], evicting[t]))
    assert changed > len(dense["attnlab_copa"]) // 2  # eviction engaged: the scores moved
    assert model.config._attn_implementation != "attnlab_kv"  # the cache's context restored the model


def test_lm_eval_s_bookkeeping_is_restored_after_a_run(setup):
    from lm_eval import evaluator as ev

    from attnlab.accuracy.run import _lean_lm_eval

    before = ev.get_git_commit_hash, ev.add_env_info
    with _lean_lm_eval():
        assert ev.get_git_commit_hash() is None
    assert (ev.get_git_commit_hash, ev.add_env_info) == before
