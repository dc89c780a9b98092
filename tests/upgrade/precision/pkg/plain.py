import ast  # none


def names_of(node):  # none
    return node.names  # low: UPG201
