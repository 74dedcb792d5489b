"""autograd.scipy's functions that are autograd's own rather than SciPy's: `signal.convolve`
(autograd's tensor convolution with summed `dot_axes`). autograd's other `scipy` functions
stand for SciPy's and stage as SciPy's."""
