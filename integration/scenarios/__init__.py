"""Child processes of ``integration/test_review_scenarios.py`` (see ``steps.py``)."""
