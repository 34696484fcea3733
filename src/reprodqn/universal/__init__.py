"""Universal numerics: the network's arithmetic in one written order of correctly rounded
IEEE-754 float32 operations (spec version in `reference.SPEC_VERSION`, the spec in
docs/universal-numerics.md), so a chain is one on every CPU, thread count and torch
version. reference (the spec in numpy), tiles and cpu (the CPU backend), layers, learning,
optim, guard (nothing else computes a float), record (how a run names the mode); api is the
public face that `reprodqn.exact.universal` offers other people's scripts.

May import: core."""
