"""Child processes of ``integration/test_promises_when_processes_die.py`` (see ``steps.py``)."""
