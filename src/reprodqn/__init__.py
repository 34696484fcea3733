"""reprodqn: a replicable, deterministic DQN on Atari (Nagarajan et al. 2019), and the
exactness it is built on."""

from reprodqn.core.packaged import version as _version

__version__ = _version()  # one place: pyproject.toml, through the installed metadata
