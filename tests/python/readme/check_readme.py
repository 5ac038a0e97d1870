"""Take README.md's first-training-loop example out of the README, so that what CI runs is
what a new user copies, and check the README's "Two commands" section.

    python check_readme.py README.md OUT_DIR

Writes OUT_DIR/first_loop.py (the python block after the run.sh marker comment) and
OUT_DIR/expected.txt (the output lines shown after it, without the `$ mpiexec` line).
Exits non-zero, saying why, when the marker, the blocks, or the two commands are not there.
"""
import os
import re
import sys

MARKER = "<!-- tests/python/readme/run.sh runs the next python block under mpiexec -n 2 -->"
TWO_COMMANDS = ["bash ci/main.sh", "bash ci/test.sh"]


def fenced_blocks(text):
    """(info string, body) of every ``` block in text, in order (indented blocks too)."""
    return [(m.group(2), m.group(3)) for m in
            re.finditer(r"^([ \t]*)```([^\n]*)\n(.*?)^\1```[ \t]*$", text, re.M | re.S)]


def section(text, title):
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if m is None:
        sys.exit(f"README: no '## {title}' section")
    return m.group(1)


def main():
    readme, out = sys.argv[1], sys.argv[2]
    text = open(readme, encoding="utf-8").read()
    commands = [body.strip() for _, body in fenced_blocks(section(text, "Two commands"))]
    if commands != TWO_COMMANDS:
        sys.exit(f"README: the 'Two commands' section must show exactly {TWO_COMMANDS}, shows {commands}")
    if text.count(MARKER) != 1:
        sys.exit(f"README: the marker comment {MARKER!r} must appear exactly once")
    blocks = fenced_blocks(text.split(MARKER, 1)[1])
    if len(blocks) < 2 or blocks[0][0].strip() != "python":
        sys.exit("README: the marker must be followed by a ```python block and its output block")
    code, shown = blocks[0][1], blocks[1][1].splitlines()
    if not shown or not shown[0].startswith("$ mpiexec -n 2 python "):
        sys.exit(f"README: the output block after the example must start with '$ mpiexec -n 2 python ...', "
                 f"got {shown[:1]}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "first_loop.py"), "w", encoding="utf-8") as f:
        f.write(code)
    with open(os.path.join(out, "expected.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(sorted(shown[1:])) + "\n")
    print(f"README: two commands ok; example of {len(code.splitlines())} lines extracted")


if __name__ == "__main__":
    main()
