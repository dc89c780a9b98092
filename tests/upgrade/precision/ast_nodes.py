"""ast and pyflakes: `.names` of Import, ImportFrom and Global nodes."""  # none
import ast  # none


def imported_names(tree):  # none
    out = []  # none
    for node in ast.walk(tree):  # none
        if isinstance(node, (ast.Import, ast.ImportFrom)):  # none
            out.extend(alias.name for alias in node.names)  # low: UPG201
    return out  # none


class Visitor(ast.NodeVisitor):  # none
    def visit_Global(self, node):  # none
        self.globals = set(node.names)  # low: UPG201

    def visit_Nonlocal(self, node):  # none
        ast.Global.names  # none
