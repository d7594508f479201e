"""What a DAG gives for a request, read and checked: the shapes the parse-time checks (operators)
and the request building (runtime) share, below both of them.

Worker pools, Batch jobs, pod templates, Kueue Jobs, labels, a calendar block's times, Jinja
templates in values, and the roles by which a task finds another task of its DAG. No Airflow, Google
or Kubernetes import at module level: a module here may load at parse time, when a quick rule of an
operator refuses a value and its explanation is wanted.
"""
