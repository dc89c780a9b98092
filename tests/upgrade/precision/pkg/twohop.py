"""Evidence follows one import: pkg.user imports pkg.tensors, but not torch itself."""  # none
import pkg.user  # none


def names_of(v):  # none
    return v.names  # low: UPG201
