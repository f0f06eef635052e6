"""mkdocs hook: pages with a diagram load the vendored mermaid, never the CDN's.

Listed under ``hooks:`` in ``mkdocs.yml``. mkdocs-material renders ```` ```mermaid ````
fences itself and, before the first diagram, loads
``https://unpkg.com/mermaid@11/dist/mermaid.min.js`` unless a global ``mermaid`` already
exists. This hook adds a ``<script>`` for the pinned copy under ``docs/javascripts/``
right before the theme's bundle, on the pages that have a diagram only (the file is
3.5 MB: ``extra_javascript`` would make every page download and parse it). The site then
renders without the internet. Version, sha256 and how to update it:
``docs/javascripts/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

MERMAID = "javascripts/mermaid-11.17.2.min.js"  # relative to docs_dir and to the site root
BUNDLE = re.compile(
    r'<script src="(?P<prefix>[^"]*)assets/javascripts/bundle\.[0-9a-f]+\.min\.js"></script>'
)
DIAGRAM = '<pre class="mermaid">'


def on_config(config):  # noqa: ANN001, ANN201 (mkdocs hook API)
    """mkdocs event: fail early when the vendored file is missing."""
    if not (Path(config.docs_dir) / MERMAID).is_file():
        raise PluginError(
            f"{MERMAID} not found under {config.docs_dir}: see docs/javascripts/README.md"
        )
    return config


def add_script(output: str, where: str) -> str:
    """``output`` with the mermaid script before the theme bundle if it has a diagram."""
    if DIAGRAM not in output:
        return output
    bundle = BUNDLE.search(output)
    if bundle is None:
        raise PluginError(
            f"{where}: no mkdocs-material bundle <script> found to put mermaid before"
        )
    tag = f'<script src="{bundle["prefix"]}{MERMAID}"></script>\n'
    return output[: bundle.start()] + tag + output[bundle.start() :]


def on_post_page(output: str, page, config) -> str:  # noqa: ANN001 (mkdocs hook API)
    """mkdocs event: add the script to one rendered page."""
    return add_script(output, page.file.src_uri)
