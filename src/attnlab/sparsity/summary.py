"""The summary lines of an ``attnlab sparsity`` run (its report's summary, which the command prints): what
the run found, one line each, read off its metrics."""
from __future__ import annotations


def result_lines(m: dict) -> list[str]:
    """Dense and sparse PPL, what was kept, cosine and reuse, and (when timed) the decode speed."""
    heads = "" if m["heads_keep"] is None else f", heads {m['heads_keep']:g}"
    p, cos, ov = m["profile"], m["cosine_per_layer"], m["overlap_per_layer"]
    return [f"dense: PPL {m['dense_ppl']:.3f}",
            f"{m['rule']} keep {m['keep']:g}{heads}: PPL {m['sparse_ppl']:.3f} ({m['ppl_increase']:+.2%}), "
            f"neurons kept {p['overall_kept']:.1%}, |h| mass captured {p['overall_mass']:.1%}, entries of h "
            f"exactly zero {p['overall_zero']:.1%}",
            f"residual cosine across layers: mean {sum(cos) / len(cos):.3f}, min {min(cos):.3f} (layer "
            f"{cos.index(min(cos))})",
            f"next token reuses {sum(ov) / len(ov):.1%} of a token's oracle set (chance {m['keep']:.0%})"
            ] + ([speed_line(m["decode"])] if "decode" in m else [])


def speed_line(d: dict) -> str:
    """One line for a :func:`~attnlab.sparsity.speed.decode_speed` block."""
    return (f"decode (batch 1, {d['steps']} greedy steps after a {d['prompt_tokens']}-token prompt): dense "
            f"{d['dense_ms_per_step']:.2f} ms/step ({d['dense_tokens_per_s']:.1f} tok/s), sparse gather "
            f"{d['sparse_ms_per_step']:.2f} ms/step ({d['sparse_tokens_per_s']:.1f} tok/s): {d['speedup']:.2f}x; "
            f"its next-token argmax agrees with dense on {d['top1_agreement']:.0%} of steps (dense tokens fed)")
