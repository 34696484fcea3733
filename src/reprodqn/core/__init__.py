"""The ground floor every other subpackage stands on: errors and exit codes, atomic
writes, events and progress lines, the workspace (every path and record name), run locks,
disk room, digests and worker counts.

May import: nothing else of reprodqn."""
