"""Developer tools that read the package's own source: its import graph and layers, the
README's module table, and dvc.yaml's code dependencies. Never imported by reprodqn."""
