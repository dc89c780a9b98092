"""A package whose modules get tensors from one that imports torch."""  # none
