"""evalpipeline: uncertainty-aware analysis of AI evaluation logs.

The package is a plain library (no Dagster import outside
``evalpipeline.definitions``): every step is a function on files,
DataFrames or arrays that a notebook user can call directly.
"""

__version__ = "0.1.0"
