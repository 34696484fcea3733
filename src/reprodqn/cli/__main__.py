"""`python -m reprodqn.cli`: what every job and test runs, the same as the `reprodqn` command."""

from reprodqn.cli.main import main

raise SystemExit(main())
