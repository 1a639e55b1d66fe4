"""A YANG module's statement tree, enough for tests to read leaf names and enums from the real models.

Not a YANG compiler: statements (`keyword argument;` or `keyword argument { ... }`) with quoted strings
skipped over, `uses` expanded against the module's own groupings. The fixtures are the published models
(tests/fixtures/yang, each with its `.source.txt`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|//[^\n]*|/\*.*?\*/|[{};]|[^\s{};"\']+', re.DOTALL)


@dataclass
class Node:
    keyword: str
    argument: str = ""
    children: list[Node] = field(default_factory=list)

    def find(self, keyword: str, argument: str | None = None) -> Node:
        """The first child statement `keyword argument` (any argument when None)."""
        for child in self.children:
            if child.keyword == keyword and (argument is None or child.argument == argument):
                return child
        raise KeyError(f"no `{keyword} {argument}` under `{self.keyword} {self.argument}`")

    def all(self, keyword: str) -> list[Node]:
        return [c for c in self.children if c.keyword == keyword]


def parse(path: Path) -> Node:
    """The module statement of a .yang file."""
    root = Node("root")
    stack = [root]
    words: list[str] = []
    for tok in _TOKEN.findall(path.read_text()):
        if tok.startswith(("//", "/*")):
            continue
        if tok in ("{", ";"):
            node = Node(words[0] if words else "", " ".join(w.strip("\"'") for w in words[1:]))
            stack[-1].children.append(node)
            if tok == "{":
                stack.append(node)
            words = []
        elif tok == "}":
            stack.pop()
        elif tok != "+":  # "a" + "b" string concatenation
            words.append(tok)
    return root.children[0]


def leaves(module: Node, node: Node) -> list[str]:
    """Leaf names directly in `node`, with `uses` of the module's groupings expanded."""
    out = [c.argument for c in node.children if c.keyword in ("leaf", "leaf-list")]
    for uses in node.all("uses"):
        out += leaves(module, module.find("grouping", uses.argument.rpartition(":")[2]))
    return out
