"""Fault matrix: real Airflow processes on PostgreSQL against ``dws-emulator``, one fault per scenario.

Run it with ``make faults`` (every scenario) or ``python -m tests.faults --only NAME[,NAME]``;
``make test`` runs the CI-sized subset through ``tests/faults/test_fault_matrix.py``.
"""
