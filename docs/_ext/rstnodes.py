"""What the directives of docs/_ext share: reST lines they generate parsed
into document nodes, section titles included."""

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles


def parse_lines(directive, lines, source):
    """The nodes of `lines` (reST), parsed in `directive`'s document; source
    names where the lines came from in warnings."""
    node = nodes.section()
    node.document = directive.state.document
    nested_parse_with_titles(directive.state, StringList(lines, source=source), node)
    return node.children
