"""``python -m quiver_spark.cli``: the same as the ``quiver`` console script."""

from . import main

if __name__ == "__main__":
    main()
