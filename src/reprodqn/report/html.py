"""The report as one self-contained HTML page: report.md rendered (markdown-it-py), with
every figure it links embedded as a data URI, so a reader can open one file anywhere (a
browser, an MLflow artifact view, an archive's preview) and see Table 1 and the figures."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from reprodqn.core.errors import InputError

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1b1b1b; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f2f2f2; }
img { max-width: 100%; height: auto; display: block; margin: 1em 0; }
blockquote { border-left: 4px solid #e0a000; margin: 1em 0; padding: .2em 1em;
             background: #fff8e6; }
code { background: #f4f4f4; padding: 0 3px; }
"""
IMAGE = re.compile(r'<img src="([^":/?#]+\.png)"')


def render(markdown: str, figures_dir: Path) -> str:
    """HTML for `markdown`, its relative PNG links replaced by the files' bytes."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    body = IMAGE.sub(lambda m: f'<img src="{_data_uri(Path(figures_dir) / m.group(1))}"', body)
    title = next((line[2:] for line in markdown.splitlines() if line.startswith("# ")), "Report")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n{body}</body>\n</html>\n"
    )


def _data_uri(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: figure linked from the report not found") from None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
