"""Fault matrix: real Airflow processes on PostgreSQL against ``dws-emulator``, one fault per scenario.

Run it with ``make faults`` (every scenario, LocalExecutor then CeleryExecutor) or ``python -m
tests.faults --executor local|celery|both --only NAME[,NAME]``; ``make test`` runs the CI-sized
subset on the LocalExecutor through ``tests/faults/test_fault_matrix.py``.
"""
