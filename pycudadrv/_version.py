"""pycudadrv's version: the one place it is written.

``pyproject.toml`` reads it (setuptools ``dynamic`` version, parsed without
importing the package) and ``pycudadrv.__version__`` re-exports it, so an
installed wheel, an in-place build and the package metadata agree.
"""

__version__ = "0.1.0"
