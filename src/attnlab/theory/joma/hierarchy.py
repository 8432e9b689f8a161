"""Hierarchical latent data of JoMA §6 (Theorem 5): the latent tree and the top-down generator.

Two generators:

* :class:`LatentTree` — the *probabilistic binary latent tree* of Theorem 5. The root is
  the observed class y (D values, uniform). Below it a tree of binary latents of total
  height L: the D nodes at height L−1 are the classes (node c is on iff y = c); leaves at
  height 0 are tokens (leaf l = 1 ⇔ token l appears in the sequence). Every on-node turns
  each of its B children on independently with keep probability κ_h (h = the parent's
  height); an off-node's children are off. So given that the ancestor of leaf l at height
  H is on, P[l = 1] = Π_{h=1}^{H} κ_h, and, because l and m are independent given their
  lowest common latent ancestor (LCA) and m = 1 forces the LCA on,

      P[l = 1 | m = 1] = P[l = 1 | LCA on] = Π_{h=1}^{H(l,m)} κ_h.

  Preset ``exact``: κ_h = (L−h)/(L−h+1), the product telescopes to (L−H)/L = 1 − H/L
  exactly (across classes H := L and P = 0 = 1 − L/L). Preset ``constant``: κ_h = 1 − 1/L,
  giving (1 − 1/L)^H, which is ≈ 1 − H/L only for H ≪ L.

  Worked example (D=2, L=3, B=2, exact): vocabulary 2·2² = 8 tokens, κ_1 = 2/3, κ_2 = 1/2;
  tokens 0,1 share a height-1 parent: P[1|0] = 2/3 = 1 − 1/3; tokens 0,2 meet at the class
  node: P[2|0] = 1/3 = 1 − 2/3; tokens 0,4 are in different classes: P = 0.

* :class:`TopDownHierarchy` — our reading of the authors' deterministic top-down generator
  (their Table 1 code is not public). A structure, fixed by ``structure_seed``, gives every
  node of each level (the classes, then each latent level, the tokens being the last level)
  ``num_combinations`` fixed child subsets of ``num_children`` nodes of the next level. A
  sample draws y uniformly, starts from the active set {y}, lets every active node pick one
  of its combinations uniformly, and takes the union of picked children as the next active
  set; the tokens are the active leaves. The sequence holds the present tokens in random
  order at the END, left-padded with PAD (id = vocab_size).

Node numbering in :class:`LatentTree`: child j of node i (one level down) is i·B + j, so the
ancestor of leaf l at height H is l // B^H, and leaf l belongs to class l // B^{L−1}.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError

PRESETS = ("exact", "constant")


# --------------------------------------------------------------------------- latent tree
@dataclass(frozen=True)
class LatentTreeConfig:
    """The probabilistic binary latent tree (Theorem 5); vocabulary = D·B^{L−1} tokens."""

    num_classes: int = 4  # D, values of the root y
    height: int = 5  # L: root at height L, class nodes at L−1, tokens (leaves) at 0
    branching: int = 2  # B children per latent node
    preset: str = "exact"  # exact: κ_h = (L−h)/(L−h+1); constant: κ_h = 1 − 1/L
    vocab_size: int = 0  # 0: derive D·B^{L−1}; otherwise must equal it (a check on the intended size)
    max_vocab: int = 65536  # refuse trees whose leaves would not fit in memory-sized vocabularies

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ConfigError(f"num_classes={self.num_classes}: the root needs at least 2 classes, "
                              "set num_classes >= 2")
        if self.height < 2:
            raise ConfigError(f"height={self.height}: a latent tree needs class nodes and leaves, set height >= 2")
        if self.branching < 2:
            raise ConfigError(f"branching={self.branching}: a binary latent tree needs branching >= 2")
        if self.preset not in PRESETS:
            raise ConfigError(f"preset={self.preset!r}: use one of {', '.join(PRESETS)}")
        need = self.num_leaves
        if need > self.max_vocab:
            raise ConfigError(f"the tree has {need} leaves (D·B^(L−1)) > max_vocab={self.max_vocab}: "
                              "lower height or branching, or raise max_vocab")
        if self.vocab_size and self.vocab_size < need:
            deepest = 1  # largest L with D·B^(L−1) <= vocab_size
            while self.num_classes * self.branching ** deepest <= self.vocab_size:
                deepest += 1
            fix = (f"use height <= {deepest}" if deepest >= 2 else
                   f"raise vocab_size to >= {self.num_classes * self.branching} (height 2)")
            raise ConfigError(f"height={self.height} is deeper than vocab_size={self.vocab_size} allows "
                              f"(needs D·B^(L−1) = {need} tokens): {fix}, or set vocab_size=0")
        if self.vocab_size and self.vocab_size != need:
            raise ConfigError(f"vocab_size={self.vocab_size} but the leaves fill exactly D·B^(L−1) = {need} tokens: "
                              f"set vocab_size={need} or 0")

    @property
    def num_leaves(self) -> int:
        return self.num_classes * self.branching ** (self.height - 1)


@dataclass
class TreeSample:
    tokens: torch.Tensor  # (N, V) bool — leaf l on ⇔ token l present
    latents: list[torch.Tensor]  # per height L−1 .. 1: (N, D·B^{L−1−h}) bool
    labels: torch.Tensor  # (N,) long — the class y


class LatentTree:
    """Keep probabilities, analytic co-occurrence and a vectorised sampler for a :class:`LatentTreeConfig`.

    Attributes:
        D, L, B, V: classes, height, branching, vocabulary (= number of leaves).
        keep: (L−1,) float64 — keep[h−1] = κ_h, for the edges from height h into height h−1.
    """

    def __init__(self, cfg: LatentTreeConfig):
        self.cfg = cfg
        self.D, self.L, self.B, self.V = cfg.num_classes, cfg.height, cfg.branching, cfg.num_leaves
        h = torch.arange(1, self.L, dtype=torch.float64)
        if cfg.preset == "exact":
            self.keep = (self.L - h) / (self.L - h + 1)
        else:
            self.keep = torch.full_like(h, 1.0 - 1.0 / self.L)

    def level_size(self, height: int) -> int:
        """Number of nodes at ``height`` (0 = leaves, L−1 = classes)."""
        return self.D * self.B ** (self.L - 1 - height)

    def lca_height(self) -> torch.Tensor:
        """H(l, m): (V, V) long — height of the lowest common latent ancestor of leaves l, m.

        H(l, l) = 0 (a leaf is its own ancestor, P[l|l] = 1 = 1 − 0/L); H = L for leaves of
        different classes (they only meet at the observed root y). Since l // B^h == m // B^h
        stays true once true, H = L − #{h in 0..L−1 : l // B^h == m // B^h}.
        """
        leaf = torch.arange(self.V)
        same = torch.zeros(self.V, self.V, dtype=torch.long)
        for h in range(self.L):
            anc = leaf // self.B**h  # (V,) ancestor at height h
            same += (anc[:, None] == anc[None, :]).long()
        return self.L - same

    def path_probability(self, H: torch.Tensor) -> torch.Tensor:
        """Π_{h=1}^{H} κ_h for every entry of H (0 where H = L: different classes)."""
        cum = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(self.keep, 0),
                         torch.zeros(1, dtype=torch.float64)])
        return cum[H]  # cum[0] = 1, cum[H] = Π_{h<=H} κ_h, cum[L] = 0

    def cooccurrence_table(self) -> torch.Tensor:
        """Analytic P[l = 1 | m = 1]: (V, V) float64, row l, column m."""
        return self.path_probability(self.lca_height())

    def sample(self, n: int, generator: torch.Generator | None = None, y: torch.Tensor | None = None) -> TreeSample:
        """N trees at once, level by level (loop over the L−1 edges only); ``y`` (N,) fixes the classes."""
        y = torch.randint(self.D, (n,), generator=generator) if y is None else y
        node = torch.nn.functional.one_hot(y, self.D).bool()  # (N, D): class nodes at height L−1
        latents = [node]
        for h in range(self.L - 1, 0, -1):  # edge from height h into h−1, keep prob κ_h
            parent = node.repeat_interleave(self.B, dim=1)  # (N, size(h−1)): child i·B+j sees parent i
            node = parent & (torch.rand(parent.shape, generator=generator) < self.keep[h - 1])
            latents.append(node)
        return TreeSample(tokens=latents.pop(), latents=latents, labels=y)


# --------------------------------------------------------------------------- top-down variant
@dataclass(frozen=True)
class TopDownConfig:
    """The authors' deterministic top-down generator (Table 1), as we read it; defaults are theirs."""

    num_classes: int = 20
    vocab_size: int = 100  # M tokens; PAD gets id M
    seq_len: int = 30
    latent_sizes: tuple[int, ...] = (10, 20)  # latent levels between the classes and the tokens
    num_combinations: int = 2  # fixed child subsets per node
    num_children: int = 2  # nodes of the next level in each subset
    structure_seed: int = 0

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ConfigError(f"num_classes={self.num_classes}: set num_classes >= 2")
        if not self.latent_sizes or min(self.latent_sizes) < 1:
            raise ConfigError(f"latent_sizes={self.latent_sizes}: give at least one latent level, each of size >= 1")
        if self.num_combinations < 1:
            raise ConfigError(f"num_combinations={self.num_combinations}: set num_combinations >= 1")
        sizes = self.level_sizes
        if self.num_children < 1 or self.num_children > min(sizes[1:]):
            raise ConfigError(f"num_children={self.num_children}: must be between 1 and the smallest level size "
                              f"{min(sizes[1:])}")
        if self.max_tokens > self.seq_len:
            raise ConfigError(f"up to {self.max_tokens} tokens can be active but seq_len={self.seq_len}: "
                              f"set seq_len >= {self.max_tokens} or lower num_children")

    @property
    def level_sizes(self) -> tuple[int, ...]:
        """(classes, latent levels..., tokens)."""
        return (self.num_classes, *self.latent_sizes, self.vocab_size)

    @property
    def max_tokens(self) -> int:
        """Most active leaves a sample can have: each active node adds <= num_children, capped by level sizes."""
        active = 1
        for size in self.level_sizes[1:]:
            active = min(active * self.num_children, size)
        return active


@dataclass
class TopDownSample:
    x: torch.Tensor  # (N, T) long — PAD..., then the present tokens in random order
    y: torch.Tensor  # (N,) long
    latents: list[torch.Tensor]  # per latent level: (N, latent_sizes[k]) bool
    present: torch.Tensor  # (N, M) bool — the active leaves
    pad: torch.Tensor  # (N, T) bool — True at PAD positions (all before the first token)


class TopDownHierarchy:
    """Structure and sampler for a :class:`TopDownConfig`.

    Attributes:
        combos: one (n_parent, num_combinations, n_child) bool tensor per edge between levels
            (classes → latent 1 → ... → tokens); combos[e][i, c] marks the children in
            combination c of node i.
        pad_id: = vocab_size; the model's vocabulary is vocab_size + 1.
    """

    def __init__(self, cfg: TopDownConfig):
        self.cfg = cfg
        self.pad_id = cfg.vocab_size
        gen = torch.Generator().manual_seed(cfg.structure_seed)
        sizes = cfg.level_sizes
        self.combos = []
        for n_parent, n_child in zip(sizes[:-1], sizes[1:]):
            # a random num_children-subset per (node, combination): the first k of a random permutation
            pick = (torch.rand(n_parent, cfg.num_combinations, n_child, generator=gen)
                    .argsort(-1)[..., : cfg.num_children])
            self.combos.append(torch.zeros(n_parent, cfg.num_combinations, n_child, dtype=torch.bool)
                               .scatter_(-1, pick, True))

    def sample(self, n: int, generator: torch.Generator | None = None, y: torch.Tensor | None = None) -> TopDownSample:
        """N samples at once (loop over levels only). ``y`` (N,) long fixes the classes (e.g. to
        draw another structure's latents for the same labels); default uniform."""
        c = self.cfg
        y = torch.randint(c.num_classes, (n,), generator=generator) if y is None else y
        active = torch.nn.functional.one_hot(y, c.num_classes).bool()  # (N, classes)
        levels = []
        for combo in self.combos:
            choice = torch.randint(c.num_combinations, active.shape, generator=generator)  # (N, n_parent)
            picked = combo[torch.arange(combo.shape[0]), choice]  # (N, n_parent, n_child)
            active = (active[..., None] & picked).any(1)  # (N, n_child): union over active parents
            levels.append(active)
        present = levels.pop()  # (N, M)
        x, pad = sequence_from_presence(present, c.seq_len, self.pad_id, generator)
        return TopDownSample(x=x, y=y, latents=levels, present=present, pad=pad)


def sequence_from_presence(present: torch.Tensor, seq_len: int, pad_id: int,
                           generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Present tokens in random order at the end, left-padded: (N, M) bool -> x (N, T) long, pad (N, T) bool."""
    n, m = present.shape
    if int(present.sum(1).max()) > seq_len:
        raise ConfigError(f"a sample has {int(present.sum(1).max())} tokens > seq_len={seq_len}: raise seq_len")
    # absent tokens get key −1 so an ascending sort puts them first, present ones after in random order
    keys = torch.rand(n, m, generator=generator).masked_fill(~present, -1.0)
    keys, order = keys.sort(1)
    if m < seq_len:  # fewer tokens than positions: extra leading pads
        order = torch.cat([order.new_zeros(n, seq_len - m), order], 1)
        keys = torch.cat([keys.new_full((n, seq_len - m), -1.0), keys], 1)
    pad = keys[:, -seq_len:] < 0  # (N, T)
    x = order[:, -seq_len:].masked_fill(pad, pad_id)
    return x, pad


# --------------------------------------------------------------------------- one interface
VARIANTS = ("topdown", "tree")


class HierarchyData:
    """Either generator behind one call: ``draw(n, gen, y=None) -> x, pad, y, latents, present``.

    ``vocab`` counts PAD; ``levels`` names the latent levels, top (nearest the classes) first.
    The tree's presence vectors become sequences of length ``topdown.seq_len``.
    """

    def __init__(self, variant: str, topdown: TopDownConfig, tree: LatentTreeConfig):
        if variant not in VARIANTS:
            raise ConfigError(f"variant={variant!r}: use one of {', '.join(VARIANTS)}")
        self.seq_len = topdown.seq_len
        if variant == "topdown":
            self._topdown = TopDownHierarchy(topdown)
            self.vocab, self.classes, self.pad_id = topdown.vocab_size + 1, topdown.num_classes, self._topdown.pad_id
            self.levels = [f"latent level {k + 1} ({n})" for k, n in enumerate(topdown.latent_sizes)]
        else:
            self._tree = LatentTree(tree)
            self.vocab, self.classes, self.pad_id = self._tree.V + 1, self._tree.D, self._tree.V
            self.levels = [f"height {h} ({self._tree.level_size(h)})" for h in range(self._tree.L - 1, 0, -1)]
        self.variant = variant

    def draw(self, n: int, gen: torch.Generator, y: torch.Tensor | None = None):
        if self.variant == "topdown":
            s = self._topdown.sample(n, gen, y)
            return s.x, s.pad, s.y, s.latents, s.present
        s = self._tree.sample(n, gen, y)
        x, pad = sequence_from_presence(s.tokens, self.seq_len, self._tree.V, gen)
        return x, pad, s.labels, s.latents, s.tokens
