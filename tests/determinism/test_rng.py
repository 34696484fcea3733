"""Named streams are independent, draw as the authors' code did, and their state round-trips
exactly through a resume point."""

import numpy as np
import pytest

from reprodqn.determinism import resume
from reprodqn.determinism.rng import FAMILIES, Streams


def draws(stream, n=50):
    return [stream.uniform() for _ in range(n)] + [stream.integer(0, 30) for _ in range(n)]


@pytest.mark.parametrize("family", FAMILIES)
def test_changing_one_seed_leaves_the_other_streams_alone(family):
    a = Streams({"exploration": 1, "minibatch": 2, "noop": 3}, family)
    b = Streams({"exploration": 1, "minibatch": 99, "noop": 3}, family)
    assert draws(a["exploration"]) == draws(b["exploration"])
    assert draws(a["noop"]) == draws(b["noop"])
    assert draws(a["minibatch"]) != draws(b["minibatch"])


def test_authors_family_is_a_random_state_per_stream_with_their_calls():
    ours = Streams({"exploration": 123, "minibatch": 123}, "authors")
    theirs = np.random.RandomState(123)
    assert [ours["exploration"].uniform() for _ in range(5)] == [
        theirs.uniform(0, 1) for _ in range(5)
    ]
    theirs = np.random.RandomState(123)
    assert [ours["minibatch"].integer(4, 999) for _ in range(5)] == [
        theirs.randint(4, 999) for _ in range(5)
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_state_survives_a_resume_point_and_continues_identically(family, tmp_path):
    a = Streams({"exploration": 7, "sticky": 8}, family)
    draws(a["exploration"], 13)
    resume.save(tmp_path, 1, {"streams": a.get_state()})
    expected = draws(a["exploration"], 5), draws(a["sticky"], 5)
    b = Streams({"exploration": 0, "sticky": 0}, family)
    b.set_state(resume.load(tmp_path, "cpu").state["streams"])
    assert draws(b["exploration"], 5) == expected[0]
    assert draws(b["sticky"], 5) == expected[1]


def test_unknown_stream_names_are_refused():
    with pytest.raises(ValueError, match="unknown random streams"):
        Streams({"dropout": 1}, "pcg64")
