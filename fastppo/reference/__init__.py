"""Pure-numpy twins of the kernels: the executable specification.

Float64, plain loops, written to be obviously right. Only tests and bench import this package.
"""
