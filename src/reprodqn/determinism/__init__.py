"""What makes a run repeatable and what records that it was: the CPU instruction-set
floor, torch's numerics settings, the named random streams, weight checkpoints that carry
their hash, resume points, and the provenance (conditions, fingerprint, SBOM) written
beside every result.

May import: core, universal."""
