"""reprodqn's integer INTER_LINEAR against OpenCV's: the universal mode's frames are the
authors' cv2.resize, byte for byte, on this x86-64 machine."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ale_py import ALEInterface, LoggerMode

from reprodqn.training import linear_resize
from reprodqn.training.atari import INTEGER_LINEAR, preprocess, rom_path

GAMES = ("breakout", "pong", "seaquest", "ms_pacman", "space_invaders")
FRAMES_PER_GAME = 2_000


def _screens(game: str, count: int, seed: int):
    """Pairs of consecutive RGB screens of random play (a game over restarts the game)."""
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(rom_path(game)))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(seed)
    height, width = ale.getScreenDims()
    screens = np.zeros((2, height, width, 3), np.uint8)
    for _ in range(count):
        action = actions[int(rng.integers(len(actions)))]
        for slot in range(2):
            ale.act(action)
            ale.getScreenRGB(screens[slot])
        if ale.game_over():
            ale.reset_game()
        yield screens


def _opencv(screens: np.ndarray, size: int = 84) -> np.ndarray:
    gray = cv2.cvtColor(np.maximum(screens[0], screens[1]), cv2.COLOR_RGB2GRAY)
    return cv2.resize(gray, (size, size), interpolation=cv2.INTER_LINEAR)


@pytest.mark.parametrize("game", GAMES)
def test_the_integer_resize_is_opencvs_on_real_frames(game):
    """2,000 frames of each of five games (10,000 in all), as the universal mode makes them."""
    differing = [
        step
        for step, screens in enumerate(_screens(game, FRAMES_PER_GAME, seed=len(game)))
        if not np.array_equal(preprocess(screens, 84, INTEGER_LINEAR), _opencv(screens))
    ]
    assert differing == [], f"{game}: {len(differing)} frames differ, the first at {differing[0]}"


@pytest.mark.parametrize("shape, size", [((250, 160), 84), ((210, 160), 64), ((100, 90), 7)])
def test_other_sizes_and_random_pixels_are_opencvs(shape, size):
    rng = np.random.default_rng(size)
    for _ in range(20):
        image = rng.integers(0, 256, shape, np.uint8)
        ours = linear_resize.resize(image, size)
        assert np.array_equal(ours, cv2.resize(image, (size, size), interpolation=cv2.INTER_LINEAR))


def test_the_tables_are_opencvs_arithmetic():
    """Each weight pair sums to one in fixed point (to a rounding), the edges stay inside the
    image, and a column worked by hand: f = fl32(1.5 * 160/84 - 0.5) = 2.357..., so the
    column starts at source column 2 with a1 = rint(0.357... * 2048) = 731."""
    first, weights = linear_resize.columns(160, 84)
    assert first[0] == 0 and first[-1] == 158
    assert set(weights.sum(axis=1)) <= {2047, 2048, 2049}
    top, bottom, down = linear_resize.rows(210, 84)
    assert (bottom - top <= 1).all() and top[-1] == 208
    # d = 1: f = fl32(1.5 * 1.9047619... - 0.5) = 2.3571428, so s = 2 and a1 = rint(0.357 * 2048)
    assert first[1] == 2 and weights[1, 1] == 731


def test_a_universal_run_takes_the_authors_resize():
    """env.resize: linear is accepted in the universal mode and computed by reprodqn."""
    from reprodqn.config.compute import check_universal
    from reprodqn.config.params import load_params
    from reprodqn.training.atari import frame_resize
    from tests.helpers import PARAMS

    params = load_params(PARAMS, ["compute.numerics=universal", "env.resize=linear"])
    check_universal(params)
    assert frame_resize(params) == INTEGER_LINEAR
    assert frame_resize(load_params(PARAMS)) == INTEGER_LINEAR  # the defaults
    standard = load_params(PARAMS, ["compute.numerics=standard", "env.resize=linear"])
    assert frame_resize(standard) == "linear"
