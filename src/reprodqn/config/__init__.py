"""The params: the typed models of params.yaml, where values come from (files, overlays,
--set), their explanation, and the algorithm variants.

May import: core, determinism."""
