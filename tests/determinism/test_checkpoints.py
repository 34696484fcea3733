"""Weight checkpoints: the weights hash they carry, and files whose bytes repeat."""

from __future__ import annotations


def test_a_checkpoint_file_has_the_same_bytes_every_time_it_is_written(tmp_path):
    """safetensors orders its metadata by a per-process random hash; ours sorts it, so two
    runs with one chain also write byte-identical checkpoint files (and they still load)."""
    import torch

    from reprodqn.determinism.checkpoints import load_weights, save_weights

    tensors = {"layers.0.weight": torch.arange(6.0).reshape(2, 3), "layers.0.bias": torch.ones(2)}
    metadata = {
        "step": 7,
        "network": "nips",
        "n_actions": 4,
        "screen_size": 84,
        "history_length": 4,
    }
    files = set()
    for k in range(8):
        save_weights(tmp_path / f"{k}.safetensors", tensors, metadata)
        files.add((tmp_path / f"{k}.safetensors").read_bytes())
    assert len(files) == 1
    loaded, meta = load_weights(tmp_path / "0.safetensors")
    assert meta["step"] == "7"
    assert torch.equal(loaded["layers.0.weight"], tensors["layers.0.weight"])
