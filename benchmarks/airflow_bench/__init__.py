"""The parts of ``benchmarks/triggerer_airflow.py``: a real Airflow deployment measured from outside.

``procs``: CPU and memory of process trees; ``deployment``: the fault matrix's deployment with the
benchmark's DAGs and what it reads from the database and logs; ``triggerer``: the triggerer's
phases (idle, waiting, bursts of events); ``fanout``: deferral and resume of N mapped tasks with
the workers' CPU, provider against stock; ``families``: one mapped DAG per operator family and how
the emulator gives it capacity; ``report``: what is printed.
"""
