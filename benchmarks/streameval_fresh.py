"""Is StreamEval's 0% on SmolLM2 the streaming or the model?

``streameval`` feeds one stream token by token and answers in place; SmolLM2-135M got every answer wrong,
even with the full cache. Here each of the stream's first queries is asked *fresh*: its prefix (the header,
the lines so far and the query, without earlier queries and answers) is encoded from scratch in one
forward and answered greedily -- once tokenised piece by piece as the stream is, once as one text. If the
model still fails, the task, not the streaming, is the limit.

    python benchmarks/streameval_fresh.py        # SmolLM2, the experiment's default stream; ~1 min on 2 CPU cores
    python benchmarks/streameval_fresh.py --chat # the same in the model's chat template (streameval's chat=true)
"""
from __future__ import annotations

import torch

from attnlab.evals.inputs import load_model
from attnlab.recall.decode import Pieces
from attnlab.recall.streameval import ANSWER, HEADER, LINE, QUESTION, StreamSpec, is_correct, make_stream

from host import add_out, model_name, parser, positive_int, recorded  # benchmarks/host.py


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--queries", type=positive_int, default=10, help="the stream's first N queries")
    ap.add_argument("--chat", action="store_true", help="lines and question a user turn, the answer the assistant's")
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    model, tok = load_model(args.model)
    pieces = Pieces(tok, args.chat)
    stream = make_stream(StreamSpec(lines=160, query_every=4, distances=(3, 6, 12, 24, 48)))
    right = {"pieces": 0, "one text": 0}
    for q in stream.queries[:args.queries]:
        by_piece = pieces.header + [i for n in range(q.at_line) for p in pieces.line(stream.keys[n], stream.values[n])
                                    for i in p] + pieces.query(q.key)
        text = HEADER + "".join(LINE.format(key=stream.keys[n], value=stream.values[n]) for n in range(q.at_line))
        whole = pieces.bos + pieces.ids(pieces.opening + text + QUESTION.format(key=q.key) + pieces.to_assistant
                                        + ANSWER.format(key=q.key))
        for name, ids in (("pieces", by_piece), ("one text", whole)):
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)
            answer = tok.decode(out[0, len(ids):])
            right[name] += is_correct(answer, q.value)
            print(f"{name:9s} {q.distance:3d} lines back, value {q.value:5d}: {answer!r}")
    n = min(args.queries, len(stream.queries))
    print("right: " + ", ".join(f"{k} {v}/{n}" for k, v in right.items()))


if __name__ == "__main__":
    main()
