"""The provider's Airflow plugin (registers the off-peak timetable with the scheduler)."""
