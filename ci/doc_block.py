"""Print a code block of a reStructuredText page, so that CI runs the commands the
documentation shows, as written.

    python3 ci/doc_block.py PAGE NAME

The block is the first ``.. code-block::`` after the comment line

    .. ci/packaging.sh runs the next code block (NAME)

and is printed without its indentation. Exits non-zero, saying why, when the comment
is missing or repeated, or no code block follows it.
"""
import re
import sys
import textwrap


def block(text, name):
    marker = f".. ci/packaging.sh runs the next code block ({name})"
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(at) != 1:
        sys.exit(f"doc_block: {len(at)} lines {marker!r}, expected one")
    i = at[0] + 1
    while i < len(lines) and not re.match(r"\s*\.\. code-block::", lines[i]):
        if lines[i].strip():
            sys.exit(f"doc_block: {name}: expected a code block after the marker, found {lines[i]!r}")
        i += 1
    if i == len(lines):
        sys.exit(f"doc_block: {name}: no code block after the marker")
    indent = len(lines[i]) - len(lines[i].lstrip())
    i += 1
    body = []
    while i < len(lines):
        line = lines[i]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        if line.strip().startswith(":") and not body:   # options of the directive
            i += 1
            continue
        body.append(line)
        i += 1
    code = textwrap.dedent("\n".join(body)).strip("\n")
    if not code:
        sys.exit(f"doc_block: {name}: the code block is empty")
    return code + "\n"


def main():
    page, name = sys.argv[1], sys.argv[2]
    with open(page, encoding="utf-8") as f:
        sys.stdout.write(block(f.read(), name))


if __name__ == "__main__":
    main()
