# dist.all_gather_into_tensor(out, inp) in a comment; x.names; x.refine_names("N")
"""Module docstring: x.names, x.refine_names('N'), torch.distributed.reduce_scatter_tensor"""
import torch.distributed as dist


def f():
    """dist.all_gather_into_tensor inside a docstring, x.align_to('N'), torch.align_tensors"""
    s = 'dist.reduce_scatter_tensor(a, b)'
    b = b"dist.all_gather_into_tensor"
    r = r'\dist.all_gather_into_tensor'
    u = U"x.names"
    t = '''multi
    line dist.all_gather_into_tensor
    x.rename(None) torch.zeros(2, names=('N',))
    '''
    c = "escaped \" dist.all_gather_into_tensor \" quote"
    msg = ("implicit " "concatenation dist.reduce_scatter_tensor")
    joined = "continued \
dist.all_gather_into_tensor"
    return s, b, r, u, t, c, msg, joined, dist  # x.has_names() in a trailing comment
