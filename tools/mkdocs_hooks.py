"""MkDocs hooks (mkdocs.yml): figures that live beside the results they show, served to
the site without a second copy in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {  # site path -> the committed figure
    "figures/laptop-figure1.png": "reference/laptop/reports/figure1.png",
    "figures/laptop-divergence.png": "reference/laptop/reports/figure_divergence.png",
    "figures/laptop-probe.png": "reference/laptop/reports/figure_probe.png",
}


def on_files(files, config):
    for site_path, source in FIGURES.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / source)))
    return files
