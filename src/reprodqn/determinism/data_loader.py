"""A DataLoader that resumes mid-epoch exactly: `exact.ResumableLoader`.

torch's DataLoader resumes only at an epoch's start: its order is drawn when an epoch's
iterator is made, and a resumed run starts a new one. And its workers' global generators
(seeded per worker, advanced by every item a worker made, kept across epochs with
persistent_workers) are in no resume point: a dataset drawing from them gave two fresh
runs that agree and a resumed run that parts, with nothing naming why.

So the loader keeps its place: the epoch, the batches the script has taken of it, and the
order stream's state where the epoch began. Each epoch's order is one draw of a
permutation from that stream (integers, the same on every machine); a resumed epoch draws
it again from the saved state and skips the batches already taken, without loading them.
Every item is watched: a dataset that draws from torch's, numpy's or Python's global
generator, in a worker or not, is refused in one line naming it; its randomness must come
from the item itself (a generator seeded by the index). The loader is a part of the resume
point like any other (get_state/set_state).

May import: core, determinism.
"""

from __future__ import annotations

from typing import Any

from reprodqn.core.errors import InputError

OWNED = ("sampler", "batch_sampler", "shuffle", "generator", "batch_size", "drop_last")
FIRST_LINE = "ResumableLoader:"  # how a worker's refusal is found in torch's re-raised text


class _Watched:
    """The dataset, each item's fetch checked against the global generators."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        from reprodqn.determinism import global_generators

        before = global_generators.fingerprints()
        item = self.dataset[index]
        after = global_generators.fingerprints()
        moved = [name for name, value in after.items() if before.get(name, value) != value]
        if moved:
            raise InputError(
                f"{FIRST_LINE} {type(self.dataset).__name__}[{index}] drew from "
                f"{' and '.join(moved)}, which no resume point holds (in a worker it is "
                "seeded per worker and advanced by every item it made): draw an item's "
                "randomness from a generator seeded by its index"
            )
        return item


class _Batches:
    """The current epoch's batches from the loader's place on: its batch_sampler."""

    def __init__(self, loader: ResumableLoader):
        self.loader = loader

    def __len__(self) -> int:
        return self.loader.batches_per_epoch - self.loader.position

    def __iter__(self):
        loader = self.loader
        order = loader.epoch_order()
        for start in range(loader.position, loader.batches_per_epoch):
            yield order[start * loader.batch_size : (start + 1) * loader.batch_size].tolist()


class ResumableLoader:
    """torch's DataLoader over `dataset` in batches of `batch_size`, each epoch's order
    drawn from `generator` (a torch stream: `streams["data"]`), resumable mid-epoch.
    `loader_options` go to the DataLoader (num_workers, persistent_workers, collate_fn,
    pin_memory...); the order's options are the loader's own. Put the loader among the
    resume point's parts."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        generator: Any,
        shuffle: bool = True,
        drop_last: bool = False,
        **loader_options: Any,
    ):
        import torch
        from torch.utils.data import DataLoader

        owned = sorted(set(loader_options) & set(OWNED))
        if owned:
            raise InputError(f"{FIRST_LINE} {', '.join(owned)}: set by the loader itself")
        if not isinstance(generator, torch.Generator):
            raise InputError(f"{FIRST_LINE} generator {generator!r}; expected a torch.Generator")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"{FIRST_LINE} batch_size {batch_size!r}; expected a whole number")
        self.dataset, self.batch_size, self.generator = dataset, batch_size, generator
        self.shuffle, self.drop_last = shuffle, drop_last
        self.epoch, self.position = 0, 0  # the epoch, and the batches taken of it
        self.epoch_start: Any = None  # the order stream's state where the epoch began
        self._order: Any = None
        worker_seeds = torch.Generator().manual_seed(0)  # workers' seeds: drawn by no item
        self.loader: Any = DataLoader(
            _Watched(dataset),  # type: ignore[arg-type]  # a map-style dataset, duck-typed
            batch_sampler=_Batches(self), generator=worker_seeds,
            **loader_options,
        )  # fmt: skip

    @property
    def batches_per_epoch(self) -> int:
        whole, rest = divmod(len(self.dataset), self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)

    def __len__(self) -> int:
        return self.batches_per_epoch

    def epoch_order(self):
        """This epoch's order: drawn at its start, or again from where it began."""
        import torch

        if self._order is None:
            if self.epoch_start is None:
                self.epoch_start = self.generator.get_state()
            else:  # resumed inside the epoch: its draw again, the stream where it was
                self.generator.set_state(self.epoch_start.clone())
            size = len(self.dataset)
            self._order = (
                torch.randperm(size, generator=self.generator) if self.shuffle
                else torch.arange(size)
            )  # fmt: skip
        return self._order

    def __iter__(self):
        try:
            for batch in self.loader:
                self.position += 1
                yield batch
        except InputError as refused:  # a worker's, re-raised by torch with its traceback
            text = str(refused)
            raise InputError(text[text.rfind(FIRST_LINE) :].splitlines()[0]) from None
        self.epoch, self.position, self.epoch_start, self._order = self.epoch + 1, 0, None, None

    def get_state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "epoch_start": self.epoch_start}

    def set_state(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.epoch_start, self._order = state["epoch_start"], None
