"""The thin Spark layer: the only package that imports pyspark."""
