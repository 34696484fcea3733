"""Developer tools that read the package's own source: its import graph and layers, the
documentation's module table and parameter reference, and dvc.yaml's code
dependencies. Never imported by reprodqn."""
