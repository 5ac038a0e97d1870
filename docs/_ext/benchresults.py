"""Sphinx extension: the benchmark results written by bench/, if any.

``.. bench-results:: ../bench/results`` (relative to the document) renders
``summary.md`` from that directory (headings, paragraphs, pipe tables,
fenced code, images) and shows every ``*.png`` there. The results are
produced by running the benchmarks, not by the docs build, so a checkout
without them still builds: the directive then says how to produce them.

Only the small Markdown subset the bench scripts write is understood; any
other line is kept as text (escaped), so an unexpected construct degrades to
plain text instead of breaking the ``-W`` build.
"""

import glob
import os
import re

from rstnodes import parse_lines
from sphinx.util.docutils import SphinxDirective

_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|!\[([^\]]*)\]\(([^)]+)\)|\[([^\]]+)\]\(([^)]+)\)"
                     r"|(?<![\w*])\*([^*\s](?:[^*]*?[^*\s])?)\*(?![\w*])|([*_|\\])")


def inline(text):
    """Markdown inline markup -> reST (code, bold, links); the rest escaped."""
    def sub(m):
        if m.group(1) is not None:
            return f"``{m.group(1)}``"
        if m.group(2) is not None:
            return f"**{m.group(2)}**"
        if m.group(4) is not None:
            return m.group(3) or m.group(4)
        if m.group(6) is not None:
            return f"{m.group(5)} ({m.group(6)})"
        if m.group(7) is not None:
            return f"*{m.group(7)}*"
        return "\\" + m.group(8)
    return _INLINE.sub(sub, text)


def md_to_rst(md, rel_dir):
    """Lines of reST for Markdown text; images are resolved against rel_dir."""
    out = []
    images = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if s.startswith("```"):
            j = i + 1
            block = []
            while j < len(lines) and not lines[j].strip().startswith("```"):
                block.append(lines[j])
                j += 1
            out += ["", ".. code-block:: none", ""] + ["   " + b for b in block] + [""]
            i = j + 1
            continue
        if s.startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{2,}", lines[i + 1]):
            rows = []
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                if j != i + 1:
                    cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                    rows.append(cells)
                j += 1
            width = max(len(r) for r in rows)
            out += ["", ".. list-table::", "   :header-rows: 1", ""]
            for r in rows:
                r = r + [""] * (width - len(r))
                out.append("   * - " + (inline(r[0]) or "\\ "))
                for c in r[1:]:
                    out.append("     - " + (inline(c) or "\\ "))
            out.append("")
            i = j
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", s)
        if m:
            out += ["", f".. rubric:: {inline(m.group(2))}", ""]
            i += 1
            continue
        m = re.match(r"^!\[([^\]]*)\]\(([^)]+)\)$", s)
        if m:
            path = m.group(2)
            images.append(os.path.basename(path))
            out += ["", f".. image:: {rel_dir}/{path}", f"   :alt: {m.group(1) or path}", ""]
            i += 1
            continue
        if re.match(r"^[-*]\s+", s):
            out.append("* " + inline(re.sub(r"^[-*]\s+", "", s)))
            if i + 1 < len(lines) and not re.match(r"^\s*[-*]\s+", lines[i + 1]):
                out.append("")
            i += 1
            continue
        if not s:
            out.append("")
        else:
            if out and out[-1].startswith("* "):
                out.append("")
            out.append(inline(s))
        i += 1
    return out, images


class BenchResultsDirective(SphinxDirective):
    """``.. bench-results:: <dir relative to this document>``"""

    required_arguments = 1
    has_content = False

    def run(self):
        rel_dir = self.arguments[0].rstrip("/")
        _, abs_dir = self.env.relfn2path(rel_dir)
        summary = os.path.join(abs_dir, "summary.md")
        lines = []
        shown = []
        if os.path.isfile(summary):
            self.env.note_dependency(summary)
            with open(summary, encoding="utf-8") as f:
                body, shown = md_to_rst(f.read(), rel_dir)
            lines += body
        for png in sorted(glob.glob(os.path.join(abs_dir, "*.png"))):
            name = os.path.basename(png)
            if name in shown:
                continue
            self.env.note_dependency(png)
            lines += ["", f".. figure:: {rel_dir}/{name}", f"   :alt: {name}", "", f"   ``{name}``", ""]
        if not lines:
            lines = ["", ".. note::", "",
                     "   No benchmark results in this checkout. Run the benchmarks (see ``bench/``);",
                     "   they write ``bench/results/summary.md`` and plots that this page then shows.", ""]
        return parse_lines(self, lines, summary)


def setup(app):
    app.add_directive("bench-results", BenchResultsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
