"""A DataLoader resumes mid-epoch exactly (issue 70, case 6): torch's resumes only at an
epoch's start, and a dataset drawing from its workers' global generators (seeded per
worker, kept across epochs with persistent_workers) gave two fresh runs that agree and a
resumed run that parts, with nothing naming why. exact.ResumableLoader keeps its place in
the resume point and refuses such a dataset in one line naming it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn import exact
from reprodqn.core.errors import InputError


class Jittered:
    """Items with randomness of their own: a generator seeded by the index."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = np.random.default_rng(index).integers(0, 1000)
        return torch.tensor([index, int(noise)])


class GlobalDraws(Jittered):
    """The tester's dataset: its own RNG is the worker's global one."""

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, int(torch.randint(0, 1000, ()))])


def _loader(dataset, **options) -> exact.ResumableLoader:
    return exact.ResumableLoader(dataset, 3, torch.Generator().manual_seed(7), **options)


def _take(loader, batches: int) -> list[list[list[int]]]:
    taken: list = []
    while len(taken) < batches:
        for batch in loader:
            taken.append(batch.tolist())
            if len(taken) == batches:
                break
    return taken


@pytest.mark.parametrize(
    "options",
    [{}, {"num_workers": 2, "persistent_workers": True}],
    ids=["in-process", "two-persistent-workers"],
)
def test_a_loader_stopped_mid_epoch_and_resumed_gives_the_uninterrupted_batches(tmp_path, options):
    """Two epochs and a half (4 batches an epoch), stopped in the second epoch's middle."""
    whole = _take(_loader(Jittered(), **options), 10)
    first = _loader(Jittered(), **options)
    before = _take(first, 6)
    exact.save_resume_point(tmp_path, 6, {"data": first, "stream": first.generator})
    assert first.epoch == 1 and first.position == 2
    again = _loader(Jittered(), **options)
    again.generator.manual_seed(12345)  # a fresh process: the stream as any other run's
    exact.load_resume_point(tmp_path, {"data": again, "stream": again.generator})
    after = [batch.tolist() for batch in again]  # the second epoch's rest
    after += _take(again, 2)
    assert before + after == whole
    assert sorted(i for batch in whole[4:8] for i, _ in batch) == list(range(10))


def test_a_dataset_drawing_from_a_workers_global_generator_is_refused_naming_it():
    loader = _loader(GlobalDraws(), num_workers=2, persistent_workers=True)
    with pytest.raises(InputError) as refused:
        _take(loader, 1)
    message = str(refused.value)
    assert message.startswith("ResumableLoader: GlobalDraws[")
    assert "torch's global generator (torch.manual_seed)" in message and "\n" not in message


@pytest.mark.parametrize(
    "options, named",
    [
        ({"shuffle": True, "sampler": [0]}, "sampler: set by the loader itself"),
        ({"generator": None}, "generator None; expected a torch.Generator"),
    ],
)
def test_what_the_loader_sets_itself_is_refused_in_one_line(options, named):
    generator = options.pop("generator", torch.Generator())
    with pytest.raises(InputError, match=named):
        exact.ResumableLoader(Jittered(), 3, generator, **options)
