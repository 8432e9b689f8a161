"""``attnlab view``: a model's attention over a text as one self-contained HTML page."""
from __future__ import annotations

import sys
from pathlib import Path

from attnlab.core.errors import UsageError

GROUP = "inference"

DOC = """\
Run a model over a text once and write one HTML file to look at its attention: a layers x heads grid
coloured by each head's first-token share (the sink) or entropy (click a head to open it); that head's
map (zoom, hover a cell: query, key, weight); the text (hover a token: its attention row lights up the
tokens it reads, for the head or the mean of its layer); H2O's accumulated attention per token (the heavy
hitters) and the first tokens' share of it; and an eviction replay: for each policy and budget, what the
real KV cache (attnlab.kv) stores after every step, per layer and KV head, scrubbed with a slider.

The file holds everything (attention at 8 bits per layer and head, deflated; the script; no library, no
font, no request): it opens from disk in any current browser and can be mailed. 512 tokens of SmolLM2
make a file under 5 MB; the size grows as tokens squared."""

EPILOG = """examples:
  attnlab view --text "The capital of France is Paris. The capital of Italy is" --out view.html
  attnlab view --text-file wikitext-2/test.txt --tokens 512 --out wiki.html
  attnlab view --text-file notes.txt --policies sinks,h2o,knorm --budgets 32,64 --chunk 1 --out kv.html
  attnlab view --model runs/llama --text-file kjv --tokens 256 --out own.html   # an attnlab train run

--chunk 1 replays decoding one token at a time (the papers' protocol); the default 8 evicts between
chunks of 8 tokens, as `attnlab stream --chunk 8` does, and is several times faster (benchmarks/README.md
has both times). `attnlab probe` writes the same page of its text into its run folder."""


def add_commands(sub) -> None:
    from attnlab.experiments.command import HelpFormatter
    from attnlab.view.defaults import DEFAULT_BUDGET, DEFAULT_CHUNK, DEFAULT_POLICIES, DEFAULT_TOKENS, MAX_TOKENS

    p = sub.add_parser("view", help="a model's attention, sinks, heavy hitters and KV eviction as one HTML page",
                       description=DOC, epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--model", default="smollm2", help="alias (smollm2), model folder, attnlab train run or hub id "
                   "(default: smollm2)")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="the text itself")
    text.add_argument("--text-file", metavar="PATH", help="a text file, or a shipped corpus: wikitext-2/test.txt, "
                      "kjv, war-and-peace; PATH:ENCODING for a file not in UTF-8 (notes.txt:latin-1)")
    p.add_argument("--tokens", type=int, default=None, help=f"at most this many tokens of the text, 1 to {MAX_TOKENS} "
                   f"and the model's context (default: {DEFAULT_TOKENS}, or the context if shorter)")
    policies = p.add_argument("--policies", default=None, help="comma-separated KV policies to replay, any "
                              f"registered: {{choices}}; '' for none (default: {','.join(DEFAULT_POLICIES)})")
    policies.registry_choices = _policy_names  # listed when help is printed: the registry imports PyTorch
    p.add_argument("--budgets", default=str(DEFAULT_BUDGET), help="comma-separated budgets: tokens, or fractions "
                   "in (0, 1) of the tokens seen (default: %(default)s)")
    p.add_argument("--n-sink", type=int, default=4, help="sink tokens kept by sinks and sinks+h2o, and whose share "
                   "of the accumulated attention is shown (default: 4)")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help="tokens per replay step (default: %(default)s; "
                   "1 = decoding)")
    p.add_argument("--method", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                   help="a method the page is drawn under, NAME[:key=value,...] (`attnlab methods` lists them); "
                   "repeat it to compose kinds. A KV method is one more replay, with its options "
                   "(tova:budget=32,heads=each); the others change the model every map and replay reads")
    p.add_argument("--out", type=Path, default=Path("view.html"), help="the HTML file (default: view.html); an "
                   "earlier page is replaced, any other file only with --force")
    p.add_argument("--force", action="store_true", help="replace --out even if it is not a page attnlab wrote")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.set_defaults(func=cmd_view)


def _policy_names() -> list[str]:
    from attnlab.kv.policies import POLICIES

    return POLICIES.names()


def _budgets(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(b) if "." in b else int(b) for b in (s.strip() for s in text.split(",")) if b)
    except ValueError:
        raise UsageError(f"--budgets {text!r}: give token counts or fractions, e.g. --budgets 32,64 or 0.2") from None
    if not out:
        raise UsageError("--budgets is empty: give token counts or fractions, e.g. --budgets 64")
    return out


# What every page carries (static/view.html: the data its script reads), so an earlier page is told from a
# file of the user's that --out happens to name
PAGE_MARKER = b'<script type="application/json" id="attnlab-data">'


def _check_out(out: Path, force: bool) -> None:
    """--out names a new file or an earlier page (else --force), in a folder that exists and takes a file."""
    from attnlab.core.io import check_replaceable, check_writable

    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: give a file name, e.g. --out {out / 'view.html'}")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist; create it or write elsewhere")
    check_replaceable(out, PAGE_MARKER, "a page attnlab view wrote", force)
    check_writable(out)


def _text(args) -> tuple[list[str] | str, str]:
    """(the literal text, or a file's lines; how the page names it), one line when there is no text."""
    from attnlab.data.sources import read_corpus

    if args.text is not None:
        if not args.text.strip():
            raise UsageError('--text is empty: give some text, e.g. --text "The capital of France is"')
        return args.text, "the given text"
    lines = read_corpus(args.text_file, "text", "--text-file PATH")
    if not any(line.strip() for line in lines):
        raise UsageError(f"--text-file {args.text_file} is empty: give a file with some text")
    return lines, args.text_file


def cmd_view(args) -> int:
    import torch

    from attnlab.core.io import write_output
    from attnlab.evals.inputs import first_ids, load_model, with_sink
    from attnlab.experiments.runner import RunContext, check_device
    from attnlab.methods import Context, apply, ordered, parse_list
    from attnlab.view.build import build_view, check_tokens, context_of, policies_for, usable
    from attnlab.view.defaults import DEFAULT_POLICIES, DEFAULT_TOKENS, MAX_TOKENS

    # every check that needs no model first: a mistake costs one line, not a model load
    if args.tokens is not None and not 1 <= args.tokens <= MAX_TOKENS:
        raise UsageError(f"--tokens {args.tokens}: give 1 to {MAX_TOKENS}")
    if args.chunk < 1:
        raise UsageError(f"--chunk {args.chunk}: give at least 1 token per step")
    named = args.policies is not None
    names = (tuple(n.strip() for n in args.policies.split(",") if n.strip()) if named
             else DEFAULT_POLICIES)
    methods = ordered(parse_list(args.method))
    kv = [m.policy() for m in methods if m.kind == "kv"]
    policies = policies_for(names, _budgets(args.budgets), args.n_sink)
    policies += [p for p in kv if p not in policies]
    text, source = _text(args)
    _check_out(args.out, args.force)
    device = check_device(args.device)
    model, tok = load_model(args.model, device)
    if args.tokens is None:  # the default: as many as the model's context takes
        tokens = min(DEFAULT_TOKENS, context_of(model) or DEFAULT_TOKENS)
    else:
        tokens = args.tokens
        check_tokens(model, tokens)
    policies = usable(model, policies, named or bool(kv))
    ids = (tok(text, add_special_tokens=False)["input_ids"][:tokens] if isinstance(text, str)
           else first_ids(tok, text, tokens))
    if not ids:
        raise UsageError("the text has no tokens: give some text")
    ids = with_sink(model, torch.tensor(ids))[:tokens]
    ctx = RunContext(args.out.parent, device)
    about = {"model": args.model, "text": source} | ({"methods": [m.spec() for m in methods]} if methods else {})
    with apply(model, *[m for m in methods if m.kind != "kv"], ctx=Context(tok, device, None, args.model)):
        page = build_view(model, tok, ids, policies, args.chunk, about, ctx.progress, args.n_sink)
    write_output(args.out, page)  # aside, then renamed: a refused write keeps the old page
    print(f"{args.out} ({len(page.encode()) / 1e6:.2f} MB, {ids.numel()} tokens, {len(policies)} replays): "
          "open it in a browser", file=sys.stderr)
    return 0

