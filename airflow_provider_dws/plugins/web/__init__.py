"""The DWS page in the Airflow UI: a FastAPI app the api-server mounts at ``/dws``.

Only the api-server imports this package (``DwsPlugin.fastapi_apps`` builds the app when read);
the scheduler, triggerer, dag-processor and workers load the plugin without it.
"""
