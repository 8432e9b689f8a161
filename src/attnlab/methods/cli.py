"""``attnlab methods``: every method of every kind, with its options -- what ``--method`` accepts."""
from __future__ import annotations

import argparse

from attnlab.methods.base import KIND_NAMES, KINDS, describe, load

GROUP = "inference"

EPILOG = """Write a method as NAME[:key=value,...] and give --method once per method; the kinds compose, one of each,
entered in the order weights > rope > mlp > kv whatever the order given:
  attnlab stream --method int8 --method yarn:factor=2 --method cats:keep=0.5 --method h2o:budget=0.2
  attnlab reproduce stream --set methods="int8;h2o:budget=0.2"
In Python, on any Hugging Face causal LM:
  with attnlab.apply(model, "int8", "h2o:budget=0.2"):
      model.generate(ids, max_new_tokens=32)"""


def add_commands(sub) -> None:
    p = sub.add_parser("methods", help="list the methods --method takes (KV policies, sparsity rules, RoPE "
                       "scalings, weight schemes) with their options",
                       description="Every method, by kind, with its options and their defaults.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="one method only (default: all)")
    p.set_defaults(func=cmd_methods)


def cmd_methods(args) -> int:
    registry = load()
    if args.name:
        print(describe(registry.get(args.name)))  # an unknown name: did you mean
        return 0
    for kind in KINDS:
        print(f"{KIND_NAMES[kind]}s ({kind}):")
        for name, cls in registry.items():
            if cls.kind == kind:
                print("  " + describe(cls).replace("\n", "\n  "))
        print()
    return 0
